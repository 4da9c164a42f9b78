"""The profiler, the advice it prints, the in-loop monitor and `dataecho profile`."""

import json
import queue
import re
import sys
import threading
import time
import types
from pathlib import Path

import pytest

from dataecho import cli
from dataecho.profiler import (
    LoopTiming,
    Monitor,
    Profile,
    device_sync,
    fixed_factor,
    main,
    profile,
    recommend,
)


def slow_loader(n, seconds):
    for k in range(n):
        time.sleep(seconds)
        yield k


class Reloadable:
    """A re-iterable loader, like a DataLoader: each pass starts afresh."""

    def __init__(self, n, seconds):
        self.n, self.seconds = n, seconds

    def __iter__(self):
        return slow_loader(self.n, self.seconds)


def test_profile_measures_upstream_downstream_and_their_ratio():
    # Sleeps of tens of ms: a loaded machine oversleeps by a millisecond or two.
    p = profile(Reloadable(30, 0.04), step=0.01, batches=8, warmup=1, steps=8)
    assert p.upstream_s == pytest.approx(0.04, rel=0.5)
    assert p.downstream_s == pytest.approx(0.01, rel=0.5)
    assert 2.0 < p.ratio < 6.0
    assert 0.5 < p.stall_fraction < 1.0  # the loader reads inside the loop


def test_profile_calls_a_real_step_on_batches():
    seen = []
    profile(range(40), step=seen.append, batches=5, warmup=1, steps=3)
    assert len(seen) == 1 + 3 + 1 + 5  # warm-up, timed steps, loop warm-up, loop


def test_profile_of_a_too_short_loader_says_how_many_it_yielded_and_what_to_change():
    with pytest.raises(ValueError, match=r"loader must yield at least warmup \+ 2 = 5 batches "
                                         r".* but it yielded 4; pass warmup=2 or less"):
        profile(range(4), step=0.0, warmup=3)
    with pytest.raises(ValueError, match=r"but it yielded 1; pass a longer loader: even "
                                         r"warmup=0 needs 2 batches"):
        profile([1], step=0.0)


@pytest.mark.parametrize("make", [lambda: slow_loader(100, 0.0), lambda: iter(range(100))],
                         ids=["generator", "iter(loader)"])
def test_profile_refuses_a_one_shot_iterator_it_would_iterate_twice(make):
    with pytest.raises(TypeError, match=r"loader must be re-iterable \(profile iterates it "
                                        r"twice.*got a one-shot iterator .*pass the "
                                        r"DataLoader \(or list\) itself"):
        profile(make(), step=0.0, batches=2, warmup=0, steps=1)


@pytest.mark.parametrize(("ratio", "factor"), [(0.5, 1.0), (1.005, 1.0), (1.1, 1.1),
                                                (1.15, 1.15), (1.249, 1.24), (1.3, 1.25),
                                                (2.0, 2.0), (3.9, 3.75), (6.0, 4.0),
                                                (float("inf"), 4.0)])
def test_fixed_factor_never_exceeds_r_or_the_cap(ratio, factor):
    assert fixed_factor(ratio) == factor
    assert fixed_factor(ratio) <= max(ratio, 1.0)


@pytest.mark.parametrize("ratio", [1.2, 1.01, 1.1])
def test_r_just_above_one_is_input_bound_with_a_fractional_factor(ratio):
    text = recommend(ratio, 0.1)
    assert text.startswith(f"Input-bound: R = {ratio:.2f}")
    assert f"e = {ratio:g}." in text and f"factor={ratio:g})" in text


def test_r_barely_above_one_is_input_bound_but_not_worth_echoing():
    text = recommend(1.004)
    assert text.startswith("Barely input-bound: R = 1.0040")
    assert "leave it off" in text


@pytest.mark.parametrize("max_factor", [0, -2])
def test_max_factor_below_one_is_an_error_naming_it(max_factor):
    with pytest.raises(ValueError, match=rf"max_factor must be an int >= 1, got "
                                         rf"{max_factor}; pass max_factor=1 or more"):
        recommend(4.0, 0.75, max_factor=max_factor)
    with pytest.raises(ValueError, match="max_factor must be an int >= 1"):
        Profile(0.04, 0.01, 0.8, 50).recommendation(max_factor=max_factor)
    with pytest.raises(TypeError, match=r"max_factor must be an int >= 1, got 2.5"):
        fixed_factor(3.0, max_factor=2.5)


def test_max_factor_one_says_echoing_is_ruled_out():
    text = recommend(3.0, max_factor=1)
    assert text.startswith("Input-bound: R = 3.00") and "max_factor=1 rules out echoing" in text
    assert "up to e = 3" in text


