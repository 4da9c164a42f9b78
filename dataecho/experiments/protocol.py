"""The condition grids of each budget, as one-dimensional sweeps around a default.

The default condition is the workload's batch size, echoing factor 2 and dataecho's
default post-echo shuffle (ten batches for example echoing, none for batch echoing).
Each paper figure varies one thing away from it, so the grid grows with the sum of the
sweeps, not their product:

* Fig. 3, variants: the baseline and every variant at e = 2.
* Fig. 5, echoing factor: e in {2, 4, 8} (images) or {2, 4, 8, 16} (LM).
* Fig. 6, batch size: the baseline and the sweep's variants at e = 2 per batch size.
* Fig. 7, shuffle buffer: none, one batch, ten batches, large (50 batches) at e = 2;
  for batch echoing the window holds batches, so one batch is no shuffle (the same
  condition as none, run once).
* Fig. 8, no harm: the Fig. 3 conditions trained to the fresh-example budget.

``smoke`` runs on the digits workload in well under a minute; ``quick`` shrinks the
grids, the search and the seed count (see ``Plan.reduced``); ``full`` is the protocol.
A workload of your own (an import string, see :mod:`~dataecho.experiments.registry`)
gets the same three budgets, its sweeps drawn from its own variants and batch size.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .conditions import Condition
from .registry import is_import, resolve

BUDGETS = ("smoke", "quick", "full")
LARGE_BUFFER = 50  # batches' worth of examples in the "large" post-echo shuffle window


@dataclass(frozen=True)
class Plan:
    """What one budget runs on one workload.

    Attributes:
        workload: the workload's reference: a built-in name or an import string.
        budget: ``smoke``, ``quick`` or ``full``.
        seeds: repeats of every search.
        trials: quasi-random trials per search.
        conditions: the target searches, most important first (the run order).
        no_harm: conditions that also train their best settings to the budget.
        reduced: what this budget leaves out of the full protocol, for the report.
    """

    workload: str
    budget: str
    seeds: tuple[int, ...]
    trials: int
    conditions: tuple[Condition, ...]
    no_harm: tuple[Condition, ...] = ()
    reduced: tuple[str, ...] = field(default=())


@dataclass(frozen=True)
class Sweeps:
    """The values each one-dimensional sweep takes."""

    factors: tuple[int, ...]  # Fig. 5, beyond 2
    factor_variants: tuple[str, ...]
    batch_sizes: tuple[int, ...]  # Fig. 6, beyond the default
    batch_variants: tuple[str, ...]  # echoing variants swept over batch size
    buffers: tuple[float, ...]  # Fig. 7, in batches, beyond the variant's default
    buffer_variants: tuple[str, ...]


def conditions(workload: str, sweeps: Sweeps) -> tuple[Condition, ...]:
    """The default conditions (Fig. 3) then each sweep, without duplicates.

    Example:
        >>> s = Sweeps((4,), ("batch",), (), (), (), ())
        >>> [c.label() for c in conditions("digits", s)][-1]
        'batch e=4 B=32 buf=0'
    """
    w = resolve(workload)
    b = w.batch_size
    out = [Condition.default(workload, "baseline", 1, b)]
    out += [Condition.default(workload, v, 2, b) for v in w.variants]
    out += [Condition.default(workload, v, e, b)
            for v in sweeps.factor_variants for e in sweeps.factors]
    for size in sweeps.batch_sizes:
        out.append(Condition.default(workload, "baseline", 1, size))
        out += [Condition.default(workload, v, 2, size) for v in sweeps.batch_variants]
    out += [Condition.default(workload, v, 2, b, buf)
            for v in sweeps.buffer_variants for buf in sweeps.buffers]
    return tuple(dict.fromkeys(out))


def plan(workload: str, budget: str) -> Plan:
    """The plan of ``budget`` for ``workload``.

    ``smoke`` of a built-in name means ``digits``; an import string (``pkg.mod:attr``)
    runs its own workload at every budget.

    Example:
        >>> p = plan("fmnist", "full")
        >>> len(p.seeds) >= 3 and p.trials >= 8
        True
        >>> plan("dataecho.experiments.workloads:LM", "smoke").conditions[1].label()
        'example e=2 B=32 buf=10'
    """
    if budget not in BUDGETS:
        raise ValueError(f"budget must be one of {', '.join(BUDGETS)}, got {budget!r}")
    if is_import(workload):
        return {"smoke": _smoke, "quick": _quick, "full": _full}[budget](workload)
    if budget == "smoke":
        return _smoke()
    if workload not in ("fmnist", "lm"):
        raise ValueError(f"workload must be 'fmnist' or 'lm' for budget {budget!r}, "
                         f"got {workload!r}; the digits workload is for --budget smoke")
    return _FULL[workload]() if budget == "full" else _QUICK[workload]()


def _default_set(workload: str) -> tuple[Condition, ...]:
    w = resolve(workload)
    return tuple([Condition.default(workload, "baseline", 1, w.batch_size)] +
                 [Condition.default(workload, v, 2, w.batch_size) for v in w.variants])


def _smoke(workload: str = "digits") -> Plan:
    # One value per sweep, on the workload's first variant: for digits, e = 4, batch
    # 64 and no shuffle buffer before augmentation.
    w = resolve(workload)
    first = (w.variants[0],)
    sweeps = Sweeps((4,), first, (2 * w.batch_size,), first, (0,), first)
    return Plan(workload, "smoke", (0,), 2, conditions(workload, sweeps),
                no_harm=_default_set(workload)[:2],
                reduced=(f"{w.name} only", "2 trials per search", "1 seed",
                         "one value per sweep"))


def _quick(workload: str) -> Plan:
    base = _default_set(workload)
    return Plan(workload, "quick", (0,), 4, base, no_harm=base[:2],
                reduced=(*_QUICK_REDUCED, "no-harm check for the baseline and the first "
                         "variant only"))


def _full(workload: str) -> Plan:
    # The Fashion-MNIST sweeps, around the workload's own batch size and variants.
    w = resolve(workload)
    b, first = w.batch_size, w.variants[0]
    main = tuple(dict.fromkeys(v for v in (first, "batch") if v in w.variants))
    sweeps = Sweeps(factors=(4, 8), factor_variants=w.variants,
                    batch_sizes=tuple(s for s in (b // 2, 4 * b, 8 * b) if 0 < s != b),
                    batch_variants=main, buffers=(0, 1, 10, LARGE_BUFFER),
                    buffer_variants=main)
    return Plan(workload, "full", (0, 1, 2), 8, conditions(workload, sweeps),
                no_harm=_default_set(workload))


def _fmnist_full() -> Plan:
    sweeps = Sweeps(factors=(4, 8),
                    factor_variants=("before_augmentation", "after_augmentation", "batch"),
                    batch_sizes=(64, 512, 1024),
                    batch_variants=("before_augmentation", "batch"),
                    buffers=(0, 1, 10, LARGE_BUFFER),
                    buffer_variants=("before_augmentation", "batch"))
    return Plan("fmnist", "full", (0, 1, 2), 8, conditions("fmnist", sweeps),
                no_harm=_default_set("fmnist"))


def _lm_full() -> Plan:
    sweeps = Sweeps(factors=(4, 8, 16), factor_variants=("example", "batch"),
                    batch_sizes=(16, 128), batch_variants=("example", "batch"),
                    buffers=(0, 1, 10, LARGE_BUFFER), buffer_variants=("example", "batch"))
    return Plan("lm", "full", (0, 1, 2), 8, conditions("lm", sweeps),
                no_harm=_default_set("lm"))


_QUICK_REDUCED = ("Fig. 3 conditions only (no factor, batch-size or buffer sweeps)",
                  "1 seed instead of 3", "4 trials per search instead of 8")


def _fmnist_quick() -> Plan:
    base = _default_set("fmnist")
    return Plan("fmnist", "quick", (0,), 4, base, no_harm=base[:2],
                reduced=(*_QUICK_REDUCED, "no-harm check for the baseline and "
                         "before-augmentation echoing only"))


def _lm_quick() -> Plan:
    return Plan("lm", "quick", (0,), 4, _default_set("lm"),
                reduced=(*_QUICK_REDUCED, "no no-harm check"))


_FULL = {"fmnist": _fmnist_full, "lm": _lm_full}
_QUICK = {"fmnist": _fmnist_quick, "lm": _lm_quick}
