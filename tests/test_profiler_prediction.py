"""The profiler's advice from the model: an EchoDataset's two sides, or the two costs given."""

import json
import re
from pathlib import Path

import pytest

from dataecho.profiler import Pass, Profile, main, profile, recommend
from dataecho.profiler import cli as profiler_cli
from dataecho.profiler.model import Costs, predict
from dataecho.timing import Sides


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


class KnownSides:
    """Stands in for an EchoDataset whose readers measured ``sides``; counts the calls."""

    def __init__(self, sides, loader=None):
        self.known, self.loader, self.asked_after = sides, loader, []

    def sides(self):
        self.asked_after.append(self.loader.iterations if self.loader else None)
        return self.known


class FakeDataLoader:
    """A re-iterable loader on a fake clock, ``seconds`` a batch, with a DataLoader's
    ``dataset``, ``batch_size``, ``num_workers`` (none prefetched: prefetch_factor 0)."""

    def __init__(self, clock, seconds, sides, batch_size=8, num_workers=2, n=40):
        self.clock, self.seconds, self.n, self.iterations = clock, seconds, n, 0
        self.batch_size, self.num_workers, self.prefetch_factor = batch_size, num_workers, 0
        self.dataset = KnownSides(sides, self)

    def __iter__(self):
        self.iterations += 1
        for k in range(self.n):
            self.clock.now += self.seconds
            yield k


def fake_step(clock, seconds):
    def step(batch):
        clock.now += seconds
    return step


def profiled(loader, clock, step_s=0.010):
    return profile(loader, fake_step(clock, step_s), batches=10, warmup=2, steps=5,
                   sync=None, clock=clock)


# 5 ms a read and 1 ms an augmentation per example; 8 examples a batch over 2 workers.
SIDES = Sides(read_s=0.005, augment_s=0.001, reads=310, augments=620)


def test_an_echo_dataset_s_sides_become_costs_per_batch_over_the_workers():
    clock = FakeClock()
    loader = FakeDataLoader(clock, 0.024, SIDES)
    p = profiled(loader, clock)
    assert p.read_s == pytest.approx(0.005 * 8 / 2) and p.augment_s == pytest.approx(0.004)
    assert loader.dataset.asked_after == [6]  # once, after 3 passes of 2 iterations each
    costs = p.costs()
    assert (costs.step_s, costs.read_s, costs.augment_s) == (
        pytest.approx(0.010), pytest.approx(0.020), pytest.approx(0.004))
    prediction = p.prediction()
    assert prediction == predict(p.costs())
    # Before augmentation the step is free up to e = 20 / (10 - 4) = 3.33: 3.25.
    assert (prediction.variant, prediction.factor) == ("before_augmentation", 3.25)
    assert p.factor() == 3.25


def test_a_loader_without_workers_reads_every_batch_in_this_process():
    clock = FakeClock()
    p = profiled(FakeDataLoader(clock, 0.048, SIDES, num_workers=0), clock)
    assert p.read_s == pytest.approx(0.040) and p.augment_s == pytest.approx(0.008)


def test_the_echo_dataset_is_found_through_a_wrapper_holding_the_loader():
    clock = FakeClock()

    class Wrapper:  # as EchoBatches keeps the DataLoader it wraps
        loader = FakeDataLoader(clock, 0.024, SIDES, batch_size=4, num_workers=1)

        def __iter__(self):
            return iter(self.loader)

    p = profiled(Wrapper(), clock)
    assert (p.read_s, p.augment_s) == (pytest.approx(0.020), pytest.approx(0.004))


def test_no_echo_dataset_or_no_timed_read_leaves_the_sides_unknown():
    clock = FakeClock()
    untimed = Sides(read_s=None, augment_s=0.0, reads=0, augments=0)
    for loader in (FakeDataLoader(clock, 0.04, untimed), range(100)):
        p = profiled(loader, clock)
        assert (p.read_s, p.augment_s, p.costs(), p.prediction()) == (None, None, None, None)
    text = profiled(FakeDataLoader(clock, 0.04, untimed), clock).recommendation()
    assert "Fixed factor: e = 4" in text  # today's advice from R alone
    assert ("Prediction: needs the loader's two sides per batch, its read and its "
            "augmentation: wrap your dataset in EchoDataset(data, augment=..., factor=1) and "
            "profile that loader, or pass them (--read-ms MS --augment-ms MS).") in text


def test_the_advice_prints_the_model_s_variant_factor_and_speedup():
    p = Profile(0.036, 0.010, 0.7, 50, read_s=0.032, augment_s=0.004)
    lines = p.recommendation().splitlines()
    assert lines[0] == ("Input-bound: the loader's read 32.00 + augment 4.00 = 36.00 ms per batch "
                        "(over its workers) exceeds the 10.00 ms step: the accelerator idles 72%.")
    # Free up to 32 / (10 - 4) = 5.33 before augmentation: e = 5.25, each batch 10.1 ms.
    assert ("Prediction: 3.57x steps/s at e = 5.25 before augmentation; to a target, times "
            "steps(1)/steps(e) of your workload, measured with dataecho reproduce.") in lines
    assert any(line.startswith("Variant: EchoDataset(data, augment=..., factor=5.25)")
               for line in lines)
    assert "Augmentation-bound" not in p.recommendation() and "e <= R" not in p.recommendation()


