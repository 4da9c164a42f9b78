"""`dataecho reproduce --budget smoke` end to end, and `dataecho report`."""

import re
import time

import pytest

pytest.importorskip("torch")
pytest.importorskip("sklearn")
pytest.importorskip("matplotlib")

from dataecho.experiments.cli import report_main, reproduce_main
from dataecho.experiments.figures import FIGURES

pytestmark = pytest.mark.torch


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    out = tmp_path_factory.mktemp("smoke")
    start = time.monotonic()
    code = reproduce_main(["--budget", "smoke", "--out", str(out)])
    return out, code, time.monotonic() - start


def test_smoke_reproduce_runs_end_to_end_in_under_a_minute(smoke):
    out, code, seconds = smoke
    assert code == 0
    assert seconds < 60, f"smoke run took {seconds:.0f} s"
    assert (out / "results.jsonl").is_file()


def test_smoke_report_shows_every_figure_and_every_finding(smoke):
    out = smoke[0]
    text = (out / "README.md").read_text()
    linked = re.findall(r"!\[[^]]*\]\(([^)]+\.png)\)", text)
    assert {name for name in FIGURES} <= {p.split("_", 1)[1][:-4] for p in linked}
    for path in linked:
        assert (out / path).stat().st_size > 1000
    for number in range(1, 8):
        assert f"\n| {number} | " in text
    # Finding 5 states how much of the largest window was read ahead (10 batches of 32
    # examples at e = 2).
    assert "counted as fresh: up to 160" in text
    assert "| digits |" in text  # the speed and cost table


def test_report_command_rewrites_the_report_from_the_store(smoke, tmp_path):
    assert report_main(["--store", str(smoke[0] / "results.jsonl"), "--out", str(tmp_path)]) == 0
    assert (tmp_path / "README.md").read_text().startswith("# Data echoing")


def test_report_command_on_a_missing_store_explains_and_fails(tmp_path, capsys):
    assert report_main(["--store", str(tmp_path / "nope.jsonl")]) == 2
    assert "dataecho reproduce" in capsys.readouterr().err


def test_report_judges_finding_2_on_a_wall_clock_summary(smoke, tmp_path):
    from test_experiments_wallclock import runs, write

    path = write(tmp_path, runs([2.5, 3.0, 3.8]))
    store = str(smoke[0] / "results.jsonl")
    assert report_main(["--store", store, "--out", str(tmp_path), "--wallclock", str(path)]) == 0
    row = next(line for line in (tmp_path / "README.md").read_text().splitlines()
               if line.startswith("| 2 | "))
    assert "wall clock, R = 6" in row and row.endswith("| **held** |")
    assert report_main(["--store", store, "--out", str(tmp_path), "--wallclock", "none"]) == 0
    assert "| 2 | " in (tmp_path / "README.md").read_text()


def test_an_explicit_wall_clock_path_must_exist(smoke, tmp_path, capsys):
    store = str(smoke[0] / "results.jsonl")
    assert report_main(["--store", store, "--wallclock", str(tmp_path / "nope.json")]) == 2
    assert "--wallclock" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # before hours of training, not after
        reproduce_main(["--budget", "smoke", "--out", str(tmp_path),
                        "--wallclock", str(tmp_path / "nope.json")])


def test_the_report_lists_planned_seeds_and_conditions_not_started_yet(smoke, tmp_path):
    import json

    from dataecho.experiments.conditions import Condition

    records = [json.loads(line) for line in
               (smoke[0] / "results.jsonl").read_text().splitlines()]
    plan = next(r for r in records if r["kind"] == "plan")
    gone = plan["conditions"][-1]  # a whole condition without records yet
    plan["seeds"] = [*plan["seeds"], 99]  # and a seed no condition has started
    kept = [r for r in records if r["kind"] != "trial"
            or Condition(**r["condition"]).label() != gone]
    store = tmp_path / "partial.jsonl"
    store.write_text("".join(json.dumps(r) + "\n" for r in kept))
    assert report_main(["--store", str(store), "--out", str(tmp_path / "out")]) == 0
    text = (tmp_path / "out" / "README.md").read_text()
    assert text.count("seed 99: not started") == len(plan["conditions"]) - 1
    assert f"Planned, not started yet: {gone}." in text


def test_a_trial_stored_twice_counts_once_in_the_report(smoke, tmp_path):
    lines = (smoke[0] / "results.jsonl").read_text().splitlines(keepends=True)
    trials = sum('"kind":"trial"' in line for line in lines)
    rerun = next(line for line in lines if '"kind":"trial"' in line)
    store = tmp_path / "twice.jsonl"
    store.write_text("".join(lines) + rerun)  # a trial finished again by a second sweep
    assert report_main(["--store", str(store), "--out", str(tmp_path / "out")]) == 0
    assert f"from {trials} trial records" in (tmp_path / "out" / "README.md").read_text()


def test_an_extended_plan_supersedes_the_earlier_one_of_its_budget(smoke, tmp_path):
    import json

    lines = (smoke[0] / "results.jsonl").read_text().splitlines(keepends=True)
    plan = json.loads(next(line for line in lines if '"kind":"plan"' in line))
    assert plan["reduced"]  # the smoke plan states its reductions
    wider = {**plan, "key": "plan-wider", "reduced": [], "conditions": [
        *plan["conditions"], "batch e=8 B=32 buf=0"]}
    store = tmp_path / "extended.jsonl"
    store.write_text("".join(lines) + json.dumps(wider) + "\n")
    assert report_main(["--store", str(store), "--out", str(tmp_path / "out")]) == 0
    text = (tmp_path / "out" / "README.md").read_text()
    assert "reduces the full protocol" not in text
    assert "Planned, not started yet: batch e=8 B=32 buf=0." in text
