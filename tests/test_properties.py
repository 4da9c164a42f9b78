"""Property-based checks of the invariants every pipeline keeps."""

import collections
import json

from hypothesis import given, settings
from hypothesis import strategies as st

import dataecho
from dataecho import Echo, Shuffle, Source
from helpers.checkpoint import run, same

factors = st.one_of(st.integers(1, 4), st.floats(1.0, 4.0, allow_nan=False))


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 60), factor=st.integers(1, 4), buffer=st.integers(1, 50),
       seed=st.integers(0, 2**32))
def test_integer_echo_then_shuffle_preserves_the_multiset(n, factor, buffer, seed):
    out = list(Shuffle(Echo(range(n), factor), buffer, seed=seed))
    assert collections.Counter(out) == {i: factor for i in range(n)}


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 60), factor=factors, seed=st.integers(0, 2**32))
def test_every_item_appears_floor_or_ceil_factor_times_and_stats_are_exact(n, factor, seed):
    stage = Echo(range(n), factor, seed=seed)
    counts = collections.Counter(stage)
    lo = int(factor)
    assert set(counts) == set(range(n))
    assert all(c in (lo, lo + 1) for c in counts.values())
    s = stage.stats()
    assert s.fresh_examples == n and s.emitted_examples == sum(counts.values())


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 40), factor=factors, batch=st.integers(1, 9), buffer=st.integers(1, 20),
       variant=st.sampled_from(dataecho.VARIANTS), epochs=st.integers(1, 2),
       seed=st.integers(0, 1000), cut=st.floats(0, 1))
def test_restoring_anywhere_resumes_exactly(n, factor, batch, buffer, variant, epochs, seed, cut):
    def make():
        return dataecho.pipeline(Source(list(range(n)), seed=seed, num_epochs=epochs),
                                 augment=lambda x, rng: (x, int(rng.integers(9))),
                                 echo=variant, factor=factor, batch_size=batch,
                                 buffer_size=buffer, seed=seed)
    outputs, states = run(make())
    k = int(cut * (len(states) - 1))
    restored = make()
    restored.load_state_dict(json.loads(json.dumps(states[k])))
    assert same(list(restored), outputs[k:])
    assert restored.stats().fresh_examples == n * epochs


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 50), shards=st.integers(1, 5), seed=st.integers(0, 1000))
def test_shards_partition_each_epoch(n, shards, seed):
    shards = min(shards, n)
    seen = collections.Counter()
    for k in range(shards):
        seen.update(Source(range(n), seed=seed, shard_index=k, num_shards=shards))
    assert seen == {i: 1 for i in range(n)}


def _augment(x, rng):
    return [x, int(rng.integers(1000))]


STAGES = {  # a random stage on top of `up`, from one drawn parameter
    "echo": lambda up, p, seed: dataecho.Echo(up, p, seed=seed),
    "map": lambda up, p, seed: dataecho.Map(up, _augment, seed=seed),
    "shuffle": lambda up, p, seed: dataecho.Shuffle(up, int(p * 3), seed=seed),
    # collate=list: a Batch of batches would otherwise meet a ragged partial batch
    "batch": lambda up, p, seed: dataecho.Batch(up, int(p * 2), collate=list,
                                                drop_last=p > 3.5),
}
chains = st.lists(st.tuples(st.sampled_from(sorted(STAGES)), factors, st.integers(0, 99)),
                  max_size=5)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 30), epochs=st.integers(1, 3), chain=chains, seed=st.integers(0, 99),
       cuts=st.lists(st.floats(0, 1), min_size=1, max_size=3))
def test_random_chains_restore_exactly_from_json_states_at_random_points(
        n, epochs, chain, seed, cuts):
    def make():
        stage = dataecho.Source(range(n), seed=seed, num_epochs=epochs)
        for kind, param, stage_seed in chain:
            stage = STAGES[kind](stage, param, stage_seed)
        return stage

    whole = make()
    outputs, states = run(whole)
    for cut in cuts:
        k = int(cut * (len(states) - 1))
        restored = make()
        restored.load_state_dict(json.loads(json.dumps(states[k])))
        assert same(list(restored), outputs[k:])
        assert restored.stats() == whole.stats()
