"""Ray Data CPUs needed to keep a trainer fed, with and without example echoing.

Usage: python benchmarks/ray_preprocessing.py [--repeats 5] [--steps 96]

The pipeline is Ray Data's: PNG images in the object store -> decode (PIL) and resize
-> ``echo_rows(factor)`` -> augmentation (random shift and flip), the three maps fused
into one Ray Data operator; the local Ray cluster is started with ``num_cpus`` = the
CPUs preprocessing gets (one task per CPU). The images are Fashion-MNIST stored as
224x224 PNGs (upscaled, as image buckets hold photos larger than the model's input) and
decoded back to 28x28, so decoding costs a fixed, measured CPU time per fresh row. The
trainer, in the driver, takes ``steps`` steps of ``batch_size`` rows at a fixed step
time (a sleep, so it uses no CPU) and records the time it waits for batches: the stall fraction.

For each factor (1 = no echoing, 2, 4) and each CPU count the run records the stall and
the preprocessing CPU time per step (``time.thread_time`` in the maps, carried in the
rows to the trainer) and the decode tasks' wall time over the trial's, the parallelism
Ray Data reached (its per-operator resource reservation is off: on a 2-CPU cluster it
kept one task in flight). "CPUs needed" is the fewest CPUs whose median stall stays below
5%; "CPU demand" is preprocessing CPU-seconds per trainer second, the fractional count
a perfectly packed pool would need. The step time is set from a calibration in the same
run so that factor 1 needs about 1.4 CPUs: on a 2-core machine the grid of 1 and 2 CPUs
brackets it. Writes results/ray_preprocessing.json and .md.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import ray
from PIL import Image

from dataecho.datasets import load_fashion_mnist
from dataecho.experiments.text import md_table
from dataecho.ray_data import COPY_COLUMN, CountCopies, echo_rows

RESULTS = Path(__file__).parent / "results"
SIDE = 224  # stored image side: decode cost grows with the pixels


@dataclass(frozen=True)
class Config:
    factors: tuple[int, ...] = (1, 2, 4)  # echo factors; 1 is the baseline
    cpus: tuple[int, ...] = (1, 2)  # preprocessing CPUs (concurrent Ray Data tasks)
    steps: int = 96  # trainer steps per trial, the first `warmup` not timed
    warmup: int = 8  # steps while the pipeline fills, left out of the stall
    batch_size: int = 128  # rows per step (and per Ray Data block)
    target_cpus: float = 1.4  # factor-1 CPU demand the step time is set for
    stall_limit: float = 0.05  # "fed": median stall below this
    repeats: int = 5  # trials per (factor, CPUs)
    seed: int = 0


def encode(images: np.ndarray) -> list[bytes]:
    out = []
    for image in images:
        buffer = io.BytesIO()
        Image.fromarray(image).resize((SIDE, SIDE), Image.BILINEAR).save(buffer, format="PNG")
        out.append(buffer.getvalue())
    return out


def decode(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    start, wall = time.thread_time(), time.perf_counter()
    k = SIDE // 28
    images = np.stack([np.asarray(Image.open(io.BytesIO(png))) for png in batch["png"]])
    small = images.reshape(len(images), 28, k, 28, k).mean(axis=(2, 4), dtype=np.float32)
    cost = np.full(len(images), (time.thread_time() - start) / len(images))
    busy = np.full(len(images), (time.perf_counter() - wall) / len(images))
    return {"id": batch["id"], "image": small / 255.0, "label": batch["label"],
            "decode_cpu": cost, "decode_wall": busy}


def augment(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    start = time.thread_time()
    images = batch["image"].copy()
    for i, (row, copy) in enumerate(zip(batch["id"], batch[COPY_COLUMN], strict=True)):
        rng = np.random.default_rng((int(row), int(copy)))
        images[i] = np.roll(images[i], rng.integers(-2, 3, size=2), axis=(0, 1))
        if rng.random() < 0.5:
            images[i] = images[i][:, ::-1]
    cost = np.full(len(images), (time.thread_time() - start) / max(len(images), 1))
    return {**batch, "image": images, "augment_cpu": cost}


def pipeline(blocks: list[Any], factor: int) -> Any:
    # Three task-based maps with the same arguments: Ray Data fuses them into one operator.
    ds = ray.data.from_arrow_refs(blocks)
    ds = ds.map_batches(decode, batch_format="numpy", batch_size=None)
    ds = echo_rows(ds, factor, batch_size=None)
    return ds.map_batches(augment, batch_format="numpy", batch_size=None)


def trial(blocks: list[Any], factor: int, cpus: int, step_time: float,
          config: Config) -> dict[str, Any]:
    fresh_blocks = -(-config.steps // factor)
    ds = pipeline(blocks[:fresh_blocks], factor)
    batches = CountCopies(ds.iter_batches(batch_size=config.batch_size, prefetch_batches=2),
                          drop=False)
    waited, cpu, busy, steps = 0.0, 0.0, 0.0, 0
    start = time.perf_counter()
    while steps < config.steps:
        before = time.perf_counter()
        batch = next(batches)
        if steps == config.warmup:
            start, waited, busy = before, 0.0, 0.0
        waited += time.perf_counter() - before
        fresh = batch[COPY_COLUMN] == 0
        cpu += float(batch["decode_cpu"][fresh].sum() + batch["augment_cpu"].sum())
        busy += float(batch["decode_wall"][fresh].sum())
        time.sleep(step_time)  # the accelerator's step
        steps += 1
    wall = time.perf_counter() - start
    del batches  # stops the rest of the pipeline
    return {"factor": factor, "cpus": cpus, "stall": waited / wall,
            "cpu_per_step": cpu / steps, "demand": cpu / steps / step_time,
            "decode_parallelism": busy / wall}


def calibrate(pngs: list[bytes]) -> float:
    """Decode + augment CPU seconds per fresh row, measured here on one core."""
    batch = {"id": np.arange(len(pngs)), "png": np.array(pngs, dtype=object),
             "label": np.zeros(len(pngs), dtype=np.int64)}
    decoded = decode(batch)
    out = augment({**decoded, COPY_COLUMN: np.zeros(len(pngs), dtype=np.int64)})
    return float(decoded["decode_cpu"].sum() + out["augment_cpu"].sum()) / len(pngs)


def summary(trials: list[dict[str, Any]], config: Config) -> list[dict[str, Any]]:
    rows = []
    for factor in config.factors:
        for cpus in config.cpus:
            mine = [t for t in trials if (t["factor"], t["cpus"]) == (factor, cpus)]
            stalls = [t["stall"] for t in mine]
            parallel = statistics.median(t["decode_parallelism"] for t in mine)
            demand = [t["demand"] for t in mine]
            rows.append({"factor": factor, "cpus": cpus,
                         "stall_median": statistics.median(stalls),
                         "stall_range": [min(stalls), max(stalls)],
                         "demand_median": statistics.median(demand),
                         "demand_range": [min(demand), max(demand)],
                         "decode_parallelism_median": parallel})
    return rows


def needed(rows: list[dict[str, Any]], factor: int, config: Config) -> int | None:
    fed = [r["cpus"] for r in rows if r["factor"] == factor
           and r["stall_median"] < config.stall_limit]
    return min(fed) if fed else None


def main(config: Config) -> None:
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    images, labels = load_fashion_mnist("train")
    n = config.steps * config.batch_size
    pngs = encode(images[:n])
    per_row = calibrate(pngs[:512])
    step_time = config.batch_size * per_row / config.target_cpus
    load_before = os.getloadavg()
    table = pa.table({"id": np.arange(n), "png": pa.array(pngs, pa.binary()),
                      "label": labels[:n].astype(np.int64)})
    trials = []
    for cpus in config.cpus:  # one cluster per CPU count: its num_cpus is the budget
        ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False,
                 _node_ip_address="127.0.0.1")
        context = ray.data.DataContext.get_current()
        context.enable_progress_bars = False
        # Ray Data reserves half a small cluster's CPUs per operator, which held the fused
        # map to one task in flight on 2 CPUs (parallelism 0.9, factor 1 starved).
        context.op_resource_reservation_enabled = False
        try:
            blocks = [ray.put(table.slice(i, config.batch_size))
                      for i in range(0, n, config.batch_size)]
            trial(blocks, 1, cpus, step_time, config)  # starts the worker processes
            for repeat in range(config.repeats):
                for factor in config.factors:
                    t = trial(blocks, factor, cpus, step_time, config)
                    trials.append({**t, "repeat": repeat})
                    print(f"cpus {cpus} repeat {repeat} factor {factor}: stall "
                          f"{t['stall']:.1%}, demand {t['demand']:.2f} CPUs, decode "
                          f"parallelism {t['decode_parallelism']:.2f}", flush=True)
        finally:
            ray.shutdown()
    report(config, trials, per_row, step_time, load_before, os.getloadavg())


def report(config: Config, trials: list[dict[str, Any]], per_row: float, step_time: float,
           load_before: tuple[float, ...], load_after: tuple[float, ...]) -> None:
    rows = summary(trials, config)
    demand = {f: statistics.median(t["demand"] for t in trials if t["factor"] == f)
              for f in config.factors}
    base_cpus = needed(rows, 1, config)
    version = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True,
                             text=True, check=False, cwd=Path(__file__).parent).stdout.strip()
    result = {"config": asdict(config), "code_version": version, "ray": ray.__version__,
              "cpu_per_fresh_row_s": per_row, "step_time_s": step_time,
              "loadavg_before": load_before, "loadavg_after": load_after,
              "pipeline": "from_arrow_refs(PNG 224x224) -> map_batches(decode+resize) -> "
                          "echo_rows(factor) -> map_batches(augment), fused; "
                          "ray.init(num_cpus=cpus)",
              "rows": rows, "trials": trials,
              "needed": {str(f): needed(rows, f, config) for f in config.factors},
              "demand": {str(f): d for f, d in demand.items()}}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "ray_preprocessing.json").write_text(json.dumps(result, indent=1) + "\n")
    lines = [
        "# Ray Data CPUs to keep a trainer fed, with and without echoing "
        "(benchmarks/ray_preprocessing.py)", "",
        f"Ray {ray.__version__}, code {version}. Decode (224x224 PNG to 28x28) and "
        f"augmentation cost {per_row * 1e3:.2f} ms CPU per fresh row (calibrated in the run); "
        f"the trainer takes {config.steps} steps of {config.batch_size} rows at "
        f"{step_time * 1e3:.1f} ms a step (first {config.warmup} not timed). "
        f"{config.repeats} trials per cell, median [min, max]. Load average (1, 5, 15 min): "
        f"{', '.join(f'{x:.2f}' for x in load_before)} before, "
        f"{', '.join(f'{x:.2f}' for x in load_after)} after.", ""]
    lines += md_table(
        ["factor", "CPUs", "stall", "CPU demand (CPUs)", "decode parallelism"],
        ([f"{r['factor']}", f"{r['cpus']}",
          f"{r['stall_median']:.1%} [{r['stall_range'][0]:.1%}, {r['stall_range'][1]:.1%}]",
          f"{r['demand_median']:.2f} [{r['demand_range'][0]:.2f}, {r['demand_range'][1]:.2f}]",
          f"{r['decode_parallelism_median']:.2f}"] for r in rows), "rrrrr")
    lines += ["", f"CPUs needed (fewest with median stall < {config.stall_limit:.0%}) and the "
              "ratio to factor 1:", ""]
    table = []
    for f in config.factors:
        cpus = needed(rows, f, config)
        shown = "more than " + str(max(config.cpus)) if cpus is None else str(cpus)
        ratio = f"{base_cpus / cpus:.1f}" if cpus and base_cpus else "-"
        table.append([f"{f}", shown, ratio, f"{demand[f]:.2f}", f"{demand[1] / demand[f]:.2f}"])
    lines += md_table(["factor", "CPUs needed", "ratio", "CPU demand", "ratio"], table, "rrrrr")
    (RESULTS / "ray_preprocessing.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def parse() -> Config:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=Config.repeats)
    parser.add_argument("--steps", type=int, default=Config.steps)
    args = parser.parse_args()
    return Config(repeats=args.repeats, steps=args.steps)


if __name__ == "__main__":
    main(parse())