def test_infinite_and_nan_r_get_advice_to_measure_again_not_a_crash():
    assert Profile(0.04, 0.0, 0.8, 50).ratio == float("inf")
    text = Profile(0.04, 0.0, 0.8, 50).recommendation()
    assert text.startswith("R is infinite: the training step measured 0 s per call")
    assert "profile again" in text
    assert recommend(float("nan")).startswith("R is undefined (NaN")


def test_negative_or_non_numeric_r_is_an_error_naming_it():
    with pytest.raises(ValueError, match=r"ratio must be >= 0 .*got -1.0"):
        recommend(-1.0)
    with pytest.raises(TypeError, match=r"ratio must be a real number, got '2'"):
        recommend("2")


def test_advice_when_not_input_bound_is_to_leave_echoing_off():
    text = recommend(0.8)
    assert text.startswith("Not input-bound: R = 0.80")
    assert "e <= R" in text
    assert recommend(1.0).startswith("Not input-bound: R = 1.00")


def test_profile_of_an_empty_loader_is_a_clear_error():
    with pytest.raises(ValueError, match=r"loader must yield at least warmup \+ 2 = 5 "
                                         r"batches .* but it yielded none"):
        profile([], 0.001)


@pytest.mark.parametrize("step", [-0.001, float("nan"), float("inf")])
def test_profile_rejects_a_step_duration_that_is_not_a_duration(step):
    with pytest.raises(ValueError, match=r"step must be a finite duration in seconds >= 0 "
                                         r".*got .*; pass the step's measured duration"):
        profile(range(10), step, batches=2, warmup=0, steps=1)


def test_profile_rejects_a_step_of_the_wrong_type():
    with pytest.raises(TypeError, match=r"step must be the training step, callable as "
                                        r"step\(batch\), or its duration .*got '0.01'"):
        profile(range(10), "0.01", batches=2, warmup=0, steps=1)


def test_profile_rejects_a_negative_warmup():
    with pytest.raises(ValueError, match=r"warmup must be an int >= 0, got -1; pass warmup=0"):
        profile(range(10), 0.0, warmup=-1)


def test_advice_when_input_bound_names_variant_factor_rule_and_bound():
    text = Profile(0.03, 0.01, 0.7, 50).recommendation()
    assert "Input-bound: R = 3.00" in text and "idles 67%" in text
    assert "e = 3" in text and "e <= R" in text and "min(R, e) = 3.00x" in text
    assert "echo='before_augmentation'" in text and "not bit-reproducible" in text


def test_advice_names_auto_s_caps_as_they_are():
    # Auto() caps copies augmented anew at 8 uses and identical copies at 4.
    from dataecho.factor import AUGMENTED_MAX_FACTOR, DEFAULT_MAX_FACTOR, Auto

    assert (Auto().cap(augmented=True), Auto().cap(augmented=False)) == (
        AUGMENTED_MAX_FACTOR, DEFAULT_MAX_FACTOR) == (8, 4)
    assert recommend(3.0).splitlines()[-1] == (
        "Adaptive: factor=Auto() echoes only while a batch is late, tracking R: at most 8 "
        "uses of an example before augmentation, 4 of identical copies (after it, batches); "
        "not bit-reproducible.")
    assert "factor=Auto(max_factor=6) echoes only while a batch is late, at most 6 uses" in (
        recommend(9.0, max_factor=6))


def test_advice_states_the_e_le_r_rule_once_and_each_line_says_one_thing():
    lines = recommend(3.97, 0.797).splitlines()
    assert [line.split(":")[0] for line in lines] == [
        "Input-bound", "The loader reads inside the loop", "Fixed factor", "Speedup",
        "Variant", "Adaptive"]
    assert sum("e <= R" in line for line in lines) == 1


def test_the_profile_guide_shows_the_advice_the_code_prints():
    guide = (Path(__file__).parent.parent / "docs" / "guides" / "profile.md").read_text()
    sample = guide.split("```console")[1].split("```")[0]
    ratio = float(re.search(r"^R +([\d.]+)", sample, re.M).group(1))
    stall = float(re.search(r"^stall +([\d.]+)%", sample, re.M).group(1)) / 100
    advice = sample.split("\n\n", 1)[1].strip()
    assert advice == recommend(ratio, stall)


def test_advice_caps_the_factor_and_says_why():
    text = recommend(7.0, max_factor=4)
    assert "e = 4 (capped at max_factor=4" in text and "try up to 7" in text


