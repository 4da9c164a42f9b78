"""Wall-clock speedup of echoing on data read over a throttled link: the demo, in full.

Usage: python benchmarks/wallclock.py [--ratios 6 4 2] [--factors 2 4 R auto]
           [--variants before_augmentation after_augmentation batch] [--seeds 0 1 2]
           [--preset default|quick|smoke] [--budget SECONDS] [--device auto|cpu|cuda]
           [--tag NAME] [--out DIR] [--replot]

The grid is seeds x R x variants x factors, in that order (a grid stopped part-way has
every condition once before any twice). For every (R, seed) one baseline (no echo:
the same pipeline for all three variants) runs first, and each echoed run is compared
with it. A factor of "R" means R rounded; "auto" is adaptive echoing at that variant's
level. Every finished run is appended to benchmarks/results/wallclock[-TAG].jsonl,
keyed by (R, factor, variant, seed, preset, budget): run the same command again and it
skips what is there and continues. The step time t_down is measured once per (preset,
device) and stored too, so a resumed grid sets the same bandwidths. After each run the
report is rewritten from the store: wallclock[-TAG].md (mean and min-max over seeds,
then every run), .png (speedup against realised factor, one panel per variant) and
.json (summary plus every run with its configuration, pipeline and versions).
The full grid (3 R x 3 variants x 10 echoed runs per seed + 3 baselines per seed,
x 3 seeds = 99 runs) takes hours on 2 CPU cores; see docs/demo.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from dataecho.demo.calibrate import calibrate
from dataecho.demo.command import measure_t_down, one_run
from dataecho.demo.config import PRESETS, DemoConfig
from dataecho.demo.data import prepare
from dataecho.demo.grid import BASELINE, Spec, Store, plan, run_grid
from dataecho.demo.gridreport import markdown, plot, summary, with_speedups
from dataecho.demo.model import pick_device
from dataecho.demo.report import measured_ratio, versions, write_json
from dataecho.demo.train import Evaluator
from dataecho.pipeline import VARIANTS
from dataecho.remote import ShardServer

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

        cfg = self.cfg
        data = prepare(cfg.train_size, cfg.eval_size, cfg.shard_size)
        device, note = pick_device(cfg.device, cfg.threads)
        print(note)
        server = self.stack.enter_context(ShardServer(data.shard_dir, latency=cfg.latency))
        key = json.dumps([cfg.preset, device.type])
        saved = self.store.calibration(key)
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
    runs = store.runs()
    calibrations = [r for r in store.records() if r.get("kind") == "calibration"]
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


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--ratios", type=float, nargs="+", default=[6.0, 4.0, 2.0])
    p.add_argument("--factors", nargs="+", default=["2", "4", "R", "auto"])
    p.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--preset", choices=("default", "quick", "smoke"), default="default")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--budget", type=float, help="training seconds per run (default: preset's)")
    p.add_argument("--tag", default="", help="suffix of the result files, e.g. 'gpu'")
    p.add_argument("--out", type=Path, default=RESULTS, help="folder of the result files")
    p.add_argument("--replot", action="store_true",
                   help="rewrite the .md, .png and .json from the store; run nothing")
    args = p.parse_args(argv)
    argv = sys.argv[1:] if argv is None else list(argv)
    name = args.out / f"wallclock{'-' + args.tag if args.tag else ''}"
    stem = {ext: Path(f"{name}.{ext}") for ext in ("jsonl", "json", "md", "png")}
    store = Store(stem["jsonl"])
    if convert_legacy(stem["json"], store):
        print(f"converted {stem['json']} into {store.path}")
    title = f"benchmarks/wallclock.py{' --tag ' + args.tag if args.tag else ''}"
    if not args.replot:
        budget = {"budget_s": args.budget} if args.budget else {}
        cfg = DemoConfig(preset=args.preset, device=args.device,
                         **{**PRESETS[args.preset], **budget})
        specs = plan(args.ratios, args.factors, args.variants, args.seeds,
                     preset=args.preset, budget=args.budget)
        try:
            with Bench(cfg, store) as bench:
                run_grid(specs, store, bench, after=lambda: report(store, stem, title, argv))
        except KeyboardInterrupt:
            print(f"\ninterrupted: {len(store.done())} runs are stored in {store.path}; run "
                  "the same command again to continue", file=sys.stderr)
            return 130
    report(store, stem, title, argv)
    if stem["md"].exists():
        print(stem["md"].read_text())
    return 0

if __name__ == "__main__":
    sys.exit(main())
