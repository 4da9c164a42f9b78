"""The stage contract: one state path, the header written once, the config cached."""

import json

import pytest

from dataecho import Batch, Echo, Map, Shard, Shuffle, Source
from dataecho.readers import IterableSource

PIPELINES = {
    "Source": lambda: Source(range(20), seed=1),
    "IterableSource": lambda: IterableSource(list(range(20))),
    "Map": lambda: Map(Source(range(20)), lambda x, rng: x + float(rng.random())),
    "Batch": lambda: Batch(Map(range(40), abs), 3),
    "Echo": lambda: Echo(Source(range(20)), 2.5, seed=3),
    "Shuffle": lambda: Shuffle(Echo(range(20), 2), 7, seed=2),
    "Echo of batches": lambda: Echo(Batch(Shuffle(range(40), 4), 3, collate=list), 2),
    "Shard": lambda: Shard(list(range(40)), 1, 3),
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


def _damage(state, path, value):
    """A JSON copy of ``state`` with the key at ``path`` (a list of keys) set or removed."""
    state = json.loads(json.dumps(state))
    inner = state
    for key in path[:-1]:
        inner = inner[key]
    if value is _MISSING:
        del inner[path[-1]]
    else:
        inner[path[-1]] = value
    return state


_MISSING = object()

DAMAGED = [  # (pipeline, path to the key, value, the words the error must contain)
    ("Source", ["index"], -3, "Source has index=-3, but it must be an int in [0, 20]"),
    ("Source", ["index"], 21, "Source has index=21"),
    ("Source", ["index"], "3", "Source has index='3' of type str"),
    ("Source", ["epoch"], 1, "Source has epoch=1, but it must be an int in [0, 0]"),
    ("Source", ["epoch"], 0.5, "Source has epoch=0.5 of type float"),
    ("Source", ["index"], _MISSING, "Source lacks the key 'index'"),
    ("IterableSource", ["consumed"], -1, "IterableSource has consumed=-1"),
    ("Map", ["position"], -2, "Map has position=-2, but it must be an int >= 0"),
    ("Map", ["upstream"], _MISSING, "Map lacks the key 'upstream'"),
    ("Map", ["upstream", "index"], None, "Source has index=None"),
    ("Batch", ["last_size"], 4, "Batch has last_size=4, but it must be an int in [0, 3]"),
    ("Batch", ["examples"], 99, "Batch has examples=99"),
    ("Batch", ["batches"], True, "Batch has batches=True of type bool"),
    ("Echo", ["left"], -1, "Echo has left=-1, but it must be an int in [0, 2]"),
    ("Echo", ["left"], 3, "Echo has left=3"),
    ("Echo", ["left"], 1.5, "Echo has left=1.5 of type float"),
    ("Echo", ["fresh"], _MISSING, "Echo lacks the key 'fresh'"),
    ("Echo", ["upstream"], [], "Echo has upstream=[] of type list, but it must be a dict"),
    ("Shuffle", ["skip"], 7, "Shuffle has skip=7, but it must be an int in [0, 6]"),
    ("Shuffle", ["skip"], -1, "Shuffle has skip=-1"),
    ("Shuffle", ["window"], "x", "Shuffle has window='x' of type str"),
    ("Echo of batches", ["upstream", "dropped"], -5, "Batch has dropped=-5"),
    ("Shard", ["read"], _MISSING, "Shard lacks the key 'read'"),
    ("Shard", ["upstream", "consumed"], "7", "IterableSource has consumed='7'"),
]


@pytest.mark.parametrize("name, path, value, words", DAMAGED,
                         ids=[f"{n}-{'.'.join(p)}={v!r}" for n, p, v, _ in DAMAGED])
def test_load_state_dict_refuses_a_damaged_counter_naming_stage_key_value_and_rule(
        name, path, value, words):
    stage = PIPELINES[name]()
    for _ in range(5):
        next(stage)
    damaged = _damage(stage.state_dict(), path, value)
    with pytest.raises((ValueError, TypeError)) as error:
        PIPELINES[name]().load_state_dict(damaged)
    assert f"state of {words}" in str(error.value), str(error.value)
    assert "checkpoint" in str(error.value)


def test_a_refused_state_leaves_the_stage_where_it_was():
    stage = PIPELINES["Echo"]()
    first = [next(stage) for _ in range(3)]
    good = stage.state_dict()
    with pytest.raises(ValueError):
        stage.load_state_dict(_damage(good, ["left"], -1))
    restored = PIPELINES["Echo"]()
    restored.load_state_dict(good)
    assert first and [next(stage) for _ in range(6)] == [next(restored) for _ in range(6)]
