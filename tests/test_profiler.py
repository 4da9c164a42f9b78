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
    Pass,
    Profile,
    advised_factor,
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
    assert len(seen) == 3 * (1 + 3 + 1 + 5)  # per pass: warm-up, timed, loop warm-up, loop


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
        "Prediction", "Variant", "Adaptive"]
    assert sum("e <= R" in line for line in lines) == 1


def test_the_profile_guide_shows_the_advice_the_code_prints():
    guide = (Path(__file__).parent.parent / "docs" / "guides" / "profile.md").read_text()
    sample = guide.split("```console")[1].split("```")[0]
    ratio, low, high = map(float, re.search(r"^R +([\d.]+) .*\(([\d.]+)-([\d.]+)\)$",
                                            sample, re.M).groups())
    stall = float(re.search(r"^stall +([\d.]+)%", sample, re.M).group(1)) / 100
    passes = int(re.search(r"^passes +(\d+)", sample, re.M).group(1))
    advice = sample.split("\n\n", 1)[1].strip()
    assert advice == recommend(ratio, stall, spread=(low, high), passes=passes)


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
    (["--step-ms", "-1"], "argument --step-ms: must be a finite duration in milliseconds >= 0, "
                          "got -1; pass the measured duration, e.g. --step-ms 25"),
    (["--step-ms", "nan"], "argument --step-ms: must be a finite duration in milliseconds"),
    (["--step-ms", "1", "--warmup", "-1"], "argument --warmup: must be a whole number >= 0 "
                                           "(untimed batches), got -1; pass --warmup 0 or more"),
    (["--step-ms", "1", "--max-factor", "0"],
     "argument --max-factor: must be a whole number >= 1 (the largest factor to advise; 1 "
     "rules echoing out), got 0; pass --max-factor 1 or more"),
    (["--step-ms", "1", "--max-factor", "2.5"], "argument --max-factor: must be a whole number"),
    (["--step-ms", "1", "--passes", "2"], "argument --passes: must be a whole number >= 3 (a "
                                          "median and a spread need 3), got 2"),
    (["--step-ms", "1", "--batches", "0"], "argument --batches: must be a whole number >= 1"),
])
def test_cli_refuses_bad_numbers_as_usage_errors_naming_the_flag(args, message, capsys):
    with pytest.raises(SystemExit) as exit:
        main(["--synthetic-upstream-ms", "1", "--batches", "2", *args])
    assert exit.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: dataecho profile") and message in err
    assert "max_factor" not in err and "Traceback" not in err  # the flag, not the Python name


def test_cli_rejects_a_negative_synthetic_upstream(capsys):
    with pytest.raises(SystemExit):
        main(["--synthetic-upstream-ms", "-5", "--step-ms", "1"])
    assert ("argument --synthetic-upstream-ms: must be a finite duration in milliseconds >= 0, "
            "got -5") in capsys.readouterr().err


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


class Ticking:
    """A re-iterable loader on a fake clock. Iteration ``i`` (two per pass: the loader
    alone, then the plain loop) takes ``seconds[i % len(seconds)]`` a batch, except its
    first ``ready`` batches after the first, which a DataLoader's workers would have
    prefetched (free). Keyword attributes (``num_workers=2``) are set on it, as a
    DataLoader has them."""

    def __init__(self, clock, seconds, n=60, ready=0, **attributes):
        self.clock, self.seconds, self.n, self.ready, self.iterations = (
            clock, seconds, n, ready, 0)
        self.__dict__.update(attributes)

    def __iter__(self):
        seconds = self.seconds[self.iterations % len(self.seconds)]
        self.iterations += 1
        for k in range(self.n):
            if not 1 <= k <= self.ready:
                self.clock.now += seconds
            yield k


def fake_step(clock, seconds=0.01):
    def step(batch):
        clock.now += seconds
    return step


def fake_profile(seconds, **attributes):
    clock = FakeClock()
    return profile(Ticking(clock, seconds, **attributes), fake_step(clock), batches=10,
                   warmup=2, steps=5, sync=None, clock=clock)


def test_passes_that_disagree_on_echoing_get_no_advice_but_the_way_to_a_decision():
    # Per pass, the loader alone then the plain loop: 5, 40 and 20 ms a batch against a
    # 10 ms step: R = 0.5, 4 and 2, a pass on each side of 1.
    p = fake_profile([0.005, 0.005, 0.04, 0.04, 0.02, 0.02])
    assert [round(x.ratio, 6) for x in p.passes] == [0.5, 4.0, 2.0]
    assert round(p.ratio, 6) == 2.0 and p.spread("ratio") == pytest.approx((0.5, 4.0))
    text = p.recommendation()
    assert text.splitlines()[0] == ("Undecided: R = 2.00, but its 3 passes range from 0.50 to "
                                    "4.00, on both sides of 1.")
    assert "--batches 200 --passes 5" in text and "quieter machine" in text
    assert "Fixed factor" not in text and "e = " not in text
    assert p.factor() is None


def test_passes_that_agree_get_advice_with_their_median_and_spread():
    p = fake_profile([0.04])
    assert p.spread("ratio") == pytest.approx((4.0, 4.0))
    assert p.spread("upstream_s") == pytest.approx((0.04, 0.04))
    assert p.spread("downstream_s") == pytest.approx((0.01, 0.01))
    text = p.recommendation()
    assert text.startswith("Input-bound: R = 4.00 (4.00-4.00 over 3 passes)")
    assert "Fixed factor: e = 4." in text and p.factor() == 4.0
    assert "passes             3" in str(p) and "(4.00-4.00)" in str(p)


