"""`dataecho demo`: end to end in seconds, and results that never overstate a speedup."""

import dataclasses
import json
import math
import re
import time

import pytest

pytest.importorskip("torch")

from dataecho.demo import main
from dataecho.demo.config import parse_args
from dataecho.demo.report import summarize, table
from dataecho.demo.train import RunResult

pytestmark = pytest.mark.torch


def test_smoke_demo_writes_its_table_plot_and_json_within_its_budget(tmp_path, capsys):
    began = time.perf_counter()
    assert main(["--smoke", "--out", str(tmp_path)]) == 0
    # Each smoke run trains for 8 s of budget; the bound only catches a run that ignores
    # its budget, with room for a loaded CI machine (pytest's own timeout is 300 s).
    assert time.perf_counter() - began < 240
    printed = capsys.readouterr().out
    assert "127.0.0.1" in printed
    assert "pinned to 1 thread" in printed or "CUDA" in printed
    assert "time to target" in (tmp_path / "table.txt").read_text()
    assert (tmp_path / "accuracy.png").read_bytes()[:4] == b"\x89PNG"
    result = json.loads((tmp_path / "results.json").read_text())
    assert [row["run"] for row in result["rows"]][:2] == ["baseline", "echo e=2"]
    assert result["config"]["preset"] == "smoke"
    assert result["runs"][1]["pipeline"].startswith(
        "DataLoader(EchoDataset(Map(TarShards(") and "factor=2.0" in result["runs"][1]["pipeline"]
    assert result["rss"]["main_mb"] < 2048 and result["versions"]["torch"]
    echo = result["runs"][1]
    assert echo["fresh"] < echo["emitted"] and echo["points"]


def test_presets_and_flags_resolve_into_the_config():
    cfg = parse_args(["--quick", "--ratio", "4", "--out", "x"])
    assert (cfg.preset, cfg.ratio, cfg.fixed_factor, cfg.out) == ("quick", 4.0, 4.0, "x")
    assert parse_args([]).out.startswith("runs/demo-")
    assert parse_args([]).budget_s is None  # resolved from the calibrated R at start-up
    assert parse_args(["--budget", "30"]).budget_s == 30.0
    assert parse_args(["--factor", "2.5"]).fixed_factor == 2.5


@pytest.mark.parametrize("argv", [["--ratio", "0.5"], ["--target", "90"], ["--budget", "0"],
                                  ["--quick", "--smoke"]])
def test_bad_flags_are_refused(argv):
    with pytest.raises(SystemExit):
        parse_args(argv)


@pytest.mark.parametrize("argv, message", [
    (["--ratio", "inf"], r"--ratio must be a finite number >= 1 .* got inf; pass e\.g\. --ratio 5"),
    (["--ratio", "nan"], r"--ratio must be a finite number >= 1 .* got nan; pass"),
    (["--factor", "inf"], r"--factor must be a finite number >= 1 .* got inf; pass e\.g\. "
                          r"--factor 4, or leave it out"),
    (["--factor", "nan"], r"--factor must be a finite number >= 1 .* got nan; pass"),
    (["--budget", "inf"], r"--budget must be a finite number of seconds > 0, got inf; pass"),
    (["--seed", "-1"], r"--seed must be an int in \[0, 2\*\*63\), got -1; pass e\.g\. --seed 0"),
])
def test_a_bad_flag_exits_with_status_2_naming_it_before_any_data_is_prepared(
        argv, message, tmp_path, monkeypatch, capsys):
    from dataecho.demo import command

    def prepare(*args, **kwargs):
        pytest.fail("the data was prepared before the flags were checked")

    monkeypatch.setattr(command, "prepare", prepare)
    with pytest.raises(SystemExit) as exit:
        main([*argv, "--out", str(tmp_path)])
    assert exit.value.code == 2
    err = capsys.readouterr().err
    assert re.search(message, err) and "Traceback" not in err


