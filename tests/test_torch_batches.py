import dataclasses
import io
import itertools

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader, DistributedSampler

from dataecho import Auto
from dataecho.torch import EchoBatches
from helpers.checkpoint import same

pytestmark = pytest.mark.torch


def loader(n=20, batch_size=4, **kw):
    return DataLoader(torch.arange(float(n)), batch_size=batch_size, **kw)


def test_each_batch_is_yielded_factor_times_and_len_counts_them():
    echoed = EchoBatches(loader(), 3)
    out = [b.tolist() for b in echoed]
    assert len(out) == len(echoed) == 15
    assert out[0] == out[1] == out[2] and out[3] != out[2]


@pytest.mark.parametrize("factor", [1.3, 2.5])
def test_len_is_exact_for_fractional_factors(factor):
    echoed = EchoBatches(loader(n=400), factor, seed=4)
    for epoch in range(3):
        echoed.set_epoch(epoch)
        assert len(echoed) == sum(1 for _ in echoed)


def test_stats_accumulate_over_epochs():
    echoed = EchoBatches(loader(n=10), 2)
    for _ in range(3):
        list(echoed)
    s = echoed.stats()
    assert (s.fresh_examples, s.emitted_examples, s.fresh_items, s.batches) == (30, 60, 9, 18)


def test_set_epoch_reaches_the_distributed_sampler():
    data = torch.arange(16.0)
    sampler = DistributedSampler(data, num_replicas=2, rank=0, shuffle=True, seed=1)
    echoed = EchoBatches(DataLoader(data, batch_size=4, sampler=sampler), 2)
    echoed.set_epoch(5)
    assert sampler.epoch == 5


def test_sampler_set_epoch_is_set_epoch():
    # Lightning calls loader.sampler.set_epoch(epoch) at every epoch start.
    data = torch.arange(16.0)
    sampler = DistributedSampler(data, num_replicas=2, rank=0, shuffle=True, seed=1)
    echoed = EchoBatches(DataLoader(data, batch_size=4, sampler=sampler), 2)
    echoed.sampler.set_epoch(5)
    assert echoed.epoch == sampler.epoch == 5


def test_state_taken_after_set_epoch_names_the_new_epoch_though_the_old_was_left_early():
    # As Lightning does: take len() batches but never the StopIteration, set_epoch(1),
    # then a checkpoint (say in on_train_epoch_start) before the first batch.
    def make():
        data = torch.arange(20.0)
        sampler = DistributedSampler(data, num_replicas=1, rank=0, shuffle=True, seed=3)
        return EchoBatches(DataLoader(data, batch_size=4, sampler=sampler), 2)

    echoed = make()
    first = [b.tolist() for b in itertools.islice(echoed, len(echoed))]
    echoed.set_epoch(1)
    state = echoed.state_dict()
    second = [b.tolist() for b in echoed]
    restored = make()
    restored.load_state_dict(state)
    assert [b.tolist() for b in restored] == second != first
    assert restored.stats() == echoed.stats()
    assert echoed.stats().fresh_examples == 40


def test_in_place_modification_of_an_echoed_batch_is_detected():
    with pytest.raises(RuntimeError, match=r"modified an echoed batch in place .* pass "
                                           r"clone=True"):
        for batch in EchoBatches(loader(), 2):
            batch.mul_(0)


def test_clone_makes_in_place_steps_safe():
    seen = []
    for batch in EchoBatches(loader(), 2, clone=True):
        seen.append(batch.tolist())
        batch.mul_(0)
    assert seen[0] == seen[1] == [0.0, 1.0, 2.0, 3.0]


WRITES_THAT_BYPASS_VERSIONS = {
    "through .data": lambda batch: batch.data.mul_(0),
    "through .numpy()": lambda batch: batch.numpy().__imul__(0),
}


@pytest.mark.parametrize("write", WRITES_THAT_BYPASS_VERSIONS.values(),
                         ids=WRITES_THAT_BYPASS_VERSIONS.keys())
def test_writes_that_bypass_version_counters_are_the_documented_limit_that_clone_lifts(write):
    # The in-place check reads tensor versions, which these writes do not bump: without
    # clone the next copy is silently changed (the documented limit), with it intact.
    def copies(clone):
        seen = []
        for batch in EchoBatches(loader(n=4), 2, clone=clone):
            seen.append(batch.tolist())
            write(batch)
        return seen

    assert copies(clone=True) == [[0.0, 1.0, 2.0, 3.0]] * 2
    assert copies(clone=False) == [[0.0, 1.0, 2.0, 3.0], [0.0, 0.0, 0.0, 0.0]]


