"""The PyTorch adapters' own cost, against the plain loops they replace, in one run.

Usage: python benchmarks/adapters.py [--examples 20000] [--repeats 5]

Two pairs, each run back to back in this process and repeated, medians reported:

- ``EchoDataset(data, augment=Seeded(flip, generators=()), factor=1)`` (the flip draws
  nothing, so it needs no seeded generators) in a DataLoader against a plain
  map-style ``Dataset`` that applies the same flip, with 0 and 2 workers: examples per
  second (target: at least 0.9x);
- ``EchoBatches(loader, factor=2, check_inplace=False)`` against a Python generator that
  yields each batch of the same loader twice: batches per second (target: at least
  0.9x).

The data are small tensors already in memory, so the adapters' per-example cost is what
differs. A second table says where the training process's time goes (0 workers, µs per
example, best pass): the flip alone, the plain ``Dataset``, one iterator class that reads
and flips in a single ``__next__`` (what the DataLoader's path for iterable data sets
costs by itself), ``Map(Source)`` (dataecho's reading and augmentation without the
hand-out), ``EchoDataset``, and ``EchoDataset`` given the flip as it is, which it runs
under seeded global generators, as it does every one-argument augmentation
(:class:`dataecho.torch.Seeded`). A third, what measuring one batch costs ``EchoBatches``
(its default ``size=``). Writes benchmarks/results/adapters.json and .md.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
import timeit
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset

from dataecho import Map, Source, __version__
from dataecho.experiments.text import md_table
from dataecho.sizes import batch_size_of
from dataecho.torch import EchoBatches, EchoDataset, Seeded

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


class Staged(IterableDataset[torch.Tensor]):
    """dataecho's reading and augmentation, ``Map(Source(data), flip)``, nothing else."""

    def __init__(self, data: list[torch.Tensor]) -> None:
        self.data = data

    def __iter__(self) -> Iterator[torch.Tensor]:
        return Map(Source(self.data, shuffle=True, seed=0), flip)


class OneIterator(IterableDataset[torch.Tensor]):
    """The least an iterable data set can do: one ``__next__`` that reads and flips."""

    def __init__(self, data: list[torch.Tensor]) -> None:
        self.data = data

    def __iter__(self) -> Iterator[torch.Tensor]:
        return Shuffled(self.data)


class Shuffled(Iterator[torch.Tensor]):
    def __init__(self, data: list[torch.Tensor]) -> None:
        self.data, self.index = data, 0
        self.order = torch.randperm(len(data)).tolist()

    def __next__(self) -> torch.Tensor:
        index = self.index
        try:
            position = self.order[index]
        except IndexError:
            raise StopIteration from None
        self.index = index + 1
        return flip(self.data[position])


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
    unseeded = Seeded(flip, generators=())  # the flip draws nothing: the adapter alone
    cases: dict[str, tuple[Callable[[], Iterable[Any]], Callable[[], Iterable[Any]],
                           Callable[[Any], int]]] = {}
    for workers in (0, 2):
        cases[f"EchoDataset factor 1, {workers} workers (examples/s)"] = (
            lambda w=workers: DataLoader(EchoDataset(data, augment=unseeded, factor=1, seed=0),
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
    # Where the time goes with 0 workers: µs per example, best pass of each.
    parts: dict[str, tuple[Callable[[], Iterable[Any]], Callable[[Any], int]]] = {
        "the flip alone (a loop over the list)": (lambda: map(flip, data), lambda _: 1),
        "plain Dataset": (lambda: DataLoader(Flipped(data), batch_size=64, shuffle=True), len),
        "one iterator class in a DataLoader": (lambda: DataLoader(OneIterator(data),
                                                                  batch_size=64), len),
        "Map(Source) in a DataLoader": (lambda: DataLoader(Staged(data), batch_size=64), len),
        "EchoDataset": (lambda: DataLoader(EchoDataset(data, augment=unseeded, factor=1,
                                                       seed=0), batch_size=64), len),
        "EchoDataset, the flip run under seeded generators": (
            lambda: DataLoader(EchoDataset(data, augment=flip, factor=1, seed=0),
                               batch_size=64), len),
    }
    costs = {name: 1e6 / max(rate(make, count) for _ in range(args.repeats))
             for name, (make, count) in parts.items()}
    out["microseconds per example, 0 workers"] = costs
    # EchoBatches measures every fresh batch (its default size=): µs per batch, best pass.
    batch = torch.zeros(64, 16)
    layouts = {"a tensor": batch, "a tuple (x, y)": (batch, torch.zeros(64)),
               "a dict {x, y}": {"x": batch, "y": torch.zeros(64)}}
    sizing = {name: 1e6 * min(timeit.repeat(lambda b=b: batch_size_of(b), number=10000,
                                            repeat=args.repeats)) / 10000
              for name, b in layouts.items()}
    out["microseconds to measure one batch"] = sizing
    meta = {"dataecho": __version__, "torch": torch.__version__, "python":
            platform.python_version(), "examples": args.examples, "repeats": args.repeats}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "adapters.json").write_text(json.dumps({"meta": meta, "cases": out}, indent=1))
    table = "\n".join(md_table(["case", "plain loop", "dataecho", "ratio (median)", "range"],
                                rows, "lrrrr"))
    where = "\n".join(md_table(["what the DataLoader reads (0 workers)", "µs per example"],
                                [[name, f"{us:.2f}"] for name, us in costs.items()], "lr"))
    sized = "\n".join(md_table(["batch", "µs"], [[name, f"{us:.2f}"]
                                                for name, us in sizing.items()], "lr"))
    text = (f"# The adapters' own cost\n\n`python benchmarks/adapters.py --examples "
            f"{args.examples} --repeats {args.repeats}` (torch {torch.__version__}, "
            f"Python {platform.python_version()}); rates per second, median over "
            f"{args.repeats} back-to-back pairs; the target is a ratio of at least 0.9x.\n\n"
            f"{table}\n\nWhere the time goes, best of {args.repeats} passes each:\n\n"
            f"{where}\n\nMeasuring one batch (`EchoBatches`' default `size=`), best of "
            f"{args.repeats}:\n\n{sized}\n")
    (RESULTS / "adapters.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
