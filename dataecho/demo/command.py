"""``dataecho demo``: baseline, fixed echoing and adaptive echoing, side by side."""

from __future__ import annotations

import dataclasses
import gc
import importlib.util
import math
import sys
import time
from pathlib import Path
from typing import Any

import torch

from ..cli import missing
from ..datasets import fashion_mnist
from .calibrate import calibrate, time_step, time_step_streaming
from .config import DemoConfig, check_config, parse_args
from .data import DemoData, prepare
from .loader import Factor, make_loader
from .model import pick_device, small_cnn
from .remote.process import ServerProcess
from .report import (
    measured_ratio,
    peak_rss_mb,
    plot,
    summarize,
    table,
    versions,
    write_json,
)
from .train import Evaluator, RunResult, Step, train_run

WHY_TARGET = ("the small CNN (weights averaged) reaches it in about 1,100 steps of fresh "
              "data, so the baseline, input-bound at R times the step time, finishes in "
              "2-4 minutes on 2 CPU cores; 90% would take about twice as long")

VARIANT_NOTES = {
    "before_augmentation": "examples, before augmentation (every copy gets its own crop and "
                           "flip), in the worker",
    "after_augmentation": "examples, after augmentation (identical copies), in the worker",
    "batch": "whole batches, in the trainer's process (EchoBatches around the DataLoader)",
    "device": "examples, decoded in the worker, kept on the trainer's device and each copy "
              "cropped and flipped there (DeviceEcho around the DataLoader)",
}


def main(argv: list[str]) -> int:
    """Runs the demo; returns the exit status (0 ok, 1 no data, 130 interrupted).

    A bad flag exits with status 2 and a message naming it, before any data is prepared.

    Example (seconds; writes its files under ``--out``)::

        dataecho demo --smoke --out /tmp/demo
    """
    return execute(parse_args(argv))


def execute(cfg: DemoConfig) -> int:
    """:func:`run`, with its expected failures as a message and an exit status."""
    try:
        return run(cfg)
    except FileNotFoundError as error:
        print(f"dataecho demo: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\ninterrupted: the shard server is stopped and the workers are shut down",
              file=sys.stderr)
        return 130


def runs_of(cfg: DemoConfig) -> list[tuple[str, Factor]]:
    """The runs to make: baseline, fixed echoing, and adaptive when it is installed."""
    e = cfg.fixed_factor
    runs: list[tuple[str, Factor]] = [("baseline", 1.0), (f"echo e={e:g}", e)]
    if cfg.adaptive and importlib.util.find_spec("dataecho.adaptive.examples") is not None:
        runs.append(("adaptive", "auto"))
    elif cfg.adaptive:
        print("  adaptive run skipped: dataecho.adaptive.examples is not available")
    return runs


