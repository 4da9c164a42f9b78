"""Wall-clock speedup of echoing on data read over a throttled link: the demo, in full.

Usage: python benchmarks/wallclock.py [--ratios 6 4 2] [--factors 2 4 R auto]
           [--variants before_augmentation after_augmentation batch] [--seeds 0 1 2]
           [--preset default|quick|smoke] [--budget SECONDS] [--device auto|cpu|cuda]
           [--tag NAME] [--out DIR] [--replot]

The grid is seeds x R x variants x factors, in that order (a grid stopped part-way has
every condition once before any twice). For every (R, seed) one baseline (no echo:
the same pipeline for all three variants) runs first, and each echoed run is compared
with it. A factor of "R" means R rounded half up; "auto" is adaptive echoing at that
variant's level. Every finished run is appended to benchmarks/results/wallclock[-TAG].jsonl,
keyed by (R, factor, variant, seed, preset, budget): run the same command again and it
skips what is there and continues. The key has no device, so a store holds one device's
runs: --device resolving to another device than the stored runs' is refused (use a
new --tag). The step time t_down is measured once per (preset,
device) and stored too, so a resumed grid sets the same bandwidths. After each run the
report is rewritten from the store: wallclock[-TAG].md (mean and min-max over seeds,
then every run), .png (speedup against realised factor, one panel per variant) and
.json (summary plus every run with its configuration, pipeline and versions).
The full grid (3 R x 3 variants x 10 echoed runs per seed + 3 baselines per seed,
x 3 seeds = 99 runs) takes hours on 2 CPU cores; see docs/results/wallclock.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from dataecho.demo.config import ARMS, PRESETS, DemoConfig
from dataecho.demo.data import prepare
from dataecho.demo.grid import (
    BASELINE,
    Spec,
    calibration,
    factor_of,
    finished,
    plan,
    run_grid,
    run_records,
)
from dataecho.demo.gridreport import markdown, plot, summary, with_speedups
from dataecho.demo.remote.process import ServerProcess
from dataecho.demo.report import measured_ratio, versions, write_json
from dataecho.experiments.store import Store
from dataecho.factor import DEFAULT_MAX_FACTOR
from dataecho.pipeline import VARIANTS

RESULTS = Path(__file__).parent / "results"


class Bench:
    """The real runs. Data, shard server and calibration start at the first run, so a
    finished grid starts nothing; the server stops when the ``with`` block ends."""

    def __init__(self, cfg: DemoConfig, store: Store) -> None:
        self.cfg, self.store, self.stack = cfg, store, ExitStack()
        self.env: dict[str, Any] | None = None

    def __enter__(self) -> Bench:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stack.close()

    def _start(self) -> dict[str, Any]:
        from dataecho.demo.calibrate import calibrate  # torch: imported to train only
        from dataecho.demo.command import measure_t_down
        from dataecho.demo.model import pick_device
        from dataecho.demo.train import Evaluator

        cfg = self.cfg
        data = prepare(cfg.train_size, cfg.eval_size, cfg.shard_size)
        device, note = pick_device(cfg.device, cfg.threads)
        print(note)
        server = self.stack.enter_context(ServerProcess(data.shard_dir, latency=cfg.latency))
        key = json.dumps([cfg.preset, device.type])
        saved = calibration(self.store, key)
        if saved is not None:
            t_down = float(saved["t_down_s"])
            print(f"t_down = {1000 * t_down:.1f} ms, as measured when this grid began")
        else:
            t_down = alone = measure_t_down(cfg, data, device)
            if cfg.calibrate_under_load:  # as the demo: time the step while the baseline streams
                server.bandwidth = calibrate(t_down, cfg.ratio, data.bytes_per_sample,
                                             cfg.batch_size).bandwidth
                t_down = measure_t_down(cfg, data, device, url=server.url)
            self.store.append({"kind": "calibration", "key": key, "t_down_s": t_down,
                               "t_down_alone_s": alone, "device_note": note,
                               "versions": versions()})
        return {"data": data, "device": device, "note": note, "server": server,
                "t_down": t_down, "versions": versions(),
                "evaluate": Evaluator(data.eval_images, data.eval_labels, device)}

    def __call__(self, spec: Spec) -> dict[str, Any]:
        from dataecho.demo.calibrate import calibrate
        from dataecho.demo.command import one_run

        env = self.env = self.env or self._start()
        cfg, data = self.cfg, env["data"]
        cal = calibrate(env["t_down"], spec.ratio, data.bytes_per_sample, cfg.batch_size)
        env["server"].bandwidth = cal.bandwidth
        variant = cfg.variant if spec.variant == BASELINE else spec.variant
        run_cfg = dataclasses.replace(cfg, ratio=spec.ratio, seed=spec.seed, variant=variant,
                                      budget_s=cfg.budget_s or cfg.budget_steps * cal.fetch_s)
        result = one_run(run_cfg, env["server"].url, spec.name, spec.factor, env["device"],
                         env["evaluate"])
        return {**result.as_dict(), "ratio_seen": measured_ratio(result),
                "budget_s": run_cfg.budget_s, "t_down_s": env["t_down"],
                "bandwidth_Bps": cal.bandwidth, "target": cfg.target,
                "device": str(env["device"]), "device_note": env["note"],
                "versions": env["versions"], "config": run_cfg.as_dict()}


def report(store: Store, stem: dict[str, Path], title: str, argv: Sequence[str]) -> None:
    """Rewrites the .md, .png and .json of ``stem`` from the store."""
    runs = run_records(store)
    calibrations = [r for r in store if r.get("kind") == "calibration"]
    if not runs:
        return
    groups = summary(runs)
    stem["md"].write_text(markdown(runs, calibrations, title))
    plot(groups, stem["png"])
    write_json(stem["json"], {
        "store": store.path.name, "argv": list(argv), "summary": groups,
        "calibrations": calibrations, "runs": with_speedups(runs),
        "trials": max((g["trials"] for g in groups), default=0)})


def convert_legacy(old: Path, store: Store) -> bool:
    """Writes the rows of a one-file result (before the store existed) into ``store``.

    Those grids ran example echoing before augmentation only; their rows become run
    records (variant ``before_augmentation``, baselines ``none``) with no run time.
    """
    saved = json.loads(old.read_text()) if old.exists() else {}
    if store.path.exists() or "rows" not in saved:
        return False
    preset, budget = saved["config"]["preset"], saved["config"]["budget_s"]
    store.append({"kind": "calibration", "key": json.dumps([preset, saved["device"]]),
                  "t_down_s": saved["t_down_s"], "device_note": saved["device_note"],
                  "versions": saved["versions"], "converted_from": old.name})
    for row in saved["rows"]:
        spec = Spec(row["ratio_set"], row["factor"],
                    BASELINE if row["factor"] == 1.0 else "before_augmentation", row["seed"],
                    preset, budget)
        measured = row["train_s"] / (row["train_s"] - row["wait_s"])
        store.append({**{k: v for k, v in row.items() if k not in (
                          "ratio_set", "ratio_measured", "speedup", "fresh_ratio")},
                      **dataclasses.asdict(spec), "name": spec.name, "ratio_seen": measured,
                      "target": saved["target"], "device": saved["device"],
                      "device_note": saved["device_note"], "versions": saved["versions"],
                      "config": saved["config"], "kind": "run", "key": spec.key(),
                      "run_wall_s": None, "converted_from": old.name})
    return True


def check_args(args: argparse.Namespace) -> None:
    """Raises ValueError, naming the flag, for a value that would fail later or mislead.

    Runs before any data is prepared: a bad ratio would otherwise surface as a division
    by zero or a bandwidth error after minutes of set-up, a budget of 0 would silently
    fall back to the preset's while the store key says 0.
    """
    for ratio in args.ratios:
        if not (math.isfinite(ratio) and ratio >= 1):
            raise ValueError(
                f"--ratios must be finite numbers >= 1 (seconds to fetch a batch over "
                f"seconds per training step: input-bound), got {ratio:g}; pass e.g. "
                "--ratios 6 4 2")
    for name in args.factors:
        try:
            factor_of(name, 1.0)
        except ValueError:
            raise ValueError(
                f"--factors must each be a finite number >= 1 (1 is the baseline, which "
                f"always runs), 'R' (R rounded half up) or 'auto', got {name!r}; pass e.g. "
                "--factors 2 4 R auto") from None
    for seed in args.seeds:
        if not 0 <= seed < 2**63:
            raise ValueError(f"--seeds must be ints in [0, 2**63), got {seed}; pass e.g. "
                             "--seeds 0 1 2")
    if args.max_factor is not None and args.max_factor < 1:
        raise ValueError(
            f"--max-factor must be an int >= 1 (adaptive echoing's most uses of one "
            f"example), got {args.max_factor}; pass e.g. --max-factor 8")
    if args.budget is not None and not (math.isfinite(args.budget) and args.budget > 0):
        raise ValueError(
            f"--budget must be a finite number of seconds > 0, got {args.budget:g}; pass "
            "e.g. --budget 300, or leave it out for the preset's budget (2,000 baseline "
            "steps at R)")


def device_type(name: str) -> str:
    """The device type ``--device name`` trains on here: ``"cpu"`` or ``"cuda"``."""
    import torch

    available = torch.cuda.is_available()
    if name == "cuda" and not available:
        raise ValueError(
            f"--device cuda needs a CUDA GPU, but torch.cuda.is_available() is False "
            f"(torch {torch.__version__}); pass --device cpu, or --device auto to use a GPU "
            "only where there is one")
    return "cuda" if name != "cpu" and available else "cpu"


def check_store_device(store: Store, device: str, asked: str, tag: str) -> None:
    """Raises ValueError when ``store`` holds runs trained on a device other than ``device``.

    The store key has no device (keeping the keys of stored grids), so one store holds
    the runs of one device: a run stored on the CPU must not count as a GPU run.
    """
    stored = {str(r["device"]).split(":")[0] for r in run_records(store) if r.get("device")}
    other = sorted(stored - {device})
    if other:
        fresh = f"{tag}-{device}" if tag else device
        raise ValueError(
            f"--device {asked} trains on {device}, but {store.path} (--tag {tag!r}) holds "
            f"runs trained on {', '.join(other)}: its keys have no device, so they would be "
            f"taken as {device} runs and skipped; pass --device {other[0]} to continue that "
            f"grid, or --tag {fresh} to start a separate store for {device}")


def check_store_max_factor(store: Store, max_factor: int | None, tag: str) -> None:
    """Raises ValueError when ``store`` holds adaptive runs of another ``max_factor``.

    The store key has no ``max_factor`` (keeping the keys of stored grids): one store
    holds one cap's adaptive runs, as it holds one device's.
    """
    # Runs stored before the field existed were capped at the one default of then, 4.
    stored = {r.get("config", {}).get("max_factor", DEFAULT_MAX_FACTOR)
              for r in run_records(store) if r.get("factor") == "auto"}
    other = sorted(stored - {max_factor}, key=str)
    if other:
        given = "its default" if max_factor is None else max_factor
        raise ValueError(
            f"--max-factor {given}, but {store.path} (--tag {tag!r}) holds adaptive "
            f"runs with max_factor {other[0]}: its keys have no max_factor, so they would "
            f"be skipped as done; pass --max-factor {other[0]} to continue that grid, or a "
            f"new --tag for max_factor {given}")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--ratios", type=float, nargs="+", default=[6.0, 4.0, 2.0],
                   help="R values to set, each a finite number >= 1")
    p.add_argument("--factors", nargs="+", default=["2", "4", "R", "auto"],
                   help="fixed factors >= 1, 'R' (R rounded half up) or 'auto'")
    p.add_argument("--variants", nargs="+", choices=ARMS, default=list(VARIANTS))
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="ints >= 0")
    p.add_argument("--preset", choices=("default", "quick", "smoke"), default="default")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                   help="training device; one store holds one device's runs")
    p.add_argument("--max-factor", type=int,
                   help="adaptive echoing's most uses of one example (default: Auto's, 8 "
                        "before augmentation, 4 after it and for batches); one store holds "
                        "one value's runs")
    p.add_argument("--budget", type=float,
                   help="training seconds per run, > 0 (default: preset's)")
    p.add_argument("--tag", default="", help="suffix of the result files, e.g. 'gpu'")
    p.add_argument("--out", type=Path, default=RESULTS, help="folder of the result files")
    p.add_argument("--replot", action="store_true",
                   help="rewrite the .md, .png and .json from the store; run nothing")
    args = p.parse_args(argv)
    try:
        check_args(args)
        device = None if args.replot else device_type(args.device)
    except ValueError as error:
        p.error(str(error))  # the message and exit status 2, before any data or training
    argv = sys.argv[1:] if argv is None else list(argv)
    name = args.out / f"wallclock{'-' + args.tag if args.tag else ''}"
    stem = {ext: Path(f"{name}.{ext}") for ext in ("jsonl", "json", "md", "png")}
    store = Store(stem["jsonl"])
    if convert_legacy(stem["json"], store):
        print(f"converted {stem['json']} into {store.path}")
    title = f"benchmarks/wallclock.py{' --tag ' + args.tag if args.tag else ''}"
    if device is not None:
        try:
            check_store_device(store, device, args.device, args.tag)
            check_store_max_factor(store, args.max_factor, args.tag)
        except ValueError as error:
            p.error(str(error))
        budget = {"budget_s": args.budget} if args.budget is not None else {}
        cfg = DemoConfig(preset=args.preset, device=args.device, max_factor=args.max_factor,
                         **{**PRESETS[args.preset], **budget})
        specs = plan(args.ratios, args.factors, args.variants, args.seeds,
                     preset=args.preset, budget=args.budget)
        try:
            with Bench(cfg, store) as bench:
                run_grid(specs, store, bench, after=lambda: report(store, stem, title, argv))
        except KeyboardInterrupt:
            print(f"\ninterrupted: {len(finished(store))} runs are stored in {store.path}; run "
                  "the same command again to continue", file=sys.stderr)
            return 130
    report(store, stem, title, argv)
    if stem["md"].exists():
        print(stem["md"].read_text())
    return 0

if __name__ == "__main__":
    sys.exit(main())
