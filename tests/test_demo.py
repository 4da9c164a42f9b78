"""`dataecho demo`: end to end in seconds, and results that never overstate a speedup."""

import dataclasses
import json
import time

import pytest

pytest.importorskip("torch")

from dataecho.demo import main
from dataecho.demo.config import parse_args
from dataecho.demo.report import summarize, table
from dataecho.demo.train import RunResult

pytestmark = pytest.mark.torch


def test_smoke_demo_writes_its_table_plot_and_json_in_under_a_minute(tmp_path, capsys):
    began = time.perf_counter()
    assert main(["--smoke", "--out", str(tmp_path)]) == 0
    assert time.perf_counter() - began < 60
    printed = capsys.readouterr().out
    assert "127.0.0.1" in printed
    assert "pinned to 1 thread" in printed or "CUDA" in printed
    assert "time to target" in (tmp_path / "table.txt").read_text()
    assert (tmp_path / "accuracy.png").read_bytes()[:4] == b"\x89PNG"
    result = json.loads((tmp_path / "results.json").read_text())
    assert [row["run"] for row in result["rows"]][:2] == ["baseline", "echo e=2"]
    assert result["config"]["preset"] == "smoke" and "Echo(ShardStream" in result["runs"][1][
        "pipeline"]
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


def test_speedup_and_bound_when_both_reached():
    rows = summarize([run("baseline", 1.0, True, 40.0, 400), run("echo", 5.0, True, 10.0, 100)],
                     ratio=4.0)
    assert rows[1]["speedup"] == 4.0 and rows[1]["bound"] == 4.0 and rows[1]["fresh_ratio"] == 0.25


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
    from dataecho.demo.loader import StreamDataset

    with pytest.raises(ValueError, match=r"variant must be one of .* got 'sideways'; pass"):
        StreamDataset("http://127.0.0.1:1", variant="sideways")


@pytest.fixture(scope="module")
def smoke():
    """The smoke preset's shards on an unthrottled server, the device and the evaluator."""
    from dataecho.demo.data import prepare
    from dataecho.demo.model import pick_device
    from dataecho.demo.train import Evaluator
    from dataecho.remote import ShardServer

    # A generous budget: the runs stop at the target (about 2 s), so it costs nothing
    # unless the machine is loaded, and then it keeps the test from failing.
    cfg = dataclasses.replace(parse_args(["--smoke", "--out", "unused"]), budget_s=30.0)
    data = prepare(cfg.train_size, cfg.eval_size, cfg.shard_size)
    device, _ = pick_device(cfg.device, cfg.threads)
    with ShardServer(data.shard_dir, latency=cfg.latency) as server:
        yield cfg, server.url, device, Evaluator(data.eval_images, data.eval_labels, device)


HEADS = {"after_augmentation": "DataLoader(Shuffle(Echo(Map(ShardStream",
         "batch": "EchoBatches(DataLoader(Shuffle(Map(ShardStream"}


@pytest.mark.parametrize("variant", list(HEADS))
def test_each_echo_variant_reaches_the_smoke_target_counting_what_it_trained_on(smoke, variant):
    # before_augmentation runs in test_smoke_demo_writes_its_table_plot_and_json...
    from dataecho.demo.command import one_run

    cfg, url, device, evaluate = smoke
    cfg = dataclasses.replace(cfg, variant=variant)
    fixed = one_run(cfg, url, "echo e=2", 2.0, device, evaluate)
    auto = one_run(cfg, url, "adaptive", "auto", device, evaluate)
    assert fixed.pipeline.startswith(HEADS[variant])
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
        assert fixed.echo_counts is None and "AdaptiveExamples(Map(ShardStream" in auto.pipeline


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
