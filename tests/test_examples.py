"""The runnable examples run and print the stats they promise."""

import os
import re
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).parent.parent / "examples"


# Each example's printed stats lines, whole: the counts are exact (fresh examples,
# emitted copies, steps), so a change in echoing shows here. Loss and accuracy depend
# on the platform's float arithmetic and are matched loosely.
STATS = {
    "webdataset_echo.py": [
        r"64 steps, loss \d\.\d{3}; fresh 4,096 examples, emitted 8,192 \(factor 2\.000\)",
        r"resumed after 10 steps: 54 steps left, identical: True"],
    "hf_streaming_echo.py": [
        r"60 steps, loss \d\.\d{3}; fresh 3,000 examples, emitted 6,000 \(factor 2\.000\)",
        r"resumed after 20 steps: 40 steps left, identical: True"],
    "numpy_iterator.py": [
        r"checkpoint of \d+ bytes resumed exactly; "
        r"fresh 1,000 examples, emitted 2,488 \(factor 2\.488\)"],
    "pytorch_example_echoing.py": [
        r"epoch 0: loss \d\.\d{3}; fresh 1,797 examples, emitted 3,594 \(factor 2\.000\)",
        r"epoch 1: loss \d\.\d{3}; fresh 3,594 examples, emitted 7,188 \(factor 2\.000\)",
        r"epoch 2: loss \d\.\d{3}; fresh 5,391 examples, emitted 10,782 \(factor 2\.000\)",
        r"resumed in epoch 1: 46 batches left in that epoch"],
    "pytorch_batch_echoing.py": [
        r"epoch 0: 14 steps \(len said 14\); fresh 1,000 examples, emitted 1,400 \(factor 1\.400\)",
        r"epoch 1: 14 steps \(len said 14\); fresh 2,000 examples, emitted 2,800 \(factor 1\.400\)",
        r"caught: the training step modified an echoed batch in place .*"],
    "torchdata_nodes.py": [
        r"epoch 0: 16 batches; fresh 512 examples, emitted 1,024 \(factor 2\.000\)",
        r"resumed after 5 batches: 11 batches, identical: True; "
        r"fresh 512 examples, emitted 1,024 \(factor 2\.000\)"],
    "lightning_echo.py": [
        r"96 steps from 48 fresh batches: fresh 3000 examples, emitted 6000, "
        r"realised factor 2\.00; held-out accuracy 0\.\d{3}"],
    # 2 workers x 93 batches of 128; each worker drops 96 copies after its last state left it.
    "grain_jax.py": [
        r"186 steps: fresh 11,904 examples, emitted 23,808 \(factor 2\.000\); "
        r"test accuracy 0\.\d{3}"],
    # Equal steps on both ranks; fresh rows summed over the ranks: 2,048 per epoch.
    "ray_train_echo.py": [
        r"epoch 0: 32, 32 steps on the 2 ranks; loss \d\.\d{3}; "
        r"fresh 2,048 examples, emitted 4,096 \(factor 2\.000\)",
        r"resumed from the epoch 0 checkpoint: fresh 2,048 examples before it",
        r"epoch 1: 32, 32 steps on the 2 ranks; loss \d\.\d{3}; "
        r"fresh 4,096 examples, emitted 8,192 \(factor 2\.000\)",
        r"2 epochs on 2 ranks: fresh 4,096 examples = 2,048 x 2 epochs, emitted 8,192; "
        r"test accuracy 0\.\d{3}"],
}


# JAX starts threads once it has a backend; a later os.fork() in this process (the
# DataLoader workers of the torch tests) could then deadlock, so these run apart; so
# does the Ray cluster, whose driver threads and processes end with the example.
OWN_PROCESS = {"grain_jax.py", "ray_train_echo.py"}


def run_in_own_process(name):
    env = {**os.environ, "PYTHONPATH": str(EXAMPLES.parent)}
    done = subprocess.run([sys.executable, str(EXAMPLES / name)], capture_output=True,
                          text=True, env=env, timeout=280, check=False)
    assert done.returncode == 0, f"{name} failed:\n{done.stderr[-3000:]}"
    return done.stdout.splitlines()


@pytest.mark.parametrize("name", [
    "numpy_iterator.py",
    pytest.param("pytorch_example_echoing.py", marks=pytest.mark.torch),
    pytest.param("pytorch_batch_echoing.py", marks=pytest.mark.torch),
    pytest.param("torchdata_nodes.py", marks=pytest.mark.torch),
    pytest.param("lightning_echo.py", marks=pytest.mark.torch),
    pytest.param("webdataset_echo.py", marks=pytest.mark.torch),
    pytest.param("hf_streaming_echo.py", marks=pytest.mark.torch),
    "grain_jax.py",
    pytest.param("ray_train_echo.py", marks=pytest.mark.torch)])
def test_example_runs_and_prints_its_stats(name, capsys, monkeypatch):
    if name.startswith("pytorch"):
        pytest.importorskip("torch")
    if name.startswith("torchdata"):
        pytest.importorskip("torchdata.nodes")
    if name.startswith("lightning"):
        pytest.importorskip("lightning")
    if name.startswith("webdataset"):
        pytest.importorskip("webdataset", reason="needs webdataset (dataecho[webdataset])")
        pytest.importorskip("torchdata", reason="needs torchdata (dataecho[torchdata])")
    if name.startswith("hf_"):
        pytest.importorskip("datasets", reason="needs datasets (dataecho[hf])")
        pytest.importorskip("torchdata", reason="needs torchdata (dataecho[torchdata])")
    if name.startswith("grain"):
        pytest.importorskip("grain")
        pytest.importorskip("jax")
    if name.startswith("ray_"):
        pytest.importorskip("ray.train", reason="needs ray[data] and pydantic (dataecho[ray])")
        pytest.importorskip("PIL", reason="needs pillow (dataecho[demo])")
        pytest.importorskip("torch")
    if name in OWN_PROCESS:
        lines = run_in_own_process(name)
    else:
        monkeypatch.setattr("sys.argv", [name])  # as if run with no options, not pytest's
        runpy.run_path(str(EXAMPLES / name), run_name="__main__")
        lines = capsys.readouterr().out.splitlines()
    for pattern in STATS[name]:
        assert any(re.fullmatch(pattern, line) for line in lines), (
            f"{name} no longer prints a line matching {pattern!r}; it printed {lines}")


@pytest.mark.torch
def test_torchdata_example_augments_the_two_copies_of_an_example_differently():
    pytest.importorskip("torchdata.nodes")
    import numpy as np
    build = runpy.run_path(str(EXAMPLES / "torchdata_nodes.py"))["build"]
    rows = np.concatenate([np.stack(b) for b in build()[1]])
    # 512 examples, each twice: before augmentation, so no two rows are the same.
    assert rows.shape == (1024, 4) and len(np.unique(rows, axis=0)) == 1024