def test_device_cuda_without_a_gpu_exits_with_status_2_and_the_fix(tmp_path, monkeypatch,
                                                                    capsys):
    import torch

    from dataecho.demo import command

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(command, "prepare", lambda *a, **k: pytest.fail("data prepared"))
    with pytest.raises(SystemExit) as exit:
        main(["--device", "cuda", "--out", str(tmp_path)])
    assert exit.value.code == 2
    err = capsys.readouterr().err
    assert "--device cuda needs a CUDA GPU, but torch.cuda.is_available() is False" in err
    assert "pass --device cpu, or --device auto" in err and "Traceback" not in err


def test_run_checks_its_config_before_preparing_any_data(tmp_path, monkeypatch):
    from dataecho.demo import command
    from dataecho.demo.config import DemoConfig

    monkeypatch.setattr(command, "prepare", lambda *a, **k: pytest.fail("data prepared"))
    with pytest.raises(ValueError, match=r"--ratio must be a finite number >= 1 .* got inf"):
        command.run(DemoConfig(ratio=math.inf, out=str(tmp_path)))


def test_the_default_fixed_factor_is_r_rounded_half_up_and_at_least_2(capsys):
    # e = 1 would be no echoing; halves go up (Python's round would give 2.5 -> 2).
    factors = [parse_args(["--ratio", r, "--out", "x"]).fixed_factor
               for r in ("1", "1.4", "2.5", "3.5", "4.5", "4.76", "5")]
    assert factors == [2.0, 2.0, 3.0, 4.0, 5.0, 5.0, 5.0]
    with pytest.raises(SystemExit):
        parse_args(["--help"])
    assert "R rounded half up, at least 2" in " ".join(capsys.readouterr().out.split())


def test_a_non_finite_stream_factor_is_refused_with_the_remedy():
    from dataecho.demo.loader import make_loader

    for bad in (math.inf, math.nan, 0.5):
        with pytest.raises(ValueError, match=r"factor must be a finite number >= 1 \(1 is no "
                                             r"echoing\) or 'auto', got .*; pass e\.g\. "
                                             r"factor=2\.0"):
            make_loader("http://127.0.0.1:1", factor=bad)  # refused before any fetch


def run(name, factor, reached, seconds, fresh):
    r = RunResult(name, factor, "", reached=reached, steps=100, fresh=fresh, emitted=400,
                  train_s=seconds, wait_s=seconds / 2, final_accuracy=0.8)
    if reached:
        r.time_to_target, r.fresh_to_target, r.steps_to_target = seconds, fresh, 100
    return r


def test_a_run_that_missed_the_target_gets_no_speedup():
    rows = summarize([run("baseline", 1.0, True, 40.0, 400), run("echo", 4.0, False, 60.0, 100)],
                     ratio=4.0)
    assert rows[1]["speedup"] is None and rows[1]["fresh_ratio"] is None
    text = table(rows, 0.9)
    assert "MISSED" in text and "did not reach 90%" in text


def test_no_speedup_is_reported_when_the_baseline_missed():
    rows = summarize([run("baseline", 1.0, False, 40.0, 400), run("echo", 4.0, True, 10.0, 100)],
                     ratio=4.0)
    assert rows[1]["speedup"] is None


def test_speedup_and_ideal_speedup_when_both_reached():  # min(R, e) stays in the JSON
    rows = summarize([run("baseline", 1.0, True, 40.0, 400), run("echo", 5.0, True, 10.0, 100)],
                     ratio=4.0)
    assert rows[1]["speedup"] == 4.0 and rows[1]["ideal_speedup"] == 4.0
    assert rows[1]["fresh_ratio"] == 0.25


def test_the_table_shows_the_models_prediction_and_the_share_of_it_each_run_reached():
    # The baseline's step is 0.1 s of work, its read 0.3 s and augmentation 0.05 s a
    # batch: 0.35 s a step. At e = 4 before augmentation the model says max(0.1, 0.3 / 4 +
    # 0.05) = 0.125 s a step, 2.8x the steps per second; the run needed 120 steps to the
    # baseline's 100: 2.33x.
    base, echo = run("baseline", 1.0, True, 35.0, 400), run("echo e=4", 4.0, True, 18.0, 100)
    base.wait_s, echo.steps, echo.steps_to_target, echo.wait_s = 25.0, 120, 120, 6.0
    base.read_s, base.augment_s = 0.3, 0.05  # what the profiler measures, at factor 1
    rows = summarize([base, echo], ratio=3.5)
    assert rows[1]["predicted_speedup"] == pytest.approx(0.35 / 0.125 * 100 / 120)
    assert rows[1]["efficiency"] == pytest.approx((35.0 / 18.0) / rows[1]["predicted_speedup"])
    text = table(rows, 0.83)
    assert "predicted" in text.splitlines()[0] and "efficiency" in text.splitlines()[0]
    assert "2.33x" in text and "83%" in text and "predicted: the model (dataecho.profiler" in text
    missing = summarize([run("baseline", 1.0, True, 40.0, 400), run("e", 2.0, True, 20.0, 200)],
                        ratio=2.0)
    assert missing[1]["predicted_speedup"] is None and "n/a" in table(missing, 0.8)


