"""Two gloo ranks, one with an upstream twice as slow: same steps, same fresh reads."""

import json
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist
import torch.multiprocessing as mp

from dataecho.adaptive import AdaptiveEcho
from dataecho.adaptive_examples import AdaptiveExamples
from dataecho.torch_distributed import RankAgreement

pytestmark = [pytest.mark.torch,
              pytest.mark.skipif(not dist.is_available(), reason="torch.distributed missing")]

STEP_S = 0.005  # the consumer's training step
UP_S = 0.015  # rank 0's upstream per item; rank 1 takes twice as long


def _upstream(n, seconds):
    for k in range(n):
        time.sleep(seconds)
        yield np.full(2, k)


def _run(stage, agreement):
    steps = 0
    for _ in stage:
        time.sleep(STEP_S)
        steps += 1
    s = stage.stats()
    return {"steps": steps, "fresh": s.fresh_items, "emitted": s.emitted_items,
            "calls": agreement.calls}


def _worker(rank, init_file, out_dir):
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    up = UP_S * (2 if rank == 1 else 1)
    results = {}
    agree = RankAgreement()
    with AdaptiveEcho(_upstream(40, up), max_factor=4, agree=agree) as stage:
        results["batches"] = _run(stage, agree)
    agree = RankAgreement()  # rank 1 holds fewer items: everyone stops at its end
    with AdaptiveEcho(_upstream(40 if rank == 0 else 25, up), agree=agree) as stage:
        results["unequal"] = _run(stage, agree)
    agree = RankAgreement()
    examples = AdaptiveExamples(_upstream(96, up / 8), 8, agree=agree, min_fresh=8)
    with examples as stage:
        results["examples"] = _run(stage, agree)
    with open(f"{out_dir}/rank{rank}.json", "w") as f:
        json.dump(results, f)
    dist.destroy_process_group()


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ddp")
    mp.spawn(_worker, args=(str(tmp / "init"), str(tmp)), nprocs=2, join=True)
    return [json.loads((tmp / f"rank{r}.json").read_text()) for r in (0, 1)]


def test_both_ranks_take_the_same_number_of_steps_and_fresh_items(ranks):
    fast, slow = ranks[0]["batches"], ranks[1]["batches"]
    assert fast["steps"] == slow["steps"] and fast["calls"] == slow["calls"]
    assert fast["fresh"] == slow["fresh"] == 40


def test_the_fast_rank_echoes_as_much_as_the_slow_one_needs(ranks):
    fast = ranks[0]["batches"]
    assert fast["emitted"] / fast["fresh"] > 1.5  # R ~ 6 on the slow rank: echo capped at 4


def test_ranks_stop_together_when_one_upstream_ends_first(ranks):
    long, short = ranks[0]["unequal"], ranks[1]["unequal"]
    assert long["steps"] == short["steps"]
    assert short["fresh"] == 25 and long["fresh"] in (25, 26)  # rank 0 may hold one more


def test_example_level_ranks_take_the_same_number_of_batches(ranks):
    fast, slow = ranks[0]["examples"], ranks[1]["examples"]
    assert fast["steps"] == slow["steps"] and fast["fresh"] == slow["fresh"]
    assert fast["emitted"] == 8 * fast["steps"]  # full batches only under agreement