def test_augmentation_over_the_step_says_only_echo_after_it_or_batch_echo_can_help():
    p = Profile(0.042, 0.010, 0.7, 50, read_s=0.030, augment_s=0.012)
    text = p.recommendation()
    assert ("Augmentation-bound: the augmentation alone, 12.00 ms per batch, takes the 10.00 ms "
            "step or more: echoing before augmentation repeats it for every copy and gains at "
            "most 2.67x; only echo after augmentation or batch echo can help.") in text
    assert "Prediction: 4.00x steps/s at e = 4 after augmentation;" in text
    assert "EchoBatches(loader, factor=4)" in text
    assert p.prediction().augment_bound and p.prediction().variant == "after_augmentation"


def test_a_loader_whose_sides_keep_up_is_told_not_to_echo():
    p = Profile(0.012, 0.010, 0.2, 50, read_s=0.006, augment_s=0.003)
    text = p.recommendation()
    assert text.startswith("Not input-bound: the loader's read 6.00 + augment 3.00 = 9.00 ms")
    assert "Prediction" not in text and "Adaptive" not in text
    assert p.factor() == 1.0 and p.prediction().variant is None


def test_work_beyond_the_two_sides_is_named_not_predicted_away():
    # The loader alone takes 60 ms a batch, its read and augmentation only 36.
    text = Profile(0.060, 0.010, 0.8, 50, num_workers=2, read_s=0.032,
                   augment_s=0.004).recommendation()
    assert ("Beyond the sides: the loader alone takes 60.00 ms per batch, 24.00 ms more than "
            "its read and augmentation") in text


def test_the_max_factor_caps_the_model_s_factor():
    p = Profile(0.041, 0.010, 0.7, 50, read_s=0.040, augment_s=0.001)
    assert p.prediction().factor == 4.25 and p.prediction(max_factor=2).factor == 2.0
    assert "at e = 2 before augmentation (capped at 2 uses of an example; free up to e = 4.44)" \
        in p.recommendation(max_factor=2)
    assert "max_factor=1 rules out echoing" in p.recommendation(max_factor=1)


def test_passes_that_disagree_on_r_give_no_prediction():
    p = Profile.of([Pass(0.005, 0.01, 0.7), Pass(0.040, 0.01, 0.7), Pass(0.020, 0.01, 0.7)],
                   50, read_s=0.040, augment_s=0.005)
    assert p.prediction() is None and p.factor() is None
    assert p.recommendation().startswith("Undecided: R = 2.00, but its 3 passes range")


def test_steps_that_disagree_on_the_model_s_verdict_give_no_prediction():
    # The loader's 11 ms a batch frees e = 1.25 against an 8 ms step, nothing against 12 ms;
    # R is above 1 on every pass, so only the model's verdict splits them.
    p = Profile.of([Pass(0.016, 0.008, 0.5), Pass(0.020, 0.010, 0.5), Pass(0.024, 0.012, 0.5)],
                   50, read_s=0.011, augment_s=0.0)
    assert p.prediction() is None and p.factor() is None
    text = p.recommendation()
    assert text.splitlines()[0] == (
        "Undecided: the loader's read and augment take 11.00 ms per batch, but the step over "
        "its 3 passes ranges from 8.00 to 12.00 ms: some passes make a factor free, others "
        "none.")
    assert "--batches 200 --passes 5" in text


def test_recommend_with_costs_matches_the_profile_s_advice():
    costs = Costs(step_s=0.010, read_s=0.030, augment_s=0.006)
    assert recommend(3.6, costs=costs) == Profile(0.036, 0.010, float("nan"), 50, read_s=0.030,
                                                  augment_s=0.006).recommendation()


def test_the_profile_guide_shows_the_prediction_the_code_prints():
    guide = (Path(__file__).parent.parent / "docs" / "guides" / "profile.md").read_text()
    blocks = [block.split("```")[0] for block in guide.split("```console")[1:]]
    sample = next(block for block in blocks if "$ dataecho profile --read-ms" in block)

    def number(pattern):
        return [float(x) for x in re.search(pattern, sample, re.M).groups()]

    ratio, low, high = number(r"^R +([\d.]+) .*\(([\d.]+)-([\d.]+)\)$")
    step, step_low, step_high = number(r"^downstream +([\d.]+) ms .*; ([\d.]+)-([\d.]+) ms\)$")
    (stall,) = number(r"^stall +([\d.]+)%")
    (read,), (augment,) = number(r"^read +([\d.]+) ms"), number(r"^augment +([\d.]+) ms")
    (passes,) = number(r"^passes +(\d+)")
    costs = Costs(step_s=step / 1e3, read_s=read / 1e3, augment_s=augment / 1e3)
    advice = sample.split("\n\n", 1)[1].strip()
    assert advice == recommend(ratio, stall / 100, spread=(low, high), passes=int(passes),
                               costs=costs, steps=(step_low / 1e3, step_high / 1e3))