@pytest.fixture
def no_training(monkeypatch, tmp_path):
    """``command.run`` on the smoke shards with the step timing and the runs faked: each
    run returns the next of ``outcomes`` (a RunResult, or an exception to raise)."""
    from dataecho.demo import command

    outcomes = []

    def one_run(cfg, url, name, factor, device, evaluate):
        outcome = outcomes.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        return dataclasses.replace(outcome, name=name, factor=factor)

    monkeypatch.setattr(command, "measure_t_down", lambda *args, **kwargs: 0.01)
    monkeypatch.setattr(command, "one_run", one_run)
    cfg = dataclasses.replace(parse_args(["--smoke", "--out", str(tmp_path)]), budget_s=1.0)
    return command, cfg, outcomes, tmp_path


def test_the_table_and_json_are_written_as_each_run_ends(no_training, capsys):
    command, cfg, outcomes, out = no_training
    outcomes += [run("baseline", 1.0, True, 40.0, 400), KeyboardInterrupt()]
    with pytest.raises(KeyboardInterrupt):
        command.run(cfg)  # interrupted in the second run: the first one's numbers stay
    saved = json.loads((out / "results.json").read_text())
    assert [row["run"] for row in saved["rows"]] == ["baseline"] and not saved["complete"]
    assert saved["config"]["preset"] == "smoke" and saved["calibration"]["t_down_s"] == 0.01
    assert "(1 of 3 runs so far)" in (out / "table.txt").read_text()
    assert not (out / "accuracy.png").exists()


def test_a_failed_plot_costs_only_the_figure(no_training, monkeypatch, capsys):
    command, cfg, outcomes, out = no_training

    def plot(*args):
        raise RuntimeError("no display")

    monkeypatch.setattr(command, "plot", plot)
    outcomes += [run("baseline", 1.0, True, 40.0, 400), run("echo", 2.0, True, 20.0, 200),
                 run("adaptive", "auto", True, 25.0, 250)]
    assert command.run(cfg) == 0
    printed = capsys.readouterr().out
    assert "no accuracy.png: plotting failed (RuntimeError: no display)" in printed
    assert "files in" in printed and printed.rstrip().endswith("table.txt, results.json")
    saved = json.loads((out / "results.json").read_text())
    assert saved["complete"] and len(saved["rows"]) == 3
    assert "(1 of 3" not in (out / "table.txt").read_text()


def test_without_matplotlib_the_demo_says_so_first_and_still_writes_its_numbers(
        no_training, monkeypatch, capsys):
    command, cfg, outcomes, out = no_training
    monkeypatch.setattr(command, "missing",
                        lambda *names: [n for n in names if n == "matplotlib"])
    monkeypatch.setattr(command, "plot", lambda *args: pytest.fail("plotted"))
    outcomes += [run("baseline", 1.0, True, 40.0, 400), run("echo", 2.0, True, 20.0, 200),
                 run("adaptive", "auto", True, 25.0, 250)]
    assert command.run(cfg) == 0
    printed = capsys.readouterr().out
    head = printed.split("shards:")[0]  # said before any data is written or run trained
    assert "no accuracy.png, as matplotlib is not installed (pip install 'dataecho[demo]'" in head
    assert (out / "table.txt").is_file() and json.loads((out / "results.json").read_text())


