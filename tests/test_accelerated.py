"""EchoDataset in loaders that Hugging Face accelerate prepared, on two gloo processes."""
import collections

import pytest

pytest.importorskip("accelerate")

from dataecho.torch.accelerated import split_of
from helpers.launch import run_two_processes

pytestmark = pytest.mark.torch


@pytest.mark.parametrize("num_workers", [0, 2])
def test_every_example_is_trained_factor_times_per_epoch_across_two_processes(
        num_workers, tmp_path):
    # Fails on the code before this test: dispatched, 48 of 96 examples were trained
    # each epoch; sliced, some examples got one of their two copies.
    ranks = run_two_processes("accelerate_job.py", tmp_path, num_workers)
    for mode in ("dispatched", "sliced"):
        trained = collections.Counter(i for r in ranks for i in r[mode]["seen"])
        assert trained == {i: 2 * 2 for i in range(96)}, mode  # factor 2, two epochs
        for r in ranks:  # the counts summed over ranks are what the ranks trained on
            assert (r[mode]["fresh"], r[mode]["emitted"]) == (2 * 96, 2 * 192), mode


def test_a_dataset_not_read_by_a_prepared_loader_is_split_by_dataecho():
    assert split_of(object()) is None


@pytest.mark.parametrize("num_workers", [0, 2])
def test_the_hf_trainer_on_two_processes_trains_every_example_factor_times(num_workers, tmp_path):
    # Fails on the code before this test: 69 of 96 examples seen, 27 of them four times
    # and 27 never (one epoch).
    ranks = run_two_processes("trainer_job.py", tmp_path, num_workers)
    trained = collections.Counter(i for r in ranks for i in r["seen"])
    assert trained == {i: 2 * 2 for i in range(96)}  # factor 2, two epochs of steps
    assert all((r["fresh"], r["emitted"]) == (2 * 96, 2 * 192) for r in ranks)


def test_echo_batches_wraps_a_prepared_loader_and_refuses_a_skip_with_the_fix():
    # Fails on the code before this test: accelerate's loader has a state_dict() that
    # raises unless it was made stateful, and EchoBatches called it at the first batch.
    import torch
    from accelerate import Accelerator
    from accelerate.data_loader import skip_first_batches
    from torch.utils.data import DataLoader

    from dataecho.torch import EchoBatches

    loader = Accelerator(cpu=True).prepare(DataLoader(torch.arange(12), batch_size=4))
    batches = EchoBatches(loader, factor=2)
    assert [b.tolist() for b in batches] == [[0, 1, 2, 3]] * 2 + [[4, 5, 6, 7]] * 2 + [
        [8, 9, 10, 11]] * 2
    with pytest.raises(AttributeError, match=r"cannot be resumed by skipping batches .* "
                                             r"resume it exactly from its own state_dict"):
        skip_first_batches(batches, 2)