def test_out_of_place_steps_pass_the_check():
    total = sum(float((b * 2).sum()) for b in EchoBatches(loader(), 2))
    assert total == 2 * 2 * sum(range(20))


def _restore_everywhere(make):
    reference = make()
    it = iter(reference)
    outputs, states, stats = [], [], []
    while True:
        states.append(reference.state_dict())
        stats.append(reference.stats())
        try:
            outputs.append(next(it))
        except StopIteration:
            break
    for k in range(len(outputs)):
        buf = io.BytesIO()
        torch.save(states[k], buf)
        restored = make()
        restored.load_state_dict(torch.load(io.BytesIO(buf.getvalue())))
        # Checkpointing again before the first batch keeps the position and counts.
        assert restored.stats() == stats[k], f"stats after restoring at {k}"
        again = make()
        again.load_state_dict(restored.state_dict())
        assert same(list(again), outputs[k:]), f"restored twice at {k}"
        assert same(list(restored), outputs[k:]), f"restored at {k}"
        assert restored.stats() == reference.stats()


def test_restore_at_every_step_of_a_plain_dataloader():
    sampler_seed = 3

    def make():
        data = torch.arange(22.0)
        sampler = DistributedSampler(data, num_replicas=1, rank=0, seed=sampler_seed)
        return EchoBatches(DataLoader(data, batch_size=4, sampler=sampler), 1.6, seed=2)

    _restore_everywhere(make)


def test_restore_at_every_step_of_a_stateful_dataloader_with_workers():
    from torchdata.stateful_dataloader import StatefulDataLoader

    def make():
        return EchoBatches(StatefulDataLoader(torch.arange(24.0), batch_size=4, num_workers=2), 2)

    _restore_everywhere(make)


def test_bad_arguments_are_rejected():
    with pytest.raises(TypeError, match=r"loader must be iterable .* got int"):
        EchoBatches(5, 2)
    with pytest.raises(ValueError, match=r"factor must be >= 1"):
        EchoBatches(loader(), 0.9)
    with pytest.raises(TypeError, match=r"state must be a dict returned by EchoBatches"):
        EchoBatches(loader(), 2).load_state_dict(3)


@pytest.mark.parametrize("name", ["clone", "check_inplace"])
def test_flags_accept_only_real_booleans(name):
    # bool("False") is True: a string would silently turn the option on.
    with pytest.raises(TypeError, match=rf"{name} must be True or False, got 'False' of type str"):
        EchoBatches(loader(), 2, **{name: "False"})


def test_a_size_function_returning_a_negative_count_is_refused():
    echoed = EchoBatches(loader(), 2, size=lambda batch: -len(batch))
    with pytest.raises(ValueError, match=r"size\(item\) must return a count of examples, an "
                                         r"int >= 0, but returned -4 of type int"):
        next(iter(echoed))


@pytest.mark.parametrize("factor", [1e300, 2.0**70])
def test_len_too_large_for_python_explains_the_factor(factor):
    with pytest.raises(OverflowError, match=r"len\(\) of EchoBatches is .* batches "
                                            r"\(factor=.* times 5 loader batches\), more "
                                            r"than len\(\) can return"):
        len(EchoBatches(loader(), factor))


def test_error_raised_by_the_loader_reaches_the_caller():
    def batches():
        yield torch.zeros(2)
        raise OSError("bucket unreachable")

    class Loader:
        def __iter__(self):
            return batches()

    with pytest.raises(OSError, match="bucket unreachable"):
        list(EchoBatches(Loader(), 2))


class SlowLoader:
    """A loader whose batches arrive every 20 ms, for a 5 ms step: R is about 4."""

    def __init__(self, n):
        self.n = n

    def __iter__(self):
        import time
        for i in range(self.n):
            time.sleep(0.02)
            yield torch.full((4,), float(i))


def test_auto_factor_echoes_while_the_loader_is_late_and_stops_its_thread(no_thread_leak):
    import time

    echoed = EchoBatches(SlowLoader(12), Auto(max_factor=3))
    steps = 0
    for _ in echoed:
        time.sleep(0.005)
        steps += 1
    s = echoed.stats()
    assert s.fresh_items == 12 and steps == s.emitted_items
    assert 1.0 < s.realised_factor <= 3.0


