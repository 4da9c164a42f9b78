"""DeviceEcho on device="cpu": the same code path as on CUDA, without streams.

``DATAECHO_TEST_DEVICE=cuda`` runs the same tests on a GPU (benchmarks/device_echo.py).
"""
import dataclasses
import json
import os
import time
from collections import Counter, defaultdict

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import dataecho.torch.device as device_module
from dataecho import Auto
from dataecho._rng import derive_seed
from dataecho.echo import copies_at
from dataecho.torch import DeviceEcho
from dataecho.torch.ring import Ring
from helpers.checkpoint import as_json, assert_restores_everywhere

pytestmark = pytest.mark.torch
DEVICE = os.environ.get("DATAECHO_TEST_DEVICE", "cpu")


def batches(n=6, size=4, dim=3):
    """Batches of examples whose ``id`` is their number and whose ``x`` rows equal it."""
    return [{"x": (torch.arange(size) + k * size).float()[:, None].repeat(1, dim),
             "id": torch.arange(size) + k * size} for k in range(n)]


def echo(loader=None, **kw):
    args = {"augment": None, "factor": 2, "device": DEVICE, "window": 4, "seed": 0} | kw
    return DeviceEcho(batches() if loader is None else loader, **args)


def ids(out):
    return Counter(torch.cat([b["id"] for b in out]).tolist())


def noise(batch, generator):
    x = batch["x"]
    return {**batch, "x": x + torch.rand(x.shape, generator=generator, device=x.device)}


class Steps:
    """Epochs of a DeviceEcho as one checkpointable iterator, for the round-trip helper."""

    def __init__(self, echo, epochs):
        self.echo, self.epochs, self.it = echo, epochs, None

    def __iter__(self):
        return self

    def __next__(self):
        while True:
            if self.it is None:
                if self.echo.epoch >= self.epochs:
                    raise StopIteration
                self.it = iter(self.echo)
            try:
                return {k: v.cpu() for k, v in next(self.it).items()}
            except StopIteration:
                self.it = None

    def state_dict(self):
        return self.echo.state_dict()

    def load_state_dict(self, state):
        self.echo.load_state_dict(state)

    def stats(self):
        # The counts only: device_bytes is the memory this object holds, none yet in one
        # restored at the end, which reads nothing.
        counts = self.echo.stats()
        return counts.fresh_examples, counts.emitted_examples, counts.batches


@pytest.mark.parametrize("mode", ["examples", "batches"])
@pytest.mark.parametrize("factor", [1, 3])
def test_every_example_goes_out_exactly_factor_times_each_epoch(mode, factor):
    stage = echo(factor=factor, mode=mode)
    for _ in range(2):
        out = list(stage)
        assert ids(out) == {i: factor for i in range(24)}
        assert all(len(b["id"]) == 4 for b in out)
    assert stage.stats().emitted_examples == 2 * 24 * factor


@pytest.mark.parametrize("mode", ["examples", "batches"])
def test_a_fractional_factor_makes_the_copies_of_dataecho_draw(mode):
    stage = echo(loader=batches(n=10), factor=1.5, seed=3, mode=mode)
    for epoch in range(2):
        counts = ids(list(stage))
        draws = copies_at(1.5, derive_seed(3, epoch),
                          np.arange(40 if mode == "examples" else 10))
        want = draws if mode == "examples" else np.repeat(draws, 4)
        assert [counts[i] for i in range(40)] == want.tolist()
    assert 1.2 < stage.stats().realised_factor < 1.8


def test_a_groups_copies_are_mixed_over_its_steps_and_no_further():
    out = list(echo(window=4, factor=2))  # groups of 2 batches, 4 steps each
    first = [set(b["id"].tolist()) for b in out[:4]]
    assert ids(out[:4]) == {i: 2 for i in range(8)}  # the first group's copies, all
    assert any(s & set(range(4)) and s & set(range(4, 8)) for s in first)


