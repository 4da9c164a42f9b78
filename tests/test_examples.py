"""The runnable examples run."""

import runpy
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).parent.parent / "examples"


@pytest.mark.parametrize("name", ["numpy_iterator.py", "pytorch_example_echoing.py",
                                  "pytorch_batch_echoing.py", "torchdata_nodes.py"])
def test_example_runs(name, capsys):
    if name.startswith("pytorch"):
        pytest.importorskip("torch")
    if name.startswith("torchdata"):
        pytest.importorskip("torchdata.nodes")
    runpy.run_path(str(EXAMPLES / name), run_name="__main__")
    out = capsys.readouterr().out
    assert "fresh" in out
    if name == "torchdata_nodes.py":
        assert "identical: True" in out
