"""The PyTorch adapters' own cost, against the plain loops they replace, in one run.

Usage: python benchmarks/adapters.py [--examples 20000] [--repeats 5]

Two pairs, each run back to back in this process and repeated, medians reported:

- ``EchoDataset(data, augment=flip, factor=1)`` in a DataLoader against a plain
  map-style ``Dataset`` that applies the same flip, with 0 and 2 workers: examples per
  second (target: at least 0.9x);
- ``EchoBatches(loader, factor=2, check_inplace=False)`` against a Python generator that
  yields each batch of the same loader twice: batches per second (target: at least
  0.9x).

The data are small tensors already in memory, so the adapters' per-example cost is what
differs. Writes benchmarks/results/adapters.json and .md.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

from dataecho import __version__
from dataecho.experiments.text import md_table
from dataecho.torch import EchoBatches, EchoDataset

RESULTS = Path(__file__).resolve().parent / "results"


def flip(x: torch.Tensor) -> torch.Tensor:
    return torch.flip(x, dims=(0,))


class Flipped(Dataset[torch.Tensor]):
    """The plain baseline: a map-style data set that flips each example it returns."""

    def __init__(self, data: list[torch.Tensor]) -> None:
        self.data = data

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i: int) -> torch.Tensor:
        return flip(self.data[i])


def twice(loader: Iterable[Any]) -> Iterable[Any]:
    for batch in loader:
        yield batch
        yield batch


def rate(make: Callable[[], Iterable[Any]], count: Callable[[Any], int]) -> float:
    """Items per second of one pass over what ``make()`` returns (start-up included)."""
    t0 = time.perf_counter()
    n = sum(count(item) for item in make())
    return n / (time.perf_counter() - t0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    data = [torch.arange(16, dtype=torch.float32) + i for i in range(args.examples)]
    cases: dict[str, tuple[Callable[[], Iterable[Any]], Callable[[], Iterable[Any]],
                           Callable[[Any], int]]] = {}
    for workers in (0, 2):
        cases[f"EchoDataset factor 1, {workers} workers (examples/s)"] = (
            lambda w=workers: DataLoader(EchoDataset(data, augment=flip, factor=1, seed=0),
                                         batch_size=64, num_workers=w),
            lambda w=workers: DataLoader(Flipped(data), batch_size=64, shuffle=True,
                                         num_workers=w),
            len)
    plain = DataLoader(torch.stack(data), batch_size=64)
    cases["EchoBatches factor 2 (batches/s)"] = (
        lambda: EchoBatches(plain, factor=2, check_inplace=False),
        lambda: twice(plain),
        lambda _: 1)
    rows, out = [], {}
    for name, (ours, base, count) in cases.items():
        ratios, ours_rates, base_rates = [], [], []
        for _ in range(args.repeats):
            b = rate(base, count)
            o = rate(ours, count)
            ratios.append(o / b)
            ours_rates.append(o)
            base_rates.append(b)
        out[name] = {"ratio_median": statistics.median(ratios), "ratios": ratios,
                     "ours": statistics.median(ours_rates),
                     "baseline": statistics.median(base_rates)}
        rows.append([name, f"{statistics.median(base_rates):,.0f}",
                     f"{statistics.median(ours_rates):,.0f}",
                     f"{statistics.median(ratios):.2f}x",
                     f"{min(ratios):.2f}-{max(ratios):.2f}"])
    meta = {"dataecho": __version__, "torch": torch.__version__, "python":
            platform.python_version(), "examples": args.examples, "repeats": args.repeats}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "adapters.json").write_text(json.dumps({"meta": meta, "cases": out}, indent=1))
    table = "\n".join(md_table(["case", "plain loop", "dataecho", "ratio (median)", "range"],
                                rows, "lrrrr"))
    text = (f"# The adapters' own cost\n\n`python benchmarks/adapters.py --examples "
            f"{args.examples} --repeats {args.repeats}` (torch {torch.__version__}, "
            f"Python {platform.python_version()}); rates per second, median over "
            f"{args.repeats} back-to-back pairs; the target is a ratio of at least 0.9x.\n\n"
            f"{table}\n")
    (RESULTS / "adapters.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
