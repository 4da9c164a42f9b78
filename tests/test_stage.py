"""The stage contract: one state path, the header written once, the config cached."""

import json

import pytest

from dataecho import Batch, Echo, Map, Shuffle, Source
from dataecho.iterable import IterableSource

PIPELINES = {
    "Source": lambda: Source(range(20), seed=1),
    "IterableSource": lambda: IterableSource(list(range(20))),
    "Map": lambda: Map(Source(range(20)), lambda x, rng: x + float(rng.random())),
    "Batch": lambda: Batch(Map(range(40), abs), 3),
    "Echo": lambda: Echo(Source(range(20)), 2.5, seed=3),
    "Shuffle": lambda: Shuffle(Echo(range(20), 2), 7, seed=2),
    "Echo of batches": lambda: Echo(Batch(Shuffle(range(40), 4), 3, collate=list), 2),
}


@pytest.mark.parametrize("make", PIPELINES.values(), ids=PIPELINES.keys())
def test_a_snapshot_expands_to_the_state_it_was_taken_at(make):
    stage = make()
    for _ in range(9):
        token, state = stage._snapshot(), stage.state_dict()
        next(stage)
        assert stage._expand(token) == state
        json.dumps(state)  # checkpoints are JSON


@pytest.mark.parametrize("make", PIPELINES.values(), ids=PIPELINES.keys())
def test_the_state_header_names_the_stage_its_version_and_its_config(make):
    stage = make()
    next(stage)
    state = stage.state_dict()
    assert (state["stage"], state["version"]) == (type(stage).__name__, stage.VERSION)
    assert state["config"] == stage._config()


def test_the_config_is_built_once():
    stage = Batch(Map(range(5), abs), 2)
    assert stage.state_dict()["config"] is stage.state_dict()["config"]
