"""Best trial per search, spreads over seeds, and the verdict rules."""

import math

from dataecho.experiments.analysis import Spread, best_trial, collect, prune_at
from dataecho.experiments.conditions import Condition
from dataecho.experiments.findings import compare, verdict


def _trial(index, crossing, seed=0, variant="baseline", factor=1, mode="target"):
    cond = Condition.default("w", variant, factor, 8)
    return {"kind": "trial", "condition": cond.as_dict(), "seed": seed, "mode": mode,
            "index": index, "status": "reached" if crossing else "budget",
            "crossing": {"interpolated": crossing, "first": crossing} if crossing else None}


def test_the_best_trial_has_the_fewest_fresh_examples_and_ties_go_to_the_earlier():
    trials = [_trial(0, 50.0), _trial(1, 40.0), _trial(2, None), _trial(3, 40.0)]
    assert best_trial(trials)["index"] == 1
    assert prune_at(trials) == 40.0
    assert best_trial([_trial(0, None)]) is None and prune_at([]) is None


def test_a_search_that_never_reached_the_target_counts_as_infinite_not_imputed():
    records = [_trial(0, 10.0, seed=0), _trial(0, None, seed=1), _trial(0, 30.0, seed=2)]
    result = collect(records)["w"][Condition.default("w", "baseline", 1, 8)]
    spread = result.fresh()
    assert (spread.median, spread.min, spread.max, spread.n, spread.finite) == (
        30.0, 10.0, math.inf, 3, 2)


def test_the_median_is_infinite_when_half_or_more_searches_missed():
    assert Spread.of([1.0, math.inf]).median == math.inf
    assert Spread.of([1.0, 2.0, math.inf, math.inf]).median == math.inf
    assert Spread.of([1.0, 3.0]).median == 2.0


def test_verdicts_follow_the_stated_rules():
    assert verdict([(1, True)]) == "held"
    assert verdict([(1, False)]) == "partly"
    assert verdict([(1, True), (-1, True)]) == "partly"
    assert verdict([(-1, True)]) == "not held"
    assert verdict([(-1, False)]) == "inconclusive"
    assert verdict([]) == "inconclusive"


def test_compare_reports_sign_of_medians_and_whether_ranges_are_disjoint():
    assert compare(Spread.of([1.0, 2.0, 2.5]), Spread.of([1.5, 3.0, 4.0])) == (-1, False)
    assert compare(Spread.of([5.0, 6.0, 7.0]), Spread.of([1.0, 2.0, 3.0])) == (1, True)


def test_fewer_than_three_seeds_never_count_as_clearly_different():
    assert compare(Spread.of([5.0, 6.0]), Spread.of([1.0, 2.0, 3.0])) == (1, False)
    assert verdict([compare(Spread.of([1.0]), Spread.of([9.0]))]) == "inconclusive"
