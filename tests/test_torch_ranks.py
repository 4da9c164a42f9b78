import types

import pytest

pytest.importorskip("torch")

from dataecho.torch import ranks

pytestmark = pytest.mark.torch


def test_shards_are_disjoint_and_complete_across_ranks_and_workers(monkeypatch):
    seen = []
    for rank in range(2):
        for worker in range(3):
            info = types.SimpleNamespace(id=worker, num_workers=3)
            monkeypatch.setattr(ranks, "get_worker_info", lambda info=info: info)
            seen.append(ranks.shard_of(rank, 2))
    assert sorted(seen) == [(i, 6) for i in range(6)]


def test_a_spawned_worker_of_a_ddp_job_must_be_told_its_rank(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")  # as torchrun sets it; no process group here
    monkeypatch.setattr(ranks, "get_worker_info",
                        lambda: types.SimpleNamespace(id=0, num_workers=2))
    with pytest.raises(ValueError, match=r"2-process job without rank and world_size.*"
                                         r"pass rank=dist.get_rank\(\)"):
        ranks.shard_of()
    assert ranks.shard_of(1, 2) == (2, 4)  # given: fine


def test_the_training_process_itself_is_rank_0_of_1_without_a_process_group(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert ranks.shard_of() == (0, 1)  # not in a worker: nothing to shard by
