"""An integration imported without its framework ends with one line naming the extra."""

import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

from dataecho._extras import installed, needs
from helpers.absent import run_without

ROOT = Path(__file__).resolve().parent.parent
EXTRAS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
    "optional-dependencies"]

TORCH = ("dataecho.torch needs PyTorch, which is not installed; pip install 'dataecho[torch]' "
         "(or the torch build for your accelerator, from pytorch.org)")


@pytest.mark.parametrize("module, package, extra, message", [
    ("dataecho.grain", "grain", "grain",
     "dataecho.grain needs grain, which is not installed; pip install 'dataecho[grain]'"),
    ("dataecho.tf", "tensorflow", "tf",
     "dataecho.tf needs TensorFlow, which is not installed; pip install 'dataecho[tf]'"),
    ("dataecho.torch", "torch", "torch", TORCH),
    # Every module of dataecho.torch imports the package first, so each says the same.
    ("dataecho.torch.nodes", "torch", "torch", TORCH),
    ("dataecho.torch.hf", "torch", "torch", TORCH),
    ("dataecho.torch.lightning", "torch", "torch", TORCH),
])
def test_an_integration_without_its_package_ends_with_one_line_naming_the_extra(
        module, package, extra, message):
    done = run_without([package], f"import {module}")
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1] == f"ModuleNotFoundError: {message}"
    # One traceback, the raise in the integration its last frame: not the failed import
    # of the package chained before it.
    assert done.stderr.count("Traceback") == 1 and "During handling" not in done.stderr
    assert f"pip install 'dataecho[{extra}]'" in message
    assert any(req.startswith(package) for req in EXTRAS[extra])  # the extra installs it


def test_the_error_names_the_absent_package_so_importorskip_and_the_conftest_see_it():
    statement = textwrap.dedent("""
        try:
            import dataecho.grain
        except ModuleNotFoundError as error:
            print(error.name)
    """)
    done = run_without(["grain"], statement)
    assert (done.returncode, done.stdout) == (0, "grain\n"), done.stderr


def test_the_hugging_face_adapter_without_transformers_names_its_extra():
    pytest.importorskip("torch")
    done = run_without(["transformers"], "import dataecho.torch.hf")
    assert done.stderr.splitlines()[-1] == (
        "ModuleNotFoundError: dataecho.torch.hf needs Hugging Face transformers, which is not "
        "installed; pip install 'dataecho[hf]'")


def test_the_nodes_adapter_without_torchdata_names_its_extra():
    pytest.importorskip("torch")
    done = run_without(["torchdata"], "import dataecho.torch.nodes")
    assert done.stderr.splitlines()[-1] == (
        "ModuleNotFoundError: dataecho.torch.nodes needs torchdata, which is not installed; "
        "pip install 'dataecho[torchdata]'")


def test_ray_data_imports_with_numpy_alone():
    # echo_rows and CountCopies work on whatever dataset and batches they are given.
    done = run_without(["ray", "torch"], "import dataecho.ray_data; print('ok')")
    assert (done.returncode, done.stdout) == (0, "ok\n"), done.stderr


def test_a_package_that_is_installed_but_lacks_a_dependency_keeps_its_own_error():
    # Installing dataecho[grain] again would not fix a broken grain: say what is broken.
    error = ModuleNotFoundError("No module named 'absl'", name="absl")
    assert needs(error, "dataecho.grain", "grain", "grain") is error


def test_the_message_names_the_module_the_package_and_the_extra():
    error = needs(ModuleNotFoundError("No module named 'PIL.Image'", name="PIL.Image"),
                  "dataecho.demo", "PIL", "demo", also="(or your own Pillow build)")
    assert str(error) == ("dataecho.demo needs Pillow, which is not installed; pip install "
                          "'dataecho[demo]' (or your own Pillow build)")
    assert error.name == "PIL"


def test_installed_tells_absent_and_blocked_modules_apart_from_present_ones(monkeypatch):
    assert installed("json") and not installed("no_such_module_here")
    monkeypatch.setitem(sys.modules, "json", None)  # how Python marks a blocked import
    assert not installed("json")