class Endless(torch.utils.data.IterableDataset):
    def __iter__(self):
        i = 0
        while True:
            yield torch.full((2,), float(i))
            i += 1


@pytest.mark.parametrize("factor", [2, "auto"])
def test_leaving_an_epoch_early_shuts_the_loader_workers_down_at_once(factor, no_thread_leak):
    # Not at garbage collection, which may run while another thread still reads the
    # loader (the demo once saw a worker abort that way).
    import multiprocessing

    echoed = EchoBatches(DataLoader(Endless(), batch_size=4, num_workers=1), factor)
    it = iter(echoed)
    for _ in range(10):
        next(it)
    assert multiprocessing.active_children()
    it.close()  # what a break or an exception does to the for loop's iterator
    assert not multiprocessing.active_children()
    assert echoed.stats().emitted_items == 10


def test_auto_factor_takes_the_echo_buffer_size(no_thread_leak):
    echoed = EchoBatches(loader(), Auto(buffer_size=7))
    it = iter(echoed)
    next(it)
    assert echoed.state_dict()["stage"]["config"]["buffer_size"] == 7
    it.close()
    default = EchoBatches(loader(), "auto")
    it = iter(default)
    next(it)
    assert default.state_dict()["stage"]["config"]["buffer_size"] == 4
    it.close()


def test_auto_factor_has_no_len_and_says_why():
    with pytest.raises(TypeError,
                       match=r"len\(\) of EchoBatches with factor=Auto\(\.\.\.\) is unknown"):
        len(EchoBatches(loader(), "auto"))


def test_auto_factor_detects_in_place_modification_of_a_repeated_batch():
    import time

    with pytest.raises(RuntimeError, match=r"modified an echoed batch in place"):
        for batch in EchoBatches(SlowLoader(6), "auto"):
            batch.mul_(0)
            time.sleep(0.005)


class Burst:
    """Four batches at once, then nothing for a while: "auto" echoes all four."""

    def __iter__(self):
        import time
        for i in range(4):
            yield torch.full((2,), float(i))
        time.sleep(0.5)


def test_auto_factor_detects_in_place_modification_of_any_buffered_batch(no_thread_leak):
    # Batch 0 is modified at its first use; while the loader stalls, echoes are drawn
    # from the four latest batches, so batch 0 comes again after others. No corrupted
    # copy may be yielded, and the error names the cause.
    import time

    yielded = []
    with pytest.raises(RuntimeError, match=r"modified an echoed batch in place .* pass "
                                           r"clone=True"):
        for batch in EchoBatches(Burst(), Auto(max_factor=4, buffer_size=4)):
            yielded.append(batch.tolist())
            if not yielded[:-1] and batch[0] == 0:
                batch.sub_(1000)  # the first use of batch 0
            time.sleep(0.01)
    assert all(v >= 0 for b in yielded[1:] for v in b)


def test_auto_factor_with_clone_lets_the_step_modify_any_batch(no_thread_leak):
    import time

    seen = []
    for batch in EchoBatches(Burst(), Auto(max_factor=2), clone=True):
        seen.append(batch.tolist())
        batch.sub_(1000)
        time.sleep(0.01)
    assert len(seen) > 4 and all(v >= 0 for b in seen for v in b)


def test_auto_factor_arguments_are_checked_at_construction():
    with pytest.raises(ValueError, match=r"buffer_size must be an int >= 1, got 0"):
        EchoBatches(loader(), Auto(buffer_size=0))
    with pytest.raises(ValueError, match=r"max_factor must be an int >= 1, got 0"):
        EchoBatches(loader(), Auto(max_factor=0))
    with pytest.raises(TypeError, match=r"max_factor must be an int >= 1, got '4'"):
        EchoBatches(loader(), Auto(max_factor="4"))
    with pytest.raises(TypeError, match=r"size must be callable as size\(item\) .* of type str"):
        EchoBatches(loader(), 2, size="x")
    with pytest.raises(TypeError, match=r"agree must be None or a callable agreement, got 3 .*"
                                          r"RankAgreement\(\)"):
        EchoBatches(loader(), Auto(agree=3))


def test_a_one_shot_iterator_is_rejected_since_later_epochs_would_be_empty():
    with pytest.raises(TypeError, match=r"loader must be re-iterable .* generator"):
        EchoBatches((torch.zeros(2) for _ in range(3)), 2)
    with pytest.raises(TypeError, match=r"loader must be re-iterable"):
        EchoBatches(iter(loader()), 2)


