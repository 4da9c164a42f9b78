"""`dataecho`: every --help on numpy alone, a missing extra named in one line, --version."""

import subprocess
import sys

import pytest

import dataecho
from dataecho.cli import COMMANDS, main
from helpers.absent import run_without

EXTRAS = ["torch", "PIL", "matplotlib", "sklearn", "torchdata"]


CLI = "from dataecho.cli import main\nraise SystemExit(main(sys.argv[1:]))"


def dataecho_without(blocked, *args, cwd=None):
    """Runs `dataecho ARGS` where the modules named in ``blocked`` cannot be imported."""
    return run_without(blocked, CLI, *args, cwd=cwd)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_subcommand_s_help_works_without_torch_pillow_or_matplotlib(command):
    done = dataecho_without(EXTRAS, command, "--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"usage: dataecho {command}") and not done.stderr


@pytest.mark.parametrize("argv, missing", [
    (["demo", "--quick"], "torch and Pillow, which are"),
    (["demo", "--device", "cuda"], "torch, which is"),
    (["reproduce", "--budget", "smoke"], "torch, which is"),
])
def test_a_command_without_its_extra_exits_1_with_one_line_naming_it(argv, missing, tmp_path):
    done = dataecho_without(EXTRAS, *argv, "--out", str(tmp_path))
    assert done.returncode == 1
    assert done.stderr == (f"dataecho {argv[0]} needs {missing} not installed; "
                           "pip install 'dataecho[demo]'\n")
    assert list(tmp_path.iterdir()) == []  # nothing written, nothing trained


@pytest.mark.torch
def test_the_demo_with_torch_alone_names_pillow():
    pytest.importorskip("torch")  # without it, the line names torch too (the test above)
    done = dataecho_without(["PIL"], "demo", "--quick")
    assert (done.returncode, done.stderr) == (
        1, "dataecho demo needs Pillow, which is not installed; pip install 'dataecho[demo]'\n")


def test_report_reads_its_store_without_torch(tmp_path):
    pytest.importorskip("matplotlib")
    store = tmp_path / "results.jsonl"
    store.write_text("")
    done = dataecho_without(["torch", "sklearn"], "report", "--store", str(store),
                            "--wallclock", "none")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "README.md").is_file()


def test_report_without_matplotlib_names_the_extra(tmp_path):
    store = tmp_path / "results.jsonl"
    store.write_text("")
    done = dataecho_without(["matplotlib"], "report", "--store", str(store))
    assert (done.returncode, done.stderr) == (
        1, "dataecho report needs matplotlib, which is not installed; "
           "pip install 'dataecho[demo]'\n")


@pytest.mark.parametrize("argv", [[], ["--wallclock", "auto"]])
def test_report_outside_a_clone_requires_wallclock_and_says_why(argv, tmp_path):
    # An installed dataecho ships no benchmarks/: the default summary is a clone's file.
    store = tmp_path / "results.jsonl"
    store.write_text("")
    done = dataecho_without([], "report", "--store", str(store), *argv, cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr == (
        "dataecho report: --wallclock is required here: its default, "
        "benchmarks/results/wallclock-full.json, is the summary that benchmarks/wallclock.py "
        f"writes in a clone of the repository, and {tmp_path} has none (an installed "
        "dataecho ships no benchmarks/); pass --wallclock PATH to a wallclock-<tag>.json "
        "summary, or --wallclock none to leave finding 2's wall-clock evidence out of the "
        "report\n")
    assert list(tmp_path.iterdir()) == [store]  # no report written without the evidence


@pytest.mark.parametrize("argv, message", [
    (["--factor", "0"], "argument --factor: must be >= 1 (each item is used at least once; "
                        "1 disables echoing), got 0.0; pass --factor=1 for no echoing or a "
                        "larger value to echo"),
    (["--factor", "nan"], "argument --factor: must be finite and >= 1, got nan; pass a number "
                          "such as --factor=2.0"),
    (["--factor", "two"], "argument --factor: invalid float value: 'two'"),
    (["--examples", "0"], "argument --examples: must be an int >= 1, got 0; pass "
                          "--examples=1 or more"),
    (["--examples", "2.5"], "argument --examples: invalid int value: '2.5'"),
    (["--batch-size", "-4"], "argument --batch-size: must be an int >= 1, got -4; pass "
                             "--batch-size=1 or more"),
    (["--seed", "-1"], "argument --seed: must be an int in [0, 2**63), got -1; pass e.g. "
                       "--seed=0"),
])
def test_a_bad_tour_flag_is_a_usage_error_naming_it_before_any_of_the_tour(argv, message,
                                                                            capsys):
    with pytest.raises(SystemExit) as exit:
        main(["tour", *argv])
    out, err = capsys.readouterr()
    assert (exit.value.code, out) == (2, "")
    assert err.startswith("usage: dataecho tour")
    assert err.splitlines()[-1] == f"dataecho tour: error: {message}"


def test_the_tour_takes_a_fractional_factor_and_prints_it(capsys):
    assert main(["tour", "--factor", "1.5", "--examples", "8"]) == 0
    assert capsys.readouterr().out.startswith(
        "dataecho tour: 8 examples, factor 1.5, batch size 4\n")


def test_a_dependency_that_is_installed_but_broken_keeps_its_traceback(monkeypatch):
    # Only an absent module becomes the one-line message; any other import failure is a
    # bug to see in full.
    def broken(argv):
        raise ModuleNotFoundError("No module named 'dataecho.nowhere'", name="dataecho.nowhere")

    monkeypatch.setattr("dataecho.cli._load", lambda target: broken)
    with pytest.raises(ModuleNotFoundError, match=r"dataecho\.nowhere"):
        main(["demo"])


def test_version_prints_the_package_version(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"dataecho {dataecho.__version__}\n"
    done = subprocess.run([sys.executable, "-m", "dataecho", "--version"],
                          capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout) == (0, f"dataecho {dataecho.__version__}\n")


def test_the_reproduce_flags_offer_the_protocol_s_budgets():
    pytest.importorskip("torch")
    from dataecho.experiments.cli import BUDGETS
    from dataecho.experiments.protocol import BUDGETS as PROTOCOL

    assert BUDGETS == PROTOCOL
