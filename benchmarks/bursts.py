"""Adaptive echoing when the loader delivers in bursts: realised factor against buffer size.

Usage: python benchmarks/bursts.py

Deterministic: a simulated clock and feed (``dataecho.adaptive.SimulatedFeed``), no
threads, so the numbers are the same on every machine. The upstream delivers ``burst``
items at once every ``burst * R`` consumer steps (mean rate one item per ``R`` steps,
``R = 6``); each step takes one time unit. With ``max_factor = 4`` the ideal realised
factor is 4. Rows: ``AdaptiveEcho`` (batches; buffer in batches) and
``AdaptiveExamples`` (batch 128; bursts and buffer in examples). Writes
results/bursts.json and .md; the defaults of both classes are chosen from this table.

A second table asks whether a larger echo buffer costs stall by itself: the policy on
a steady feed (one batch every ``R`` steps) and a jittered one (each batch takes
``R * u`` steps, ``u`` uniform in [0.5, 1.5], drawn from a fixed seed), ``AdaptiveEcho``
with buffer 1 and 4. In simulation the pick costs no time, so any gap between the two
buffers here is the policy's, and a gap measured with real threads
(``benchmarks/adaptive.py``) but not here is per-step work.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from dataecho import AdaptiveEcho, AdaptiveExamples
from dataecho.adaptive import SimClock, SimulatedFeed

RESULTS = Path(__file__).parent / "results"
RATIO = 6.0


def period_of(item_time: float, burst: int) -> Any:
    """Seconds to produce item ``k``: a burst's worth at its first item, then nothing."""
    return lambda k: item_time * burst if k % burst == 0 else 0.0


def batches(burst: int, buffer_size: int, n: int = 1200) -> float:
    clock = SimClock()
    stage = AdaptiveEcho(range(n), buffer_size=buffer_size, size=lambda _: 1, clock=clock,
                         feed=lambda p: SimulatedFeed(p, period=period_of(RATIO, burst),
                                                      clock=clock, depth=12))
    for _ in stage:
        clock.advance(1.0)
    return stage.stats().realised_factor


def stall(ratio: float, buffer_size: int, jitter: bool, n: int = 600) -> float:
    """Stall fraction of ``AdaptiveEcho`` (max_factor 4) on a steady or jittered feed."""
    scale = np.random.default_rng(0).uniform(0.5, 1.5, n) if jitter else np.ones(n)
    clock = SimClock()
    stage = AdaptiveEcho(range(n), buffer_size=buffer_size, size=lambda _: 1, clock=clock,
                         feed=lambda p: SimulatedFeed(p, period=lambda k: ratio * scale[k],
                                                      clock=clock, depth=4))
    for _ in stage:
        clock.advance(1.0)
    return stage.timing().stall_fraction


def examples(burst: int, buffer_size: int, batch: int = 128, n_batches: int = 300) -> float:
    clock = SimClock()
    stage = AdaptiveExamples(
        range(batch * n_batches), batch, buffer_size=buffer_size, min_fresh=4 * batch,
        collate=len, clock=clock,
        feed=lambda p: SimulatedFeed(p, period=period_of(RATIO / batch, burst), clock=clock,
                                     depth=2 * batch))
    for _ in stage:
        clock.advance(1.0)
    return stage.stats().realised_factor


def main() -> None:
    rows = []
    for burst in (1, 4, 10):
        for buffer_size in (1, 4, 8, 16):
            rows.append({"stage": "AdaptiveEcho", "burst": burst, "buffer": buffer_size,
                         "realised": round(batches(burst, buffer_size), 3)})
    for burst in (1, 500, 1000):
        for buffer_size in (512, 1024, 2048):
            rows.append({"stage": "AdaptiveExamples", "burst": burst, "buffer": buffer_size,
                         "realised": round(examples(burst, buffer_size), 3)})
    stalls = [{"ratio": ratio, "feed": "jittered" if jitter else "steady", "buffer": size,
               "stall": round(stall(ratio, size, jitter), 4)}
              for ratio in (2.0, 4.0) for jitter in (False, True) for size in (1, 4)]
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "bursts.json").write_text(json.dumps({"ratio": RATIO, "max_factor": 4,
                                                     "rows": rows, "stalls": stalls},
                                                    indent=1) + "\n")
    lines = ["# Adaptive echoing with bursty loaders (benchmarks/bursts.py)", "",
             f"Simulated, deterministic: R = {RATIO:g}, max_factor = 4 (ideal realised "
             "factor 4). AdaptiveEcho: bursts and buffer in batches; AdaptiveExamples: "
             "batch 128, bursts and buffer in examples.", "",
             "| stage | burst | buffer | realised factor |", "|---|---:|---:|---:|"]
    lines += [f"| {r['stage']} | {r['burst']} | {r['buffer']} | {r['realised']:.2f} |"
              for r in rows]
    lines += ["", "Stall fraction of AdaptiveEcho (max_factor 4), simulated: a steady feed "
              "(one batch per R steps) and a jittered one (R x U[0.5, 1.5] per batch, fixed "
              "seed), echo buffer 1 and 4 batches.", "",
              "| R | feed | buffer | stall |", "|---:|---|---:|---:|"]
    lines += [f"| {r['ratio']:g} | {r['feed']} | {r['buffer']} | {r['stall']:.1%} |"
              for r in stalls]
    (RESULTS / "bursts.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
