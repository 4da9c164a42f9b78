"""Wall-clock speedup of echoing on data read over a throttled link: the demo, in full.

Usage: python benchmarks/wallclock.py [--ratios 2 4 6] [--factors 2 4 R auto]
                                      [--seeds 0 1 2] [--preset default|quick|smoke]
                                      [--budget SECONDS] [--device auto|cpu|cuda] [--tag NAME]
                                      [--replot]

For every R the server's bandwidth is set from one start-up measurement of the training
step; for every seed the baseline (factor 1) runs first and every other factor is
compared with that seed's baseline. A factor of "R" means R rounded; "auto" is adaptive
echoing. Writes benchmarks/results/wallclock[-TAG].json (every run, the configuration,
versions), .md (mean and min-max over seeds) and .png (speedup against factor per R).
The full grid (3 R x 5 factors x 3 seeds = 45 runs) takes hours on 2 CPU cores; pass
fewer values for a reduced run, and say so when quoting it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dataecho.demo.calibrate import calibrate
from dataecho.demo.command import measure_t_down, one_run
from dataecho.demo.config import PRESETS, DemoConfig
from dataecho.demo.data import prepare
from dataecho.demo.loader import Factor
from dataecho.demo.model import pick_device
from dataecho.demo.report import measured_ratio, peak_rss_mb, versions, write_json
from dataecho.demo.train import Evaluator
from dataecho.remote import ShardServer

RESULTS = Path(__file__).parent / "results"


def factor_of(name: str, ratio: float) -> Factor:
    """``"R"`` -> R rounded, ``"auto"`` -> ``"auto"``, else the number."""
    if name == "auto":
        return "auto"
    return float(max(1, round(ratio))) if name == "R" else float(name)


def run_grid(cfg: DemoConfig, ratios: list[float], factors: list[str], seeds: list[int],
             save: Callable[[dict[str, Any]], None]) -> None:
    """Every (R, seed, factor) run; ``save`` gets the rows so far after each run."""
    data = prepare(cfg.train_size, cfg.eval_size, cfg.shard_size)
    device, note = pick_device(cfg.device, cfg.threads)
    print(note)
    rows: list[dict[str, Any]] = []
    grid: dict[str, Any] = {"rows": rows, "device": str(device), "device_note": note}
    with ShardServer(data.shard_dir, latency=cfg.latency) as server:
        t_down = measure_t_down(cfg, data, device)
        if cfg.calibrate_under_load:  # as the demo: time the step while the baseline streams
            server.bandwidth = calibrate(t_down, ratios[0], data.bytes_per_sample,
                                         cfg.batch_size).bandwidth
            t_down = measure_t_down(cfg, data, device, url=server.url)
        grid["t_down_s"] = t_down
        evaluate = Evaluator(data.eval_images, data.eval_labels, device)
        for ratio in ratios:
            cal = calibrate(t_down, ratio, data.bytes_per_sample, cfg.batch_size)
            server.bandwidth = cal.bandwidth
            for seed in seeds:
                budget = cfg.budget_s or cfg.budget_steps * cal.fetch_s
                run_cfg = dataclasses.replace(cfg, ratio=ratio, seed=seed, budget_s=budget)
                wanted = [factor_of(f, ratio) for f in ["1", *factors]]
                unique = list(dict.fromkeys(wanted))  # "R" may equal a listed factor
                base = None
                for factor in unique:
                    name = "baseline" if factor == 1.0 else f"e={factor}"
                    print(f"\nR={ratio:g} seed={seed} {name}")
                    result = one_run(run_cfg, server.url, name, factor, device, evaluate)
                    base = base or result
                    sped = result.reached and base.reached and bool(result.time_to_target)
                    rows.append({
                        "ratio_set": ratio, "ratio_measured": measured_ratio(base),
                        "seed": seed, "factor": factor, **result.as_dict(),
                        "speedup": (base.time_to_target / result.time_to_target  # type: ignore[operator]
                                    if sped else None),
                        "fresh_ratio": (result.fresh_to_target / base.fresh_to_target  # type: ignore[operator]
                                        if sped else None)})
                    grid["worker_rss_mb"] = max(r["worker_rss_mb"] or 0.0 for r in rows)
                    save(grid)  # an interrupted grid keeps what it measured


def summary(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mean and min-max of speedup and fresh ratio per (R, factor), over seeds."""
    groups: dict[tuple[float, str], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["ratio_set"], str(row["factor"])), []).append(row)
    out = []
    for (ratio, factor), group in groups.items():
        speed = [r["speedup"] for r in group if r["speedup"] is not None]
        fresh = [r["fresh_ratio"] for r in group if r["fresh_ratio"] is not None]
        out.append({"ratio_set": ratio, "factor": factor, "trials": len(group),
                    "reached": sum(r["reached"] for r in group),
                    "ratio_measured": statistics.mean(r["ratio_measured"] for r in group),
                    "realised_factor": statistics.mean(r["realised_factor"] for r in group),
                    "speedup_mean": statistics.mean(speed) if speed else None,
                    "speedup_min": min(speed, default=None),
                    "speedup_max": max(speed, default=None),
                    "fresh_ratio_mean": statistics.mean(fresh) if fresh else None})
    return out


