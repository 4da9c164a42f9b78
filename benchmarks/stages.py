"""Per-item overhead of the stages, against plain Python iteration in the same run.

Usage: python benchmarks/stages.py [--items 200000] [--repeats 7]

Each stage iterates N items; the baseline iterates a list of exactly the items the stage
emits. Overhead = (stage time - baseline time) / emitted items, best of R repeats (the
minimum is the least disturbed by other jobs on a shared machine). Batch echoing is
measured on real DataLoader batches: overhead per batch, and as a share of a 10 ms step.
Counter-keyed randomness (``Map``'s per-item generator, ``AdaptiveEcho``'s pick) is
measured as a jump into one stream against seeding a new generator per position, the
design it replaced. Writes benchmarks/results/stages.json and .md.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import dataecho
from dataecho import Batch, Echo, Map, Shuffle

RESULTS = Path(__file__).parent / "results"


def drain(it: Iterable[Any]) -> int:
    n = 0
    for _ in it:
        n += 1
    return n


def best(fn: Callable[[], Any], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def overhead(make: Callable[[], Iterable[Any]], emitted: list[Any], repeats: int) -> dict[str, Any]:
    n = len(emitted)
    t_stage = best(lambda: drain(make()), repeats)
    t_plain = best(lambda: drain(emitted), repeats)
    return {"emitted": n, "stage_ns_per_item": 1e9 * t_stage / n,
            "plain_ns_per_item": 1e9 * t_plain / n,
            "overhead_ns_per_item": 1e9 * (t_stage - t_plain) / n}


def class_iterator_ns(items: list[int], repeats: int) -> float:
    class Wrap:  # the cheapest stage one can write: the floor for any iterator class
        def __init__(self, it: Iterable[int]) -> None:
            self.it = iter(it)

        def __iter__(self) -> Wrap:
            return self

        def __next__(self) -> int:
            return next(self.it)

    return 1e9 * best(lambda: drain(Wrap(items)), repeats) / len(items)


def batch_echo(repeats: int) -> dict[str, Any]:
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from dataecho.torch import EchoBatches

    data = TensorDataset(torch.randn(128 * 200, 3, 32, 32), torch.randint(0, 10, (128 * 200,)))
    batches = list(DataLoader(data, batch_size=128))
    emitted = [b for b in batches for _ in range(2)]
    t_stage = best(lambda: drain(EchoBatches(batches, 2)), repeats)
    t_plain = best(lambda: drain(emitted), repeats)
    per_batch_us = 1e6 * (t_stage - t_plain) / len(emitted)
    return {"batches": len(emitted), "overhead_us_per_batch": per_batch_us,
            "share_of_10ms_step_percent": 100 * per_batch_us / 10_000}


def generators(repeats: int, n: int = 20_000) -> dict[str, float]:
    """µs per position for a generator keyed by (seed, tag, position), one draw each."""
    from dataecho import _rng

    stream = _rng.Stream(0, _rng.MAP)

    def jump() -> None:
        for k in range(n):
            stream.at(k).random()

    def seeded() -> None:
        for k in range(n):
            _rng.rng(0, _rng.MAP, k).random()

    return {"jump_us": 1e6 * best(jump, repeats) / n,
            "new_generator_us": 1e6 * best(seeded, repeats) / n}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--items", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    items = list(range(args.items))
    n, r = args.items, args.repeats

    def emitted_by(make: Callable[[], Iterable[Any]]) -> list[Any]:
        return list(make())

    cases: dict[str, Callable[[], Iterable[Any]]] = {
        "Echo factor 1 (pass-through)": lambda: Echo(items, 1),
        "Echo factor 2": lambda: Echo(items, 2),
        "Echo factor 2.5 (fractional)": lambda: Echo(items, 2.5),
        "Shuffle buffer 1000": lambda: Shuffle(items, 1000),
        "Shuffle buffer 10000 after Echo factor 2": lambda: Shuffle(Echo(items, 2), 10_000),
        "Batch 128 (collate=list)": lambda: Batch(items, 128, collate=list),
        "Map with a generator per item (fn(item, rng))": lambda: Map(
            items, lambda x, rng: x, seed=0),
    }
    rows = {}
    for name, make in cases.items():
        rows[name] = overhead(make, emitted_by(make), r)
        # Batch emits n/128 lists: report its cost per input item instead.
        if name.startswith("Batch"):
            t_stage = best(lambda make=make: drain(make()), r)
            t_plain = best(lambda: drain(items), r)
            rows[name] = {"emitted": n, "stage_ns_per_item": 1e9 * t_stage / n,
                          "plain_ns_per_item": 1e9 * t_plain / n,
                          "overhead_ns_per_item": 1e9 * (t_stage - t_plain) / n}
        print(f"{name:52s} {rows[name]['overhead_ns_per_item']:8.1f} ns/item over plain "
              f"({rows[name]['plain_ns_per_item']:.1f} ns)")
    result = {
        "machine": platform.platform(), "python": platform.python_version(),
        "dataecho": dataecho.__version__, "items": n, "repeats": r,
        "plain_iteration_ns_per_item": 1e9 * best(lambda: drain(items), r) / n,
        "class_iterator_ns_per_item": class_iterator_ns(items, r),
        "stages": rows, "batch_echo_dataloader": batch_echo(r),
        "generator_per_position": generators(r),
    }
    be, gen = result["batch_echo_dataloader"], result["generator_per_position"]
    print(f"batch echoing: {be['overhead_us_per_batch']:.2f} us/batch = "
          f"{be['share_of_10ms_step_percent']:.4f}% of a 10 ms step")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "stages.json").write_text(json.dumps(result, indent=2) + "\n")
    lines = ["# Stage overhead (benchmarks/stages.py)", "",
             f"{n:,} items, best of {r}; {result['machine']}, Python {result['python']}.",
             f"Plain iteration: {result['plain_iteration_ns_per_item']:.1f} ns/item; "
             f"a minimal iterator class: {result['class_iterator_ns_per_item']:.1f} ns/item.", "",
             "| stage | ns/item | plain ns/item | overhead ns/item |", "|---|---:|---:|---:|"]
    lines += [f"| {k} | {v['stage_ns_per_item']:.1f} | {v['plain_ns_per_item']:.1f} | "
              f"{v['overhead_ns_per_item']:.1f} |" for k, v in rows.items()]
    lines += ["", f"Batch echoing (EchoBatches, factor 2, 128x3x32x32 batches): "
              f"{be['overhead_us_per_batch']:.2f} µs per batch = "
              f"{be['share_of_10ms_step_percent']:.4f}% of a 10 ms training step.",
              "", f"A generator per position (seed, tag, k), one draw: jump into one "
              f"stream {gen['jump_us']:.2f} µs, a newly seeded generator "
              f"{gen['new_generator_us']:.2f} µs.", ""]
    (RESULTS / "stages.md").write_text("\n".join(lines))


if __name__ == "__main__":
    main()
