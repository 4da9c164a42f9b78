"""`dataecho reproduce --workload MODULE:ATTR`: a workload of the user's, resolved,
fingerprinted in the store, and refused on resume once it has changed."""

import dataclasses
import json
import re
from dataclasses import dataclass

import pytest

pytest.importorskip("torch")
pytest.importorskip("sklearn")

from dataecho import cli
from dataecho.experiments.augment import CropFlip
from dataecho.experiments.cli import reproduce_main
from dataecho.experiments.protocol import plan
from dataecho.experiments.registry import claim, fingerprint, resolve
from dataecho.experiments.store import Store
from dataecho.experiments.workloads import DIGITS, ImageWorkload

pytestmark = pytest.mark.torch

BUILT_IN = "dataecho.experiments.workloads:DIGITS"


@dataclass(frozen=True, kw_only=True)
class ErasedDigits(ImageWorkload):
    """A workload written outside dataecho: digits with an augmentation of its own."""

    def augment(self):
        crop = CropFlip(self.cnn.image_size, self.pad, flip=False)

        def crop_and_erase(example, rng):
            image, label = crop(example, rng)
            image = image.copy()
            image[rng.integers(len(image))] = 0  # one random row blanked
            return image, label

        return crop_and_erase


def make(**changes):
    """The test's workload: digits' fields, a lower target and a smaller budget (fast)."""
    fields = {f.name: getattr(DIGITS, f.name) for f in dataclasses.fields(DIGITS)}
    return ErasedDigits(**{**fields, "name": "erased", "target": 0.6, "fresh_budget": 2400,
                           "evals": 8, **changes})


MINE = f"{__name__}:make"


def records(out):
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


def test_a_built_in_workload_by_import_string_runs_the_smoke_budget(tmp_path):
    assert reproduce_main(["--workload", BUILT_IN, "--budget", "smoke",
                           "--out", str(tmp_path)]) == 0
    stored = records(tmp_path)
    mine = [r for r in stored if r["kind"] == "workload"]
    assert [(r["workload"], r["name"], r["fingerprint"]) for r in mine] == [
        (BUILT_IN, "digits", fingerprint(DIGITS))]
    trials = [r for r in stored if r["kind"] == "trial"]
    assert {r["workload"] for r in trials} == {r["condition"]["workload"] for r in trials} == {
        BUILT_IN}
    # The same grid as the built-in smoke run, on the workload the string names.
    assert [c.label() for c in plan(BUILT_IN, "smoke").conditions] == [
        c.label() for c in plan("digits", "smoke").conditions]
    assert len(trials) == 18 and (tmp_path / "README.md").is_file()


def test_a_workload_defined_in_the_test_s_own_module_runs_the_same_way(tmp_path):
    assert reproduce_main(["--workload", MINE, "--budget", "smoke", "--out", str(tmp_path),
                           "--jobs", "2"]) == 0  # spawned trial processes resolve it too
    stored = records(tmp_path)
    (mine,) = [r for r in stored if r["kind"] == "workload"]
    assert (mine["workload"], mine["name"], mine["fingerprint"]) == (MINE, "erased",
                                                                      fingerprint(make()))
    assert "def crop_and_erase" in mine["code"][0]  # its code, as well as its fields
    trials = [r for r in stored if r["kind"] == "trial"]
    assert len(trials) == 18 and {r["config"]["workload"]["kind"] for r in trials} == {
        "ErasedDigits"}
    assert all(r["config"]["workload"]["target"] == 0.6 for r in trials)
    # Rerunning the same command resumes: nothing is left to do.
    assert reproduce_main(["--workload", MINE, "--budget", "smoke",
                           "--out", str(tmp_path)]) == 0
    assert len(records(tmp_path)) == len(stored)