def test_the_factor_is_the_one_free_on_the_slowest_pass():
    p = Profile.of([Pass(0.030, 0.01, 0.7), Pass(0.040, 0.01, 0.7), Pass(0.026, 0.01, 0.7)], 50)
    assert round(p.ratio, 6) == 3.0 and p.factor() == 2.5  # 2.5 <= R on every pass
    assert "e = 2.5 (free on the slowest pass too, R = 2.60)" in p.recommendation()
    assert advised_factor(3.0) == 3.0  # one measurement: the factor of R itself


def test_the_warm_up_discards_what_the_loader_s_workers_prefetched():
    # 2 workers x prefetch_factor 3: six batches wait in the queue when the pass starts.
    p = fake_profile([0.04], ready=6, num_workers=2, prefetch_factor=3)
    assert p.upstream_s == pytest.approx(0.04) and p.warmup == 2 + 6
    # Without the workers' attributes the same loader looks faster: the queue is timed.
    assert fake_profile([0.04], ready=12).upstream_s < 0.035


def test_a_loader_that_has_workers_is_never_told_to_add_them():
    # The plain loop stalls 80% at R = 4, above the 75% reading overlapped would give.
    for workers in (1, 2):
        text = fake_profile([0.04], num_workers=workers).recommendation()
        assert "workers" not in text.split("Fixed factor")[0], text
        assert "reads inside the loop" not in text
    assert "reads inside the loop" in fake_profile([0.04], num_workers=0).recommendation()
    assert "reads inside the loop" in fake_profile([0.04]).recommendation()  # unknown
    assert "reads inside the loop" not in recommend(4.0, 0.9, num_workers=2)


def test_the_workers_are_found_through_a_wrapper_holding_the_loader():
    clock = FakeClock()

    class Wrapper:  # as EchoBatches and Monitor keep the DataLoader they wrap
        loader = Ticking(clock, [0.04], num_workers=2, prefetch_factor=2)

        def __iter__(self):
            return iter(self.loader)

    p = profile(Wrapper(), fake_step(clock), batches=10, warmup=2, steps=5, sync=None,
                clock=clock)
    assert p.num_workers == 2 and p.warmup == 2 + 4
    assert "reads inside the loop" not in p.recommendation()


def test_a_loader_too_short_for_its_prefetch_says_how_many_it_needs():
    clock = FakeClock()
    with pytest.raises(ValueError, match=r"loader must yield at least warmup \+ prefetch \+ 2 "
                                         r"= 9 batches \(the first, 3 warm-up, 4 its workers "
                                         r"prefetch, 1 or more timed\), but it yielded 8; pass "
                                         r"warmup=2 or less \(--warmup 2\)"):
        profile(Ticking(clock, [0.01], n=8, num_workers=2), fake_step(clock), warmup=3,
                sync=None, clock=clock)


def test_profile_needs_three_passes_for_a_median_and_a_spread():
    with pytest.raises(ValueError, match=r"passes must be an int >= 3, got 2; pass passes=3"):
        profile(range(10), 0.0, passes=2)


def test_cli_json_carries_the_factor_variant_median_and_spread(monkeypatch, capsys):
    from dataecho.profiler import cli as profiler_cli

    steady = Profile.of([Pass(0.040, 0.01, 0.7), Pass(0.041, 0.01, 0.7),
                         Pass(0.039, 0.01, 0.7)], 50, warmup=7, num_workers=2)
    noisy = Profile.of([Pass(0.005, 0.01, 0.7), Pass(0.040, 0.01, 0.7),
                        Pass(0.020, 0.01, 0.7)], 50)
    args = ["--synthetic-upstream-ms", "2", "--step-ms", "1", "--json", "--max-factor", "8"]
    seen = {}
    for name, result in (("steady", steady), ("noisy", noisy)):
        monkeypatch.setattr(profiler_cli, "profile", lambda *a, result=result, **k: result)
        assert main(args) == 0
        seen[name] = json.loads(capsys.readouterr().out)
    out = seen["steady"]
    assert (out["decided"], out["factor"], out["variant"]) == (True, 3.75, "before_augmentation")
    assert out["ratio"] == pytest.approx(4.0) and out["max_factor"] == 8
    assert out["spread"]["ratio"] == pytest.approx([3.9, 4.1])
    assert out["spread"]["upstream_s"] == pytest.approx([0.039, 0.041])
    assert len(out["passes"]) == 3 and out["passes"][0]["ratio"] == pytest.approx(4.0)
    assert (out["warmup"], out["num_workers"]) == (7, 2)
    out = seen["noisy"]
    assert (out["decided"], out["factor"], out["variant"]) == (False, None, None)
    assert out["spread"]["ratio"] == pytest.approx([0.5, 4.0])


def test_cli_json_names_no_variant_when_the_advice_is_not_to_echo(capsys):
    assert main(["--synthetic-upstream-ms", "1", "--step-ms", "3", "--batches", "3",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["decided"], out["factor"], out["variant"]) == (True, 1.0, None)
    assert out["spread"]["ratio"][0] <= out["ratio"] <= out["spread"]["ratio"][1]