def _make_echoed():
    return EchoBatches(loader(n=8, batch_size=2), 2)


def _saved_after(steps):
    """State and counts of an echoed loader after ``steps`` batches."""
    first = _make_echoed()
    it = iter(first)
    for _ in range(steps):
        next(it)
    return first.state_dict(), first.stats()


def test_checkpoint_taken_right_after_a_restore_keeps_the_position_and_counts():
    make = _make_echoed
    saved, counts = _saved_after(5)
    restored = make()
    restored.load_state_dict(saved)
    assert restored.state_dict() == saved
    assert restored.stats() == counts
    again = make()
    again.load_state_dict(restored.state_dict())
    assert [b[0].item() for b in again] == [4.0, 6.0, 6.0]
    assert (again.stats().fresh_examples, again.stats().emitted_examples) == (8, 16)


def test_auto_factor_checkpoint_right_after_a_restore_keeps_the_counts(no_thread_leak):
    first = EchoBatches(loader(), "auto")
    it = iter(first)
    for _ in range(3):
        next(it)
    saved, counts = first.state_dict(), first.stats()
    it.close()
    restored = EchoBatches(loader(), "auto")
    restored.load_state_dict(saved)
    assert restored.state_dict() == saved
    assert restored.stats() == counts and counts.fresh_items >= 1


@dataclasses.dataclass
class Pair:
    x: torch.Tensor
    y: torch.Tensor


@dataclasses.dataclass(frozen=True)
class Frozen:
    x: torch.Tensor
    n: int = dataclasses.field(default=0, init=False)


def test_in_place_modification_of_a_dataclass_batch_is_detected():
    data = [Pair(torch.ones(2), torch.zeros(2)) for _ in range(2)]
    with pytest.raises(RuntimeError, match=r"modified an echoed batch in place"):
        for batch in EchoBatches(data, 2):
            batch.x.sub_(1)


def test_clone_copies_dataclass_and_numpy_batches():
    batches = [Pair(torch.ones(2), torch.zeros(2)), Frozen(torch.ones(2)),
               {"x": np.ones(2), "meta": [np.ones(1)]}]
    seen = []
    for batch in EchoBatches(batches, 2, clone=True):
        if isinstance(batch, dict):
            seen.append(batch["x"].tolist() + batch["meta"][0].tolist())
            batch["x"] -= 1
            batch["meta"][0] -= 1
        else:
            seen.append(batch.x.tolist())
            batch.x.sub_(1)
    assert seen == [[1.0, 1.0]] * 4 + [[1.0, 1.0, 1.0]] * 2


def test_numpy_batches_without_clone_are_refused_since_numpy_keeps_no_versions():
    batches = [{"x": np.ones(2)}, {"x": np.ones(2)}]
    with pytest.raises(TypeError, match=r"check_inplace=True cannot watch numpy arrays .* "
                                        r"clone=False; pass clone=True"):
        next(iter(EchoBatches(batches, 2)))
    # Nothing is refused where no copy comes again or nothing can change in place.
    assert len(list(EchoBatches(batches, 1))) == 2
    assert len(list(EchoBatches(batches, 2, check_inplace=False))) == 4
    frozen = np.ones(2)
    frozen.flags.writeable = False
    assert len(list(EchoBatches([{"x": frozen}], 2))) == 2
    assert list(EchoBatches([[1, 2], [3, 4]], 2)) == [[1, 2], [1, 2], [3, 4], [3, 4]]


def test_inference_tensors_are_not_watched_and_do_not_crash_the_check():
    with torch.inference_mode():
        batches = [(torch.zeros(2), torch.ones(2)), (torch.zeros(2), torch.ones(2))]
    out = list(EchoBatches(batches, 2))
    assert len(out) == 4 and out[0] is out[1]


def test_set_epoch_checks_the_epoch_and_reaches_a_sampler_inside_the_batch_sampler():
    from torch.utils.data import BatchSampler

    data = torch.arange(16.0)
    sampler = DistributedSampler(data, num_replicas=2, rank=0, shuffle=True, seed=1)
    batches = DataLoader(data, batch_sampler=BatchSampler(sampler, 4, drop_last=False))
    echoed = EchoBatches(batches, 2)
    echoed.set_epoch(3)
    assert sampler.epoch == 3 and echoed.epoch == 3
    with pytest.raises(ValueError, match=r"epoch must be an int >= 0, got -1"):
        echoed.set_epoch(-1)
    with pytest.raises(TypeError, match=r"epoch must be an int >= 0, got 1.5"):
        echoed.set_epoch(1.5)
    assert echoed.epoch == 3