def test_advice_spots_a_loader_that_reads_inside_the_loop():
    assert "reads inside the loop" in recommend(4.0, 0.8)
    assert "reads inside the loop" not in recommend(4.0, 0.75)


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_monitor_splits_time_into_blocked_and_step_and_logs_every_n_steps():
    clock, lines = FakeClock(), []

    def loader():
        for k in range(6):
            clock.now += 3.0  # reading takes 3 s
            yield k

    with Monitor(loader(), every=2, log=lines.append, clock=clock) as batches:
        for _ in batches:
            clock.now += 1.0  # the step takes 1 s
    t = batches.timing()
    assert (t.steps, t.blocked_s, t.step_s) == (6, 18.0, 6.0)
    assert t.stall_fraction == 0.75 and t.ratio == 4.0
    assert len(lines) == 4 and lines[-1].startswith("dataecho: total 6 steps")
    assert "stall 75.0%, R ~ 4.00" in lines[-1]


def test_monitor_starts_a_new_pass_each_epoch_and_keeps_totals():
    monitor = Monitor([1, 2, 3], log=lambda _: None)
    assert [sum(monitor) for _ in range(2)] == [6, 6]
    assert monitor.timing().steps == 6


def test_loop_timing_before_any_step_is_nan_not_an_error():
    t = LoopTiming(0, 0.0, 0.0)
    assert t.stall_fraction != t.stall_fraction and t.ratio != t.ratio


def test_cli_with_synthetic_upstream_prints_numbers_and_advice(capsys):
    assert main(["--synthetic-upstream-ms", "8", "--step-ms", "2", "--batches", "6"]) == 0
    out = capsys.readouterr().out
    assert "ms per batch" in out and "Input-bound" in out


def test_cli_loads_loader_and_step_from_a_module(tmp_path, monkeypatch, capsys):
    (tmp_path / "mytrain.py").write_text(
        "import time\n"
        "def make_loader():\n    return range(100)\n"
        "def step(batch):\n    time.sleep(0.001)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    code = cli.main(["profile", "--module", "mytrain:make_loader", "--step", "mytrain:step",
                     "--batches", "5", "--json"])
    assert code == 0
    numbers = json.loads(capsys.readouterr().out)
    assert numbers["ratio"] < 1 and numbers["batches"] == 5