def run(cfg: DemoConfig) -> int:
    """The demo with a resolved configuration; writes table.txt, results.json, accuracy.png.

    The table and the JSON are rewritten as each run ends, so an interrupted or failed
    demo keeps the runs it finished; the figure is drawn last, and a missing matplotlib
    or a failed plot costs only the figure.
    """
    check_config(cfg)  # a bad value fails here, not after the data and the baseline run
    began = time.perf_counter()
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    device, device_note = pick_device(cfg.device, cfg.threads)
    print(f"dataecho demo ({cfg.preset}): Fashion-MNIST streamed over HTTP from a throttled "
          f"server on 127.0.0.1, decoded and augmented in {cfg.num_workers} DataLoader worker(s)")
    print(f"  echoing: {VARIANT_NOTES[cfg.variant]}")
    print(f"  {device_note}")
    print(f"  target: {cfg.target:.0%} accuracy on {cfg.eval_size:,} held-out test images "
          f"(evaluated every {cfg.eval_every} steps, clock paused); "
          f"{WHY_TARGET if cfg.preset == 'default' else 'a ' + cfg.preset + ' preset'}")
    print(f"  results: {out}/table.txt and results.json, rewritten as each run ends; "
          + ("accuracy.png at the end" if not missing("matplotlib") else
             "no accuracy.png, as matplotlib is not installed (pip install 'dataecho[demo]' "
             "draws it)"))
    absent = fashion_mnist.missing_files(cfg.data)  # a --data DIR was checked with the flags
    if absent:
        raise FileNotFoundError(
            f"Fashion-MNIST is not installed: {fashion_mnist.DEFAULT_ROOT} lacks "
            f"{', '.join(absent)}; "
            "install it with `apt-get install dataset-fashion-mnist` (or `make data`), or "
            "pass --data DIR, the folder you downloaded the four files to")
    data = prepare(cfg.train_size, cfg.eval_size, cfg.shard_size, log=print, root=cfg.data)
    with ServerProcess(data.shard_dir, latency=cfg.latency) as server:
        cal = calibrate(measure_t_down(cfg, data, device), cfg.ratio, data.bytes_per_sample,
                        cfg.batch_size)
        server.bandwidth = cal.bandwidth
        idle = cal.t_down
        if cfg.calibrate_under_load:
            cal = calibrate(measure_t_down(cfg, data, device, url=server.url), cfg.ratio,
                            data.bytes_per_sample, cfg.batch_size)
            server.bandwidth = cal.bandwidth
        cfg = dataclasses.replace(cfg, budget_s=cfg.budget_s or cfg.budget_steps * cal.fetch_s)
        print(f"  calibration: training step t_down = {1000 * cal.t_down:.1f} ms while the "
              f"baseline pipeline runs ({1000 * idle:.1f} ms alone); one batch is "
              f"{cal.bytes_per_batch / 1e3:.0f} kB of shards; bandwidth set to "
              f"{cal.bandwidth / 1e6:.2f} MB/s so a batch takes {1000 * cal.fetch_s:.0f} ms "
              f"to arrive (R = {cfg.ratio:g}); budget {cfg.budget_s:.0f} s of training per run")
        evaluate = Evaluator(data.eval_images, data.eval_labels, device)
        facts: dict[str, Any] = {
            "config": cfg.as_dict(), "device": str(device), "device_note": device_note,
            "calibration": {"t_down_s": cal.t_down, "t_down_alone_s": idle,
                            "ratio_set": cal.ratio, "bytes_per_batch": cal.bytes_per_batch,
                            "bandwidth_Bps": cal.bandwidth,
                            "bytes_per_sample": data.bytes_per_sample},
            "versions": versions(), "trials": 1}
        planned = runs_of(cfg)
        results: list[RunResult] = []
        for name, factor in planned:
            results.append(one_run(cfg, server.url, name, factor, device, evaluate))
            facts["server"] = {"requests": server.requests, "bytes_sent": server.bytes_sent}
            save(out, cfg, facts, results, len(planned), time.perf_counter() - began)
    rows, text = save(out, cfg, facts, results, len(planned), time.perf_counter() - began)
    ratio = measured_ratio(results[0])
    print(f"\nmeasured R = {ratio:.2f} (baseline stalled {results[0].stall_fraction:.0%} of "
          f"its training time at {results[0].steps / results[0].train_s:.1f} steps/s)\n")
    print(text)
    for row in rows[1:]:
        if row["speedup"] is not None:
            pace = (f"{row['speedup']:.2f}x faster" if row["speedup"] >= 1
                    else f"slower ({row['speedup']:.2f}x the speed)")
            model = ("" if row["predicted_speedup"] is None else
                     f"; the model predicted {row['predicted_speedup']:.2f}x "
                     f"({row['efficiency']:.0%} reached)")
            print(f"\n{row['run']}: {pace} to {cfg.target:.0%} than the baseline, with "
                  f"{row['fresh_ratio']:.2f}x its fresh examples{model}")
    files = ["table.txt", "results.json"]
    if draw(results, cfg.target, out / "accuracy.png",
            f"Fashion-MNIST over a throttled link, R = {ratio:.1f} measured"):
        files.insert(1, "accuracy.png")
    rss = peak_rss_mb(results)
    trainer = "?" if rss["main_mb"] is None else f"{rss['main_mb']:.0f}"
    worker = "?" if rss["largest_worker_mb"] is None else f"{rss['largest_worker_mb']:.0f}"
    print(f"\npeak RSS {trainer} MB (trainer) + {worker} MB (largest worker); "
          f"{time.perf_counter() - began:.0f} s in all; files in {out}/: {', '.join(files)}")
    return 0