def test_the_last_step_of_an_epoch_holds_what_is_left():
    loader = [*batches(n=3), {"x": torch.zeros(2, 3), "id": torch.tensor([12, 13])}]
    out = list(echo(loader=loader, factor=1.5, seed=1))
    assert [len(b["id"]) for b in out[:-1]] == [4] * (len(out) - 1)
    assert 1 <= len(out[-1]["id"]) <= 4
    assert set(ids(out)) == set(range(14))


def test_copies_differ_under_a_random_augment_and_are_equal_under_the_identity():
    for augment, differ in ((noise, True), (None, False)):
        rows = defaultdict(list)
        for b in echo(augment=augment, factor=3):
            for i, x in zip(b["id"].tolist(), b["x"], strict=True):
                rows[i].append(x)
        for i, copies in rows.items():
            equal = [torch.equal(copies[0], c) for c in copies[1:]]
            assert not any(equal) if differ else all(equal)
            assert torch.all(copies[0] >= i) and torch.all(copies[0] < i + 1)


def test_one_seed_gives_bitwise_equal_runs_and_another_seed_different_ones():
    def run(seed):
        return torch.cat([b["x"] for b in echo(augment=noise, factor=1.5, seed=seed)])
    assert torch.equal(run(5), run(5))
    a, b = run(5), run(6)
    assert a.shape != b.shape or not torch.equal(a, b)


def test_a_one_argument_augment_runs_under_fork_rng_and_leaves_the_global_stream():
    def jitter(batch):  # draws from torch's global generator, as kornia does
        x = batch["x"]
        return {**batch, "x": x + torch.rand(x.shape, device=x.device)}
    torch.manual_seed(123)
    before = torch.get_rng_state()
    cuda = torch.cuda.get_rng_state() if DEVICE == "cuda" else None
    first = [b["x"] for b in echo(augment=jitter)]
    assert torch.equal(before, torch.get_rng_state())
    assert cuda is None or torch.equal(cuda, torch.cuda.get_rng_state())
    again = [b["x"] for b in echo(augment=jitter)]
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))
    assert not torch.equal(first[0], first[1])


@pytest.mark.parametrize("mode", ["examples", "batches"])
def test_state_dict_is_json_without_tensors(mode):
    stage = echo(mode=mode)
    it = iter(stage)
    next(it)
    state = stage.state_dict()
    assert as_json(state) == state
    assert "Tensor" not in json.dumps(state)


@pytest.mark.parametrize(("mode", "factor", "window"),
                         [("examples", 2, 4), ("examples", 1.5, 2), ("batches", 2.5, 3)])
def test_a_resume_after_every_step_gives_the_identical_remainder_across_epochs(
        mode, factor, window):
    def make():
        return Steps(echo(loader=batches(n=5), augment=noise, factor=factor, window=window,
                          seed=9, mode=mode), epochs=2)
    # The position is None at an epoch's start and the pass's state inside it (Epochs).
    out = assert_restores_everywhere(make, constant_spec=False)
    assert set(ids(out)) == set(range(20))


def test_a_resume_re_reads_only_the_current_group():
    class Counting(list):
        reads = 0

        def __iter__(self):
            for item in super().__iter__():
                Counting.reads += 1
                yield item
    stage = echo(loader=Counting(batches(n=8)), window=4)  # groups of 2 batches, 4 steps
    it = iter(stage)
    for _ in range(7):  # into the second group
        next(it)
    state = stage.state_dict()
    assert state["stage"]["upstream"]["consumed"] == 2  # before the second group
    restored = echo(loader=Counting(batches(n=8)), window=4)
    restored.load_state_dict(state)
    Counting.reads = 0
    rest = list(restored)
    # The 2 batches before the group skipped, the group's 2 and the 4 after it read once
    # (the original had read 5 by the checkpoint: the restore reads 3 of them again).
    assert Counting.reads == 2 + 2 + 4
    assert len(rest) == 16 - 7


def test_a_ring_over_max_bytes_is_refused_with_the_numbers():
    with pytest.raises(ValueError, match=r"max_bytes=100 is below the device ring's 320 "
                       r"bytes: window=4 slots of 80 bytes .*max_bytes holds 1; pass a smaller "
                       r"window or smaller batches, or max_bytes >= 320"):
        list(echo(max_bytes=100))