def test_cli_reports_an_empty_loader_without_a_traceback(tmp_path, monkeypatch, capsys):
    (tmp_path / "emptyloader.py").write_text("def make_loader():\n    return []\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["--module", "emptyloader:make_loader", "--step-ms", "1"]) == 2
    assert "loader must yield at least warmup + 2 = 5 batches" in capsys.readouterr().err


def test_cli_refuses_a_generator_loader_with_the_fix(tmp_path, monkeypatch, capsys):
    (tmp_path / "genloader.py").write_text("def make_loader():\n    yield from range(100)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["--module", "genloader:make_loader", "--step-ms", "1", "--batches", "2"]) == 2
    assert "loader must be re-iterable" in capsys.readouterr().err


@pytest.mark.parametrize(("args", "message"), [
    (["--step-ms", "-1"], "--step-ms must be a finite duration in milliseconds >= 0, got -1"),
    (["--step-ms", "nan"], "--step-ms must be a finite duration in milliseconds >= 0"),
    (["--step-ms", "1", "--warmup", "-1"], "warmup must be an int >= 0, got -1"),
    (["--step-ms", "1", "--max-factor", "0"], "max_factor must be an int >= 1"),
])
def test_cli_rejects_bad_durations_and_counts_with_a_message(args, message, capsys):
    assert main(["--synthetic-upstream-ms", "1", "--batches", "2", *args]) == 2
    assert message in capsys.readouterr().err


def test_cli_rejects_a_negative_synthetic_upstream(capsys):
    assert main(["--synthetic-upstream-ms", "-5", "--step-ms", "1"]) == 2
    assert "--synthetic-upstream-ms must be a finite duration in milliseconds >= 0, got -5" \
        in capsys.readouterr().err


def test_cli_reports_a_bad_module_clearly(capsys):
    assert main(["--module", "no_such_module_xyz:f", "--step-ms", "1"]) == 2
    assert "no_such_module_xyz" in capsys.readouterr().err


class AsyncStep:
    """A step that hands its work to a thread and returns at once, as a CUDA step returns
    once its kernels are queued; ``sync`` waits until the work is done, as
    ``torch.cuda.synchronize`` does. The thread runs the queued steps one after another,
    like a stream."""

    def __init__(self, seconds):
        self.seconds, self.work = seconds, queue.Queue()
        threading.Thread(target=self._device, daemon=True).start()

    def _device(self):
        while True:
            self.work.get()
            time.sleep(self.seconds)
            self.work.task_done()

    def __call__(self, batch):
        self.work.put(batch)

    def sync(self):
        self.work.join()


def test_profile_waits_for_an_asynchronous_step_so_r_is_right():
    # Truth: 40 ms per batch, 20 ms of work per step, R = 2.
    synced = AsyncStep(0.02)
    right = profile(Reloadable(12, 0.04), synced, batches=8, warmup=1, steps=8,
                    sync=synced.sync)
    assert right.downstream_s == pytest.approx(0.02, rel=0.1)
    assert right.ratio == pytest.approx(2.0, rel=0.1)
    assert right.stall_fraction == pytest.approx(2 / 3, abs=0.07)
    # The error the wait prevents: timed at its launch, the step looks free and R huge.
    wrong = profile(Reloadable(12, 0.04), AsyncStep(0.02), batches=8, warmup=1, steps=8,
                    sync=None)
    assert wrong.downstream_s < 0.002 and wrong.ratio > 20


def test_monitor_counts_an_asynchronous_step_s_work_as_the_step_not_as_data():
    def timing(sync):
        step = AsyncStep(0.02)
        with Monitor(Reloadable(8, 0.04), log=lambda _: None,
                     sync=step.sync if sync else None) as batches:
            for batch in batches:
                step(batch)
        return batches.timing()

    right = timing(sync=True)
    assert right.step_s == pytest.approx(8 * 0.02, rel=0.1)
    assert right.blocked_s == pytest.approx(8 * 0.04, rel=0.1)
    # Without the wait each step measures its launch only: its work hides in the reads.
    assert timing(sync=False).step_s < 0.1 * 8 * 0.02


def fake_torch(cuda=False, mps=False):
    calls = []
    torch = types.SimpleNamespace(
        cuda=types.SimpleNamespace(is_initialized=lambda: cuda,
                                   synchronize=lambda: calls.append("cuda")),
        mps=types.SimpleNamespace(current_allocated_memory=lambda: 1024 if mps else 0,
                                  synchronize=lambda: calls.append("mps")),
        backends=types.SimpleNamespace(mps=types.SimpleNamespace(is_available=lambda: mps)))
    return torch, calls


@pytest.mark.parametrize("cuda, mps, xla, expected", [
    (True, False, False, "cuda"), (False, True, False, "mps"),
    (False, False, True, "xla"), (False, False, False, None)])
def test_the_default_sync_is_the_device_in_use(monkeypatch, cuda, mps, xla, expected):
    torch, calls = fake_torch(cuda, mps)
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.delitem(sys.modules, "torch_xla.core.xla_model", raising=False)
    if xla:
        xm = types.SimpleNamespace(mark_step=lambda: calls.append("xla mark_step"),
                                   wait_device_ops=lambda: calls.append("xla"))
        monkeypatch.setitem(sys.modules, "torch_xla.core.xla_model", xm)
    sync = device_sync()
    assert (sync is None) == (expected is None)
    if sync is not None:
        sync()
        assert calls[-1] == expected


def test_the_default_sync_waits_once_cuda_is_initialised_after_the_monitor_is_built(
        monkeypatch):
    torch, calls = fake_torch(cuda=False)
    monkeypatch.setitem(sys.modules, "torch", torch)
    batches = Monitor([1, 2, 3, 4], log=lambda _: None)
    it = iter(batches)
    next(it), next(it)
    assert calls == []  # CPU so far: nothing to wait for
    torch.cuda.is_initialized = lambda: True  # the model moved to the GPU
    next(it), next(it)
    assert calls == ["cuda", "cuda"]


def test_a_sync_that_is_not_callable_is_an_error_naming_it():
    with pytest.raises(TypeError, match=r"sync must be a function that waits for the "
                                        r"accelerator, 'auto' or None, got 'cuda' of type "
                                        r"str; pass sync=torch.cuda.synchronize"):
        profile([1, 2, 3], 0.0, sync="cuda")
    with pytest.raises(TypeError, match=r"sync must be a function .* got 1 of type int"):
        Monitor([1], sync=1)


def test_cli_waits_for_the_device_unless_told_not_to(monkeypatch, capsys):
    from dataecho.profiler import cli as profiler_cli

    seen = []

    def fake(loader, step, **kwargs):
        seen.append(kwargs["sync"])
        return Profile(0.02, 0.01, 0.5, 3)

    monkeypatch.setattr(profiler_cli, "profile", fake)
    args = ["--synthetic-upstream-ms", "2", "--step-ms", "1", "--json"]
    assert main(args) == 0 and main([*args, "--no-sync"]) == 0
    assert seen == ["auto", None]