def test_set_epoch_of_another_epoch_drops_a_loaded_position():
    make = _make_echoed
    saved, counts = _saved_after(3)
    restored = make()
    restored.load_state_dict(saved)
    restored.set_epoch(1)  # a loop that resumes at the next epoch
    assert [b.tolist() for b in restored] == [b.tolist() for b in make()]
    assert restored.stats().fresh_examples == counts.fresh_examples + 8
    same_epoch = make()
    same_epoch.load_state_dict(saved)
    same_epoch.set_epoch(0)  # the loaded epoch: still resumes where it stopped
    assert [b.tolist() for b in same_epoch] == [[2.0, 3.0], [4.0, 5.0], [4.0, 5.0],
                                                [6.0, 7.0], [6.0, 7.0]]


def _detection(samples):
    return tuple(zip(*samples, strict=True))


@pytest.mark.parametrize("collate", [_detection, list], ids=["detection", "identity"])
def test_batches_of_per_sample_fields_count_their_samples(collate):
    data = [(torch.zeros(3, 8, 8), {"boxes": torch.zeros(1, 4)}) for _ in range(8)]
    echoed = EchoBatches(DataLoader(data, batch_size=4, collate_fn=collate), 2)
    list(echoed)
    s = echoed.stats()
    assert (s.fresh_examples, s.emitted_examples) == (8, 16)


def test_batch_size_of_agrees_with_the_core_rule():
    from dataecho.sizes import batch_len
    from dataecho.torch.batches import batch_size_of

    x, y = torch.zeros(6, 3), torch.zeros(6)
    layouts = [x, (x, y), [x, y], {"x": x, "y": y}, [(x[0], 1)] * 5, ["a", "b"], 7,
               {"ids": [[1, 2], [3]]}, torch.tensor(2.0), np.zeros((4, 2))]
    for batch in layouts:
        assert batch_size_of(batch) == batch_len(batch), batch
    assert batch_size_of(Pair(x, y)) == 6
    assert batch_size_of(((x[0],) * 3, ({},) * 3)) == 3


def test_batch_size_of_counts_only_arrays_by_their_shape():
    import collections
    import dataclasses

    from dataecho.sizes import batch_len
    from dataecho.torch.batches import batch_size_of

    x = torch.zeros(6, 3)
    Sample = collections.namedtuple("Sample", ["image", "shape"])  # a field named shape

    @dataclasses.dataclass
    class Boxed:
        shape: torch.Tensor
        label: torch.Tensor

    class Shaped:  # a shape set per instance, not on the type
        def __init__(self):
            self.shape = (5, 2)

    for _ in range(2):  # the type is known after the first batch: same answers
        assert batch_size_of(Sample(x, torch.zeros(2))) == 6  # its first field
        assert batch_size_of(Boxed(torch.zeros(3, 2), torch.zeros(3))) == 3
        assert batch_size_of(Shaped()) == batch_len(Shaped()) == 5
        assert batch_size_of(collections.OrderedDict(x=x)) == 6
        assert batch_size_of((torch.tensor(1.0), x)) == batch_len((torch.tensor(1.0),)) == 1
        assert batch_size_of([]) == batch_size_of(()) == 0


def test_auto_is_a_value_that_carries_the_adaptive_parameters():
    assert EchoBatches(loader(), "auto").factor == Auto()
    echoed = EchoBatches(loader(), Auto(max_factor=3, buffer_size=8))
    assert (echoed.factor.max_factor, echoed.factor.buffer_size) == (3, 8)
    assert repr(echoed).startswith("EchoBatches(<DataLoader>, factor=Auto(max_factor=3, "
                                   "buffer_size=8)")


def test_nested_default_collate_batches_count_their_examples():
    # Samples ((ids, mask), label) collate to [[ids, mask], labels]: 4 examples, not 2.
    samples = [((torch.zeros(5), torch.ones(5)), i) for i in range(8)]
    loader = EchoBatches(DataLoader(samples, batch_size=4), factor=2)
    assert sum(1 for _ in loader) == 4
    assert (loader.stats().fresh_examples, loader.stats().emitted_examples) == (8, 16)