def markdown(groups: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    def num(v: float | None, fmt: str) -> str:
        return "not measured" if v is None else format(v, fmt)

    lines = [f"# Wall-clock benchmark (benchmarks/wallclock.py{meta['tag']})", "",
             f"{meta['preset']} preset: target {meta['target']:.0%}, {meta['note']}; "
             f"t_down {1000 * meta['t_down_s']:.1f} ms; {meta['versions']['platform']}, "
             f"torch {meta['versions']['torch']}; {meta['wall_s'] / 60:.1f} min in all.",
             f"Arguments: `{' '.join(meta.get('argv', []))}`; one row per (R, factor), "
             "speedups over the seeds run.", "",
             "| R set | R measured | factor | realised e | reached | speedup mean "
             "(min-max) | bound min(R,e) | fresh ratio |",
             "|---|---:|---|---:|---:|---:|---:|---:|"]
    for g in groups:
        e = g["realised_factor"]
        spread = (f"{num(g['speedup_mean'], '.2f')}x ({num(g['speedup_min'], '.2f')}-"
                  f"{num(g['speedup_max'], '.2f')})" if g["speedup_mean"] else "not measured")
        lines.append(f"| {g['ratio_set']:g} | {g['ratio_measured']:.2f} | {g['factor']} | "
                     f"{e:.2f} | {g['reached']}/{g['trials']} | {spread} | "
                     f"{min(g['ratio_measured'], e):.2f}x | {num(g['fresh_ratio_mean'], '.2f')} |")
    lines += ["", "Speedup: the seed's baseline time to target over the run's, only where both "
              "reached it. Bound: min(measured R, realised factor)."]
    return "\n".join(lines) + "\n"


def plot(groups: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for ratio in sorted({g["ratio_set"] for g in groups}):
        mine = [g for g in groups if g["ratio_set"] == ratio and g["speedup_mean"] is not None]
        fixed = sorted((g["realised_factor"], g["speedup_mean"]) for g in mine
                       if g["factor"] != "auto")
        line = ax.plot(*zip(*fixed, strict=True), marker="o", label=f"R = {ratio:g}, fixed e")
        for g in mine:
            if g["factor"] == "auto":
                ax.plot(g["realised_factor"], g["speedup_mean"], marker="*", markersize=14,
                        color=line[0].get_color(), linestyle="",
                        label=f"R = {ratio:g}, adaptive")
    ax.plot([1, 6], [1, 6], color="grey", linestyle=":", label="speedup = e")
    ax.set_xlabel("realised echo factor")
    ax.set_ylabel("wall-clock speedup to target")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ratios", type=float, nargs="+", default=[2.0, 4.0, 6.0])
    p.add_argument("--factors", nargs="+", default=["2", "4", "R", "auto"])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--preset", choices=tuple(PRESETS), default="default")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--budget", type=float, help="training seconds per run (default: preset's)")
    p.add_argument("--tag", default="", help="suffix of the result files, e.g. 'gpu'")
    p.add_argument("--replot", action="store_true",
                   help="rewrite the .md and .png from the tag's .json; run nothing")
    args = p.parse_args()
    tag = f"-{args.tag}" if args.tag else ""
    if args.replot:
        saved = json.loads((RESULTS / f"wallclock{tag}.json").read_text())
        (RESULTS / f"wallclock{tag}.md").write_text(markdown(saved["summary"], saved))
        plot(saved["summary"], RESULTS / f"wallclock{tag}.png")
        return
    began = time.perf_counter()
    budget = {"budget_s": args.budget} if args.budget else {}
    cfg = DemoConfig(preset=args.preset, device=args.device,
                     **{**PRESETS[args.preset], **budget})
    RESULTS.mkdir(exist_ok=True)

    def save(grid: dict[str, Any]) -> None:
        groups = summary(grid["rows"])
        meta = {"preset": args.preset, "target": cfg.target, "note": grid["device_note"],
                "t_down_s": grid["t_down_s"], "versions": versions(),
                "tag": tag and f" --tag {args.tag}", "wall_s": time.perf_counter() - began,
                "argv": sys.argv[1:]}
        write_json(RESULTS / f"wallclock{tag}.json", {
            "config": cfg.as_dict(), "ratios": args.ratios, "factors": args.factors,
            "seeds": args.seeds, **grid, "summary": groups, "rss": peak_rss_mb([]), **meta})
        (RESULTS / f"wallclock{tag}.md").write_text(markdown(groups, meta))
        plot(groups, RESULTS / f"wallclock{tag}.png")

    run_grid(cfg, args.ratios, [f for f in args.factors if f != "1"], args.seeds, save)
    print((RESULTS / f"wallclock{tag}.md").read_text())


if __name__ == "__main__":
    main()
