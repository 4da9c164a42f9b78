"""Adaptive echoing in DataLoader workers: does the realised factor track R, stall-free?

Usage: python benchmarks/adaptive_workers.py [--trials 3] [--examples 2048]

Two DataLoader workers each read their half of a stream whose every example costs
``t_read`` seconds (a sleep: the read releases the GIL, as network reads and most
decoders do); the training loop takes batches of ``B`` and sleeps ``t_step`` per step.
The upstream delivers ``W / t_read`` examples/s and the loop wants ``B / t_step``, so
``R = B * t_read / (W * t_step)``. For each R, in the same process: no echo (factor 1),
the fixed factor ``e = min(R, max_factor)``, and ``EchoDataset(factor=Auto(max_factor=4))``.

Reported per run: the realised factor (emitted over fresh examples), the stall (the
share of the loop's time spent waiting for a batch, after the first), and steps/s. A
reference run reads instantly (``R = 0``): its stall is the DataLoader's own cost of
handing a batch over (collate, inter-process transfer), paid by every arm; the stall
that input-bound reads add is the run's stall less the reference's. Targets for
``Auto``: realised factor within 15% of ``min(R, max_factor)``; added stall below 5%
when ``R <= max_factor``. Writes results/adaptive_workers.json and .md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from dataecho import Auto
from dataecho.experiments.text import md_table
from dataecho.factor import DEFAULT_MAX_FACTOR
from dataecho.torch import EchoDataset, Streamed

RESULTS = Path(__file__).parent / "results"


@dataclass(frozen=True)
class Config:
    ratios: tuple[float, ...] = (2.0, 4.0, 6.0)  # R = B * t_read / (W * t_step)
    examples: int = 2048  # fresh examples per run (one epoch of the stream)
    batch_size: int = 32  # B
    workers: int = 2  # W
    step_ms: float = 10.0  # t_step, the training step
    trials: int = 3


class Timed(IterableDataset):  # type: ignore[misc]
    """``n`` examples split between the workers by index, ``t_read`` seconds each."""

    def __init__(self, n: int, read_s: float) -> None:
        self.n, self.read_s = n, read_s

    def __iter__(self) -> Any:
        info = get_worker_info()
        start, step = (0, 1) if info is None else (info.id, info.num_workers)
        for i in range(start, self.n, step):
            time.sleep(self.read_s)
            yield torch.full((4,), float(i))


def run(cfg: Config, ratio: float, factor: float | Auto) -> dict[str, float]:
    read_s = ratio * cfg.workers * cfg.step_ms / 1000 / cfg.batch_size
    ds = EchoDataset(Timed(cfg.examples, read_s), factor=factor, seed=0,
                     read=Streamed(split="stream"),
                     **({} if isinstance(factor, Auto) else {"buffer_size": 64}))
    loader = DataLoader(ds, batch_size=cfg.batch_size, num_workers=cfg.workers,
                        prefetch_factor=2)
    it = iter(loader)
    next(it)  # worker start-up is not part of the steady state
    start, waited, steps = time.perf_counter(), 0.0, 0
    while True:
        t = time.perf_counter()
        try:
            next(it)
        except StopIteration:
            break
        waited += time.perf_counter() - t
        time.sleep(cfg.step_ms / 1000)
        steps += 1
    wall = time.perf_counter() - start
    stats = ds.stats()
    return {"factor": stats.realised_factor, "stall": waited / wall,
            "steps_per_s": steps / wall, "steps": steps}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=Config.trials)
    p.add_argument("--examples", type=int, default=Config.examples)
    args = p.parse_args()
    cfg = Config(trials=args.trials, examples=args.examples)
    load = os.getloadavg()[0]
    reference = statistics.median(run(cfg, 0.0, 1.0)["stall"] for _ in range(cfg.trials))
    print(f"reference (R = 0): stall {reference:.1%}", flush=True)
    rows: list[dict[str, Any]] = []
    for ratio in cfg.ratios:
        target = min(ratio, DEFAULT_MAX_FACTOR)
        arms: list[tuple[str, float | Auto]] = [
            ("no echo", 1.0), (f"fixed e={target:g}", float(target)),
            ("auto", Auto(max_factor=DEFAULT_MAX_FACTOR))]
        for name, factor in arms:
            trials = [run(cfg, ratio, factor) for _ in range(cfg.trials)]
            rows.append({"R": ratio, "arm": name, "target": target,
                         **{k: statistics.median(t[k] for t in trials) for k in trials[0]},
                         "factor_range": [min(t["factor"] for t in trials),
                                          max(t["factor"] for t in trials)],
                         "stall_range": [min(t["stall"] for t in trials),
                                         max(t["stall"] for t in trials)]})
            print(f"R={ratio:g} {name:>10}: factor {rows[-1]['factor']:.2f}, stall "
                  f"{rows[-1]['stall']:.1%}, {rows[-1]['steps_per_s']:.1f} steps/s", flush=True)
    RESULTS.mkdir(exist_ok=True)
    meta = {"config": asdict(cfg), "load_average_at_start": load,
            "reference_stall": reference,
            "machine": f"{platform.machine()}, {os.cpu_count()} CPUs", "rows": rows}
    (RESULTS / "adaptive_workers.json").write_text(json.dumps(meta, indent=1) + "\n")
    lines = ["# Adaptive echoing in DataLoader workers", "",
             f"`python benchmarks/adaptive_workers.py --trials {cfg.trials} --examples "
             f"{cfg.examples}`: {cfg.workers} workers, B = {cfg.batch_size}, step "
             f"{cfg.step_ms:g} ms, medians of {cfg.trials} trials (ranges in brackets); "
             f"{meta['machine']}, load average {load:.1f} at the start. Reference run "
             f"(instant reads): stall {reference:.1%}, the loader's own hand-over cost; "
             "'added' is a run's stall less that.", ""]
    lines += md_table(
        ["R", "arm", "realised factor", "target", "stall", "added stall", "steps/s"],
        ([f"{r['R']:g}", r["arm"],
          f"{r['factor']:.2f} [{r['factor_range'][0]:.2f}, {r['factor_range'][1]:.2f}]",
          f"{r['target']:g}",
          f"{r['stall']:.1%} [{r['stall_range'][0]:.1%}, {r['stall_range'][1]:.1%}]",
          f"{max(r['stall'] - reference, 0.0):.1%}", f"{r['steps_per_s']:.1f}"]
         for r in rows), "rlrrrrr")
    auto = [r for r in rows if r["arm"] == "auto"]
    met = all(abs(r["factor"] - r["target"]) <= 0.15 * r["target"] for r in auto)
    stall = all(r["stall"] - reference < 0.05 for r in auto if r["R"] <= DEFAULT_MAX_FACTOR)
    lines += ["", f"Targets for `Auto`: realised factor within 15% of min(R, "
              f"{DEFAULT_MAX_FACTOR}) at every R: {'met' if met else 'not met'}; added stall "
              f"below 5% where R <= {DEFAULT_MAX_FACTOR}: {'met' if stall else 'not met'}."]
    (RESULTS / "adaptive_workers.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines[-1:]))


if __name__ == "__main__":
    main()