def test_the_demo_says_where_its_shards_are_and_how_large(tmp_path, monkeypatch):
    from dataecho.demo.data import prepare

    monkeypatch.setenv("DATAECHO_CACHE", str(tmp_path))
    lines = []
    prepare(1000, 100, 200, log=lines.append)
    folder = tmp_path / "demo-shards" / "fashion_mnist-1000-200"
    assert lines[0] == (f"  shards: writing 1,000 examples as PNG tar shards to {folder} "
                        "(once: later runs reuse them)")
    assert lines[1].startswith("  shards: 200 of 1,000 examples written (")
    assert re.fullmatch(rf"  shards: \d+ MB, 1,000 examples written to {re.escape(str(folder))} "
                        r"\(DATAECHO_CACHE=DIR moves the cache\)", lines[-1])
    lines.clear()
    prepare(1000, 100, 200, log=lines.append)  # the second time: found, not written
    assert len(lines) == 1 and "examples cached in" in lines[0]


@pytest.fixture
def elsewhere(tmp_path, monkeypatch):
    """A copy of the real Fashion-MNIST files in a folder of the user's, with Debian's
    folder made to look empty, so only ``--data`` can find the data; the training runs
    are faked (as in ``no_training``)."""
    import shutil

    from dataecho.datasets import fashion_mnist
    from dataecho.demo import command

    copy = tmp_path / "my data"  # a space, as in a user's Downloads folder name
    copy.mkdir()
    for name in fashion_mnist.FILES:
        shutil.copy(fashion_mnist.DEFAULT_ROOT / name, copy / name)
    monkeypatch.setattr(fashion_mnist, "DEFAULT_ROOT", tmp_path / "not installed")
    monkeypatch.setenv("DATAECHO_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(command, "measure_t_down", lambda *args, **kwargs: 0.01)
    monkeypatch.setattr(command, "one_run", lambda cfg, url, name, factor, device, evaluate:
                        dataclasses.replace(run("baseline", 1.0, True, 40.0, 400), name=name,
                                            factor=factor))
    return copy, tmp_path / "out"


def test_data_flag_reads_fashion_mnist_from_a_folder_of_the_user_s(elsewhere, capsys):
    copy, out = elsewhere
    assert main(["--smoke", "--no-adaptive", "--data", str(copy), "--out", str(out)]) == 0
    saved = json.loads((out / "results.json").read_text())
    assert saved["config"]["data"] == str(copy) and saved["complete"]
    assert "2,000 examples written to" in capsys.readouterr().out


def test_without_data_flag_missing_fashion_mnist_names_the_flag_and_exits_1(elsewhere, capsys):
    assert main(["--smoke", "--out", str(elsewhere[1])]) == 1
    err = capsys.readouterr().err
    assert "Fashion-MNIST is not installed: " in err and "not installed lacks " in err
    assert "apt-get install dataset-fashion-mnist" in err and "pass --data DIR" in err


def test_a_data_folder_without_the_files_is_a_usage_error_naming_the_flag(tmp_path, capsys):
    (tmp_path / "train-images-idx3-ubyte.gz").write_bytes(b"")
    with pytest.raises(SystemExit) as exit:
        main(["--smoke", "--data", str(tmp_path), "--out", str(tmp_path / "out")])
    assert exit.value.code == 2
    err = capsys.readouterr().err
    assert re.search(r"--data must be a folder holding the four Fashion-MNIST files, but "
                     rf"{re.escape(str(tmp_path))} lacks train-labels-idx1-ubyte\.gz, "
                     r"t10k-images-idx3-ubyte\.gz, t10k-labels-idx1-ubyte\.gz; pass the "
                     r"folder", err) and "Traceback" not in err


# The only missed run of the committed full grid: its curve peaked, then fell back.
MISSED_CURVE = [0.5, 0.8795, 0.877, 0.872, 0.874, 0.8745, 0.8725]


def test_a_run_records_its_best_accuracy_not_only_its_last():
    import torch

    from dataecho.demo.train import train_run

    batches = iter(lambda: (None, None, torch.arange(4)), None)  # endless
    curve = iter(MISSED_CURVE)

    class Slow:  # 5 ms a step: a 50 ms budget sees at least 10 steps, each evaluated
        average = None

        def __call__(self, batch):
            time.sleep(0.005)
            return 0.0

    result = train_run(RunResult("echo", 4.0, ""), batches, Slow(),
                       lambda model: next(curve, MISSED_CURVE[-1]), target=0.88,
                       budget_s=0.05, eval_every=1, log=lambda line: None)
    assert not result.reached and len(result.points) >= len(MISSED_CURVE)
    assert result.final_accuracy == 0.8725  # the last evaluation
    assert result.best_accuracy == 0.8795 == max(p["accuracy"] for p in result.points)
    assert result.as_dict()["best_accuracy"] == 0.8795  # what the grid's store records


def test_a_missed_run_shows_its_best_accuracy_with_two_decimals(monkeypatch, capsys):
    from dataecho.demo import command

    missed = dataclasses.replace(run("echo", 4.0, False, 60.0, 100), final_accuracy=0.8725,
                                 best_accuracy=0.8795)
    rows = summarize([run("baseline", 1.0, True, 40.0, 400), missed], ratio=4.0)
    assert rows[1]["best_accuracy"] == 0.8795
    text = table(rows, 0.88)
    assert "MISSED: best 87.95%" in text and "87.2" not in text and "88.0%" not in text
    # The line printed when the run ends says the same.
    from dataecho.demo.loader import Arm

    monkeypatch.setattr(command, "make_loader",  # no server
                        lambda *args, **kwargs: Arm([], 0, "fake pipeline"))
    monkeypatch.setattr(command, "Step", lambda *args, **kwargs: None)  # no model either
    monkeypatch.setattr(command, "train_run", lambda *args, **kwargs: missed)
    cfg = dataclasses.replace(parse_args(["--quick"]), target=0.88, budget_s=60.0)
    command.one_run(cfg, "http://unused", "echo", 4.0, command.torch.device("cpu"),
                    lambda model: 0.0)
    assert "MISSED 88% within 60 s (best 87.95%)" in capsys.readouterr().out


def test_step_is_timed_on_streamed_batches_without_the_wait():
    import torch

    from dataecho.demo.calibrate import time_step_streaming
    from dataecho.demo.model import small_cnn
    from dataecho.demo.train import Step

    batches = [(torch.zeros(8, 28, 28, dtype=torch.uint8), torch.zeros(8, dtype=torch.long),
                torch.arange(8))] * 6
    step = Step(small_cnn(), 1e-3, torch.device("cpu"))
    assert 0 < time_step_streaming(step, batches, steps=2) < 5


def test_the_adaptive_run_is_skipped_with_a_message_when_it_is_not_installed(monkeypatch, capsys):
    import importlib.util

    from dataecho.demo import command

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    names = [name for name, _ in command.runs_of(parse_args(["--out", "x"]))]
    assert names == ["baseline", "echo e=5"]
    assert "adaptive run skipped" in capsys.readouterr().out


def test_the_variant_flag_resolves_into_the_config_and_is_checked():
    assert parse_args(["--variant", "batch"]).variant == "batch"
    assert parse_args([]).variant == "before_augmentation"
    with pytest.raises(SystemExit):
        parse_args(["--variant", "sideways"])


def test_an_unknown_variant_is_refused_with_the_remedy():
    from dataecho.demo.loader import make_loader

    with pytest.raises(ValueError, match=r"variant must be one of .* got 'sideways'; pass"):
        make_loader("http://127.0.0.1:1", variant="sideways")


@pytest.fixture(scope="module")
def smoke():
    """The smoke preset's shards on an unthrottled server, the device and the evaluator."""
    from dataecho.demo.data import prepare
    from dataecho.demo.model import pick_device
    from dataecho.demo.remote import ShardServer
    from dataecho.demo.train import Evaluator

    # A generous budget: the runs stop at the target (about 2 s), so it costs nothing
    # unless the machine is loaded, and then it keeps the test from failing.
    cfg = dataclasses.replace(parse_args(["--smoke", "--out", "unused"]), budget_s=30.0)
    data = prepare(cfg.train_size, cfg.eval_size, cfg.shard_size)
    device, _ = pick_device(cfg.device, cfg.threads)
    with ShardServer(data.shard_dir, latency=cfg.latency) as server:
        yield cfg, server.url, device, Evaluator(data.eval_images, data.eval_labels, device)


HEADS = {"after_augmentation": "DataLoader(EchoDataset(Map(TarShards(",
         "batch": "EchoBatches(DataLoader(EchoDataset(Map(TarShards("}


@pytest.mark.parametrize("variant", list(HEADS))
def test_each_echo_variant_reaches_the_smoke_target_counting_what_it_trained_on(smoke, variant):
    # before_augmentation runs in test_smoke_demo_writes_its_table_plot_and_json...
    from dataecho.demo.command import one_run

    cfg, url, device, evaluate = smoke
    cfg = dataclasses.replace(cfg, variant=variant)
    fixed = one_run(cfg, url, "echo e=2", 2.0, device, evaluate)
    auto = one_run(cfg, url, "adaptive", "auto", device, evaluate)
    assert fixed.pipeline.startswith(HEADS[variant])
    if variant == "batch":  # the workers' EchoDataset is the baseline's; EchoBatches echoes
        assert "factor=1.0" in fixed.pipeline and fixed.pipeline.endswith(
            "factor=2.0, seed=0, clone=False)") and "factor=Auto(" in auto.pipeline
    for run in (fixed, auto):
        assert run.reached and run.variant == variant
        assert run.emitted == run.steps * cfg.batch_size  # every batch is full
        assert 0 < run.fresh <= run.emitted
    assert fixed.fresh < fixed.emitted
    if variant == "batch":
        # Whole batches repeat: the trainer's uid count is the echo stage's own count,
        # and a fixed factor of 2 leaves at most the last batch's second copy untrained.
        assert fixed.echo_counts == (fixed.fresh, fixed.emitted)
        assert auto.echo_counts == (auto.fresh, auto.emitted)
        assert 2 * fixed.fresh - fixed.emitted in (0, cfg.batch_size)
    else:
        assert fixed.echo_counts is None and "echo='after_augmentation', factor=2.0" in (
            fixed.pipeline)
        assert auto.pipeline.startswith(HEADS[variant]) and "factor=Auto(" in auto.pipeline


def test_batch_echoing_counts_fresh_and_emitted_examples_exactly():
    import torch

    from dataecho.demo.train import train_run
    from dataecho.torch import EchoBatches

    batches = [(torch.zeros(4, 28, 28, dtype=torch.uint8), torch.zeros(4, dtype=torch.long),
                torch.arange(4 * k, 4 * k + 4)) for k in range(10)]
    trained = []

    class Recorder:  # the training step: remembers the uids of every batch it got
        average = None

        def __call__(self, batch):
            trained.append(batch[2].tolist())
            return 0.0

    loader = EchoBatches(batches, 1.5, seed=0)  # batches 0, 0, 1, 2, 2, 3, 3, ...
    result = train_run(RunResult("echo", 1.5, "", "batch"), loader, Recorder(),
                       lambda model: 0.9, target=0.5, budget_s=60.0, eval_every=7,
                       log=lambda line: None)
    assert result.steps == len(trained) == 7
    assert result.fresh == len({uid for uids in trained for uid in uids}) == 16
    assert result.emitted == 28
    assert result.echo_counts == (result.fresh, result.emitted)


def test_the_trainer_reads_epoch_after_epoch_and_counts_each_epoch_s_images_as_fresh():
    import torch

    from dataecho.demo.train import train_run

    # Two batches an epoch, indices 0-7: the same image in another epoch is a new fresh
    # example (uid = epoch * num_samples + index), as in the paper's count.
    epoch = [(torch.zeros(4, 28, 28, dtype=torch.uint8), torch.zeros(4, dtype=torch.long),
              torch.arange(4 * k, 4 * k + 4)) for k in range(2)]

    class Recorder:
        average = None

        def __call__(self, batch):
            return 0.0

    result = train_run(RunResult("baseline", 1.0, ""), epoch, Recorder(), lambda model: 0.9,
                       target=0.5, budget_s=60.0, eval_every=5, num_samples=8,
                       log=lambda line: None)
    assert (result.steps, result.epochs) == (5, 3)
    assert result.emitted == 20 and result.fresh == 20