def save(out: Path, cfg: DemoConfig, facts: dict[str, Any], results: list[RunResult],
         planned: int, wall_s: float) -> tuple[list[dict[str, Any]], str]:
    """Writes table.txt and results.json for the runs done so far; returns rows and table.

    ``complete`` in the JSON says whether every planned run is in it.
    """
    ratio = measured_ratio(results[0])
    rows = summarize(results, ratio)
    text = table(rows, cfg.target)
    if len(results) < planned:
        text += f"\n({len(results)} of {planned} runs so far)"
    (out / "table.txt").write_text(text + "\n")
    write_json(out / "results.json", {
        **facts, "measured_ratio": ratio, "rows": rows, "runs": [r.as_dict() for r in results],
        "complete": len(results) == planned, "rss": peak_rss_mb(results), "wall_s": wall_s,
    })
    return rows, text


def draw(results: list[RunResult], target: float, path: Path, title: str) -> bool:
    """The figure, drawn last: without matplotlib, or if plotting fails, a line says so
    and the table and JSON already written stay as they are. Returns whether it drew."""
    if missing("matplotlib"):
        print(f"\nno {path.name}: matplotlib is not installed; pip install 'dataecho[demo]' "
              "draws it (the table and JSON hold every number)")
        return False
    try:
        plot(results, target, path, title)
    except Exception as error:  # a figure is never worth the measured numbers
        print(f"\nno {path.name}: plotting failed ({type(error).__name__}: {error}); the "
              "table and JSON hold every number")
        return False
    return True


def measure_t_down(cfg: DemoConfig, data: DemoData, device: torch.device,
                   url: str | None = None) -> float:
    """Median seconds of a training step of the demo's model on real augmented batches.

    With ``url``, the batches come from the baseline pipeline streaming from the server
    (at whatever bandwidth it has), so the step is timed under the CPU load of the runs.
    """
    torch.manual_seed(cfg.seed)
    probe = Step(small_cnn(), cfg.lr, device)
    if url is None:
        return time_step(probe, data.train_images, data.train_labels,
                         batch_size=cfg.batch_size, steps=cfg.calibration_steps, seed=cfg.seed)
    arm = make_loader(url, batch_size=cfg.batch_size, buffer_size=cfg.buffer_size,
                      seed=cfg.seed + 1, pad=cfg.pad, num_workers=cfg.num_workers)
    try:
        return time_step_streaming(probe, arm.loader, steps=cfg.calibration_steps)
    finally:
        # The last reference: the persistent workers exit now, not whenever the
        # collector next runs (EchoBatches holds a reference cycle).
        del arm
        gc.collect()


def one_run(cfg: DemoConfig, url: str, name: str, factor: Factor, device: torch.device,
            evaluate: Evaluator) -> RunResult:
    """One training run to ``cfg.target`` on the shards served at ``url``."""
    arm = make_loader(url, factor=factor, variant=cfg.variant, batch_size=cfg.batch_size,
                      buffer_size=cfg.buffer_size, seed=cfg.seed, pad=cfg.pad,
                      num_workers=cfg.num_workers, max_factor=cfg.max_factor,
                      device=str(device))
    print(f"\n{name}: {arm.pipeline}")
    torch.manual_seed(cfg.seed)  # every run starts from the same weights
    step = Step(small_cnn(), cfg.lr, device)
    try:
        result = train_run(RunResult(name, factor, arm.pipeline, cfg.variant), arm.loader, step,
                           evaluate, target=cfg.target, budget_s=cfg.budget_s or math.inf,
                           eval_every=cfg.eval_every, num_samples=arm.num_samples)
    finally:
        # The last reference: the persistent workers exit now, not whenever the
        # collector next runs (EchoBatches holds a reference cycle).
        del arm
        gc.collect()
    verdict = (f"reached {cfg.target:.0%} in {result.time_to_target:.1f} s" if result.reached
               else f"MISSED {cfg.target:.0%} within {cfg.budget_s:.0f} s "
                    f"(best {result.best_accuracy:.2%})")
    print(f"  {name}: {verdict} (worker start-up {result.startup_s:.1f} s, not counted)")
    return result

