"""The runnable examples run."""

import runpy
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).parent.parent / "examples"


@pytest.mark.parametrize("name", ["numpy_iterator.py", "pytorch_example_echoing.py",
                                  "pytorch_batch_echoing.py", "torchdata_nodes.py",
                                  "lightning_echo.py"])
def test_example_runs(name, capsys):
    if name.startswith("pytorch"):
        pytest.importorskip("torch")
    if name.startswith("torchdata"):
        pytest.importorskip("torchdata.nodes")
    if name.startswith("lightning"):
        pytest.importorskip("lightning")
    runpy.run_path(str(EXAMPLES / name), run_name="__main__")
    out = capsys.readouterr().out
    assert "fresh" in out
    if name == "torchdata_nodes.py":
        assert "identical: True" in out
    if name == "lightning_echo.py":
        assert "realised factor 2.00" in out


def test_torchdata_example_augments_the_two_copies_of_an_example_differently():
    pytest.importorskip("torchdata.nodes")
    import numpy as np
    build = runpy.run_path(str(EXAMPLES / "torchdata_nodes.py"))["build"]
    rows = np.concatenate([np.stack(b) for b in build()[1]])
    # 512 examples, each twice: before augmentation, so no two rows are the same.
    assert rows.shape == (1024, 4) and len(np.unique(rows, axis=0)) == 1024