def fake_cli(monkeypatch, result):
    seen = []

    def fake(loader, step, **kwargs):
        seen.append((loader, step))
        return result

    monkeypatch.setattr(profiler_cli, "profile", fake)
    return seen


def test_cli_takes_the_two_costs_in_place_of_the_upstream(monkeypatch, capsys):
    seen = fake_cli(monkeypatch, Profile(0.042, 0.010, 0.8, 3))
    assert main(["--read-ms", "30", "--augment-ms", "12", "--step-ms", "10", "--json"]) == 0
    loader, step = seen[0]
    assert loader.seconds == pytest.approx(0.042) and step == pytest.approx(0.010)
    out = json.loads(capsys.readouterr().out)
    assert (out["read_s"], out["augment_s"]) == (pytest.approx(0.030), pytest.approx(0.012))
    assert out["prediction"] == {"variant": "after_augmentation", "factor": 4.0,
                                 "speedup": pytest.approx(4.0), "augment_bound": True}
    assert (out["decided"], out["factor"], out["variant"]) == (True, 4.0, "after_augmentation")


def test_cli_two_costs_override_a_named_loader_s_and_print_the_prediction(
        monkeypatch, capsys, tmp_path):
    (tmp_path / "plainloader.py").write_text("def make_loader():\n    return range(100)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = fake_cli(monkeypatch, Profile(0.045, 0.010, 0.7, 3, read_s=0.001, augment_s=0.0))
    assert main(["--module", "plainloader:make_loader", "--read-ms", "40", "--augment-ms", "5",
                 "--step-ms", "10", "--max-factor", "4"]) == 0
    assert seen[0][0] == range(100)
    out = capsys.readouterr().out
    assert "read           40.00 ms per batch" in out and "augment         5.00 ms" in out
    # Before augmentation e = 4 would leave 40 / 4 + 5 = 15 ms a batch: 3x; after it, 4x.
    assert "Prediction: 4.00x steps/s at e = 4 after augmentation" in out


def test_cli_json_prediction_is_null_where_undecided_or_unknown(monkeypatch, capsys):
    noisy = Profile.of([Pass(0.005, 0.01, 0.7), Pass(0.040, 0.01, 0.7),
                        Pass(0.020, 0.01, 0.7)], 50)
    fake_cli(monkeypatch, noisy)
    for args in (["--read-ms", "40", "--augment-ms", "5"], ["--synthetic-upstream-ms", "20"]):
        assert main([*args, "--step-ms", "10", "--json"]) == 0
        out = json.loads(capsys.readouterr().out)
        assert (out["prediction"], out["decided"], out["factor"]) == (None, False, None)
    assert (out["read_s"], out["augment_s"]) == (None, None)


@pytest.mark.parametrize(("args", "message"), [
    (["--read-ms", "30"], "argument --read-ms: needs --augment-ms too (the loader's two sides "
                          "per batch come together); pass both, e.g. --read-ms 30 "
                          "--augment-ms 5, or neither"),
    (["--augment-ms", "5"], "argument --augment-ms: needs --read-ms too"),
    (["--read-ms", "-1", "--augment-ms", "5"],
     "argument --read-ms: must be a finite duration in milliseconds >= 0, got -1; pass the "
     "measured duration, e.g. --read-ms 30"),
    (["--read-ms", "30", "--augment-ms", "inf"], "argument --augment-ms: must be a finite "
                                                 "duration in milliseconds >= 0, got inf"),
    (["--read-ms", "30", "--augment-ms", "5", "--synthetic-upstream-ms", "40"],
     "argument --read-ms: not allowed with --synthetic-upstream-ms (the stand-in loader then "
     "takes --read-ms + --augment-ms per batch); drop --synthetic-upstream-ms"),
    ([], "one of the arguments --synthetic-upstream-ms --module is required, or the loader's "
         "two sides --read-ms MS --augment-ms MS"),
])
def test_cli_refuses_half_or_bad_costs_as_usage_errors_naming_the_flag(args, message, capsys):
    with pytest.raises(SystemExit) as exit:
        main([*args, "--step-ms", "10"])
    assert exit.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: dataecho profile") and message in err


@pytest.mark.torch
def test_profile_reads_the_sides_of_a_real_echo_dataset_at_any_factor():
    pytest.importorskip("torch")
    from torch.utils.data import DataLoader

    from dataecho.torch import EchoDataset

    # At factor 2 the sides are still per fresh read and per augmentation call.
    data = EchoDataset(list(range(400)), augment=abs, factor=2, seed=0)
    loader = DataLoader(data, batch_size=4, num_workers=0)
    p = profile(loader, step=0.0, batches=5, warmup=1, steps=2, sync=None)
    sides = data.sides()
    assert sides.reads > 0 and sides.augments > 0  # timed while profiling
    assert p.read_s == pytest.approx(sides.read_s * 4)
    assert p.augment_s == pytest.approx(sides.augment_s * 4)