def test_stats_report_the_bytes_of_the_ring():
    stage = echo(window=4)
    assert stage.stats().device_bytes == 0
    list(stage)
    # 4 slots x 4 examples x (3 float32 + 1 int64)
    assert stage.stats().device_bytes == 4 * 4 * (3 * 4 + 8) == 320
    assert stage.stats().device_bytes == stage._shared.ring.nbytes


def test_an_in_place_step_leaves_later_copies_intact():
    seen = defaultdict(list)
    for b in echo(factor=3, mode="batches"):
        for i, x in zip(b["id"].tolist(), b["x"], strict=True):
            seen[i].append(x.clone())
        b["x"].mul_(0).sub_(1)  # a step that normalises its input in place
        b["id"].zero_()
    assert all(torch.all(x == i) for i, xs in seen.items() for x in xs)
    assert all(len(xs) == 3 for xs in seen.values())


class Recorder:
    """A fake stream/event ordering: runs copies at once and logs every call, with the
    slots the ring's put and gather touch (patched in by the test)."""

    def __init__(self):
        self.log, self.events = [], 0

    def _event(self):
        self.events += 1
        return self.events

    def copy(self, work, after, resident=False):
        work()  # logs ("put", slot)
        ready = self._event()
        self.log.append(("copy", self.log[-1][1], after, ready))
        return ready

    def free(self):
        event = self._event()
        self.log.append(("free", event))
        return event

    def wait(self, ready):
        self.log.append(("wait", ready))

    def done(self, ready):
        return True