@pytest.mark.parametrize("budget", ["quick", "full"])
def test_every_budget_plans_the_workload_it_is_given(budget):
    p = plan(MINE, budget)
    assert p.workload == MINE and {c.workload for c in p.conditions} == {MINE}
    assert {c.variant for c in p.conditions} == {"baseline", *make().variants}
    sizes = {c.batch_size for c in p.conditions}
    assert sizes == ({32} if budget == "quick" else {16, 32, 128, 256})


def test_a_changed_workload_is_refused_on_resume_naming_what_changed(tmp_path, capsys):
    store = Store(tmp_path / "results.jsonl")
    claim(store, MINE, make(target=0.5))  # the store was begun with target 0.5
    assert reproduce_main(["--workload", MINE, "--budget", "smoke",
                           "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert re.search(rf"dataecho reproduce: workload {re.escape(MINE)} has changed since "
                     rf"{re.escape(str(store.path))} was started \(fingerprint [0-9a-f]{{16}} "
                     r"then, [0-9a-f]{16} now: fields target 0\.5 -> 0\.6\)", err), err
    assert "Start a new store (dataecho reproduce --out NEW_DIR, or --store PATH)" in err
    assert [r["kind"] for r in store] == ["workload"]  # refused before any trial ran


def test_a_workload_whose_code_changed_is_refused_though_its_fields_are_the_same(tmp_path):
    store = Store(tmp_path / "results.jsonl")
    record = claim(store, MINE, make())
    store.append({**record, "fingerprint": "0" * 16})  # as if its methods were edited since
    with pytest.raises(ValueError, match=r"then, [0-9a-f]{16} now: same fields, its code "
                                         r"differs\)"):
        claim(store, MINE, make())
    assert fingerprint(make()) != fingerprint(DIGITS)  # same numbers, other class


def test_an_import_error_names_the_module(tmp_path, monkeypatch, capsys):
    (tmp_path / "brokenwork.py").write_text("import no_such_dependency_abc\nW = None\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for ref, message in [
        ("no_such_module_xyz:W", "argument --workload: workload no_such_module_xyz:W: cannot "
                                 "import module no_such_module_xyz (No module named "
                                 "'no_such_module_xyz'); run from the folder that holds it"),
        ("brokenwork:W", "workload brokenwork:W: importing module brokenwork failed: No "
                         "module named 'no_such_dependency_abc' (a module it imports); "
                         "install no_such_dependency_abc or fix the import in brokenwork")]:
        with pytest.raises(SystemExit) as exit:
            cli.main(["reproduce", "--workload", ref, "--out", str(tmp_path / "out")])
        assert exit.value.code == 2
        err = capsys.readouterr().err
        assert message in err and "pip install" not in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def not_a_workload():
    return 42


@pytest.mark.parametrize(("ref", "message"), [
    ("dataecho.experiments.workloads:DIGITS.name",
     r"DIGITS\.name must be a Workload or a function called without arguments that returns "
     r"one, got 'digits' of type str"),
    ("dataecho.experiments.workloads:ImageWorkload",
     r"got the class ImageWorkload; pass dataecho\.experiments\.workloads:NAME of an instance"),
    ("dataecho.experiments.workloads:NOPE",
     r"module dataecho\.experiments\.workloads has no attribute NOPE"),
    (f"{__name__}:not_a_workload", r"not_a_workload\(\) must return a Workload, got 42 of type "
                                   r"int; return an instance of a Workload subclass"),
    (f"{__name__}:records", r"records must take no arguments, as it is called without any, "
                            r"but its signature is records\(out\)"),
])
def test_an_attribute_that_is_no_workload_is_refused_with_the_fix(ref, message):
    with pytest.raises((TypeError, ValueError), match=message):
        resolve(ref)


def test_the_cli_refuses_it_as_a_usage_error_naming_the_flag(capsys):
    with pytest.raises(SystemExit) as exit:
        reproduce_main(["--workload", f"{__name__}:not_a_workload", "--budget", "smoke"])
    assert exit.value.code == 2
    assert "argument --workload: workload " in capsys.readouterr().err