def test_a_fake_recorder_proves_copies_wait_for_free_slots_and_gathers_for_copies(
        monkeypatch):
    recorder = Recorder()
    monkeypatch.setattr(device_module, "ordering_for", lambda device: recorder)
    put, gather = Ring.put, Ring.gather

    def logged_put(self, slot, flat, n):
        recorder.log.append(("put", slot))
        put(self, slot, flat, n)

    def logged_gather(self, index):
        recorder.log.append(("gather", set((index // self.rows).tolist())))
        return gather(self, index)
    monkeypatch.setattr(Ring, "put", logged_put)
    monkeypatch.setattr(Ring, "gather", logged_gather)
    stage = echo(loader=batches(n=9), factor=1.5, window=4, seed=2)
    for _ in range(2):
        list(stage)
    log = recorder.log
    copies = [k for k, entry in enumerate(log) if entry[0] == "copy"]
    assert len(copies) == 18
    for k in copies:
        _, slot, after, ready = log[k]
        reads = [j for j in range(k) if log[j][0] == "gather" and slot in log[j][1]]
        earlier = [j for j in copies if j < k and log[j][1] == slot]
        if earlier:  # the slot held a batch: its copy waits for the free event that
            # follows the last gather of it, and no gather reads the slot in between
            assert after is not None
            freed = log.index(("free", after))
            assert reads and reads[-1] < freed < k
        # every gather that reads this batch waits for its ready event first
        later = [j for j in range(k + 1, len(log)) if log[j][0] == "copy"
                 and log[j][1] == slot]
        end = later[0] if later else len(log)
        gathers = [j for j in range(k, end) if log[j][0] == "gather" and slot in log[j][1]]
        assert gathers, "every batch is gathered"
        assert ("wait", ready) in log[k:gathers[0]]


def test_auto_echoes_only_while_the_loader_is_late(no_thread_leak):
    class Sleepy(list):
        def __init__(self, items, delay):
            super().__init__(items)
            self.delay = delay

        def __iter__(self):
            for item in super().__iter__():
                time.sleep(self.delay)
                yield item
    late = echo(loader=Sleepy(batches(n=6), 0.05), factor=Auto(max_factor=4), window=2)
    out = list(late)
    assert late.stats().realised_factor > 1.5
    assert set(ids(out)) == set(range(24))
    fast = echo(loader=Sleepy(batches(n=6), 0.0), factor=Auto(max_factor=4), window=2)
    steps = []
    for b in fast:
        time.sleep(0.2)  # a step far slower than the loader, even on a loaded machine
        steps.append(b)
    assert fast.stats().realised_factor == 1.0
    assert ids(steps) == {i: 1 for i in range(24)}


def test_auto_takes_the_decision_the_ranks_agree_on():
    votes = []

    def another_rank_is_late(ready, capacity, ended):
        votes.append((ready, capacity, ended))
        return 0 if capacity else ready, capacity, ended
    stage = echo(factor=Auto(max_factor=3, agree=another_rank_is_late), window=2)
    # Every group is passed over 3 times but the last: the loader has ended there.
    assert ids(list(stage)) == {i: 3 if i < 20 else 1 for i in range(24)}
    assert votes and votes[-1][2] is True


@dataclasses.dataclass(frozen=True)
class Images:
    x: torch.Tensor
    id: torch.Tensor
    source: str


@pytest.mark.parametrize("layout", ["tensor", "tuple", "dict", "dataclass"])
def test_tensor_tuple_dict_and_dataclass_batches_keep_their_layout(layout):
    def as_layout(b):
        return {"tensor": b["id"], "tuple": (b["x"], b["id"], "train"), "dict": b,
                "dataclass": Images(b["x"], b["id"], "train")}[layout]
    out = list(echo(loader=[as_layout(b) for b in batches()], factor=2))
    first = out[0]
    assert type(first) is type(as_layout(batches()[0]))
    key = {"tensor": lambda b: b, "tuple": lambda b: b[1], "dict": lambda b: b["id"],
           "dataclass": lambda b: b.id}[layout]
    assert Counter(torch.cat([key(b) for b in out]).tolist()) == {i: 2 for i in range(24)}
    if layout == "tuple":
        assert first[2] == "train" and torch.equal(first[0][:, 0], first[1].float())
    if layout == "dataclass":
        assert first.source == "train" and torch.equal(first.x[:, 0], first.id.float())


@pytest.mark.parametrize(("kw", "error", "message"), [
    ({"window": 1}, ValueError, r"window must be an int >= 2, got 1"),
    ({"mode": "rows"}, ValueError, r"mode must be one of \('examples', 'batches'\), got 'rows'"),
    ({"max_bytes": 0}, ValueError, r"max_bytes must be an int >= 1, got 0"),
    ({"device": 3}, TypeError, r"device must be a torch.device or a name .* got 3 of type int"),
    ({"device": "gpu9"}, ValueError, r"device must name a torch device .* got 'gpu9'"),
    ({"augment": 3}, TypeError, r"augment must be callable as augment\(batch, generator\)"),
    ({"factor": 0.5}, ValueError, r"factor must be >= 1"),
    ({"seed": -1}, ValueError, r"seed must be an int in \[0, 2\*\*63\), got -1"),
    ({"loader": iter([])}, TypeError, r"loader must be re-iterable"),
])
def test_bad_arguments_are_refused_naming_the_parameter_rule_value_and_fix(kw, error, message):
    with pytest.raises(error, match=message):
        echo(**kw)


def test_a_batch_unlike_the_first_is_refused_naming_both():
    loader = [*batches(n=2), {"x": torch.zeros(4, 5), "id": torch.arange(4)}]
    with pytest.raises(ValueError, match=r"must be fixed-size: every batch like the first "
                       r"\(4 examples of \['\(3,\) torch.float32', '\(\) torch.int64'\]\)"):
        list(echo(loader=loader, window=2))


def test_cuda_is_refused_where_torch_sees_none_and_taken_where_it_sees_one():
    if torch.cuda.is_available():  # no skip: DATAECHO_REQUIRE_ALL counts one as a failure
        assert echo(device="cuda").device.type == "cuda"
        return
    with pytest.raises(ValueError, match=r"torch sees no CUDA device here"):
        echo(device="cuda")


def test_repr_shows_the_parameters():
    assert repr(echo(device="cpu", max_bytes=10**9)) == (
        "DeviceEcho(<list>, factor=2.0, device='cpu', window=4, seed=0, mode='examples', "
        "max_bytes=1000000000)")
