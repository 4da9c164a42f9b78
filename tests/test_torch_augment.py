"""One-argument augmentations on torch's global generator, seeded per copy (Seeded)."""

import json
import random
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader, Dataset

from dataecho.torch import EchoDataset, Seeded
from helpers.checkpoint import same

pytestmark = pytest.mark.torch


class Folder(Dataset):
    """ImageFolder's shape: ``[i]`` is (image tensor, label), through ``transform``."""

    def __init__(self, n, transform=None):
        self.images = torch.arange(n * 3 * 4 * 4, dtype=torch.float32).reshape(n, 3, 4, 4)
        self.labels = list(range(n))  # a class per image: a label names its example
        self.transform = transform

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        image = self.images[i]
        if self.transform is not None:
            image = self.transform(image)
        return image, self.labels[i]


def noise(image):
    """A torchvision-style transform: one argument, torch's global generator."""
    return image + torch.rand(image.shape)


def train_tf(example):
    image, label = example
    if torch.rand(()) < 0.5:
        image = image.flip(-1)
    return noise(image), label


def _run(ds, **loader):
    """Every copy the loader yields, one per row: (label, the image's draws)."""
    out = []
    for images, labels in DataLoader(ds, batch_size=4, **loader):
        out += list(zip(labels.tolist(), images.flatten(1).tolist(), strict=True))
    return out


def _copies_differ(rows):
    """Whether each example came twice (factor 2), as two different images."""
    copies = {}
    for label, pixels in rows:
        copies.setdefault(label, set()).add(tuple(pixels))
    return len(rows) == 2 * len(copies) and all(len(c) == 2 for c in copies.values())


def test_copies_of_an_example_get_their_own_draws_from_a_one_argument_augment():
    rows = _run(EchoDataset(Folder(40), augment=train_tf, factor=2, seed=0))
    assert len(rows) == 80
    assert _copies_differ(rows)


def test_two_runs_with_one_seed_are_identical_whatever_the_global_stream_holds():
    torch.manual_seed(1)
    first = list(EchoDataset(Folder(24), augment=train_tf, factor=2, seed=3))
    torch.manual_seed(2)
    again = list(EchoDataset(Folder(24), augment=train_tf, factor=2, seed=3))
    assert same(first, again)
    other = list(EchoDataset(Folder(24), augment=train_tf, factor=2, seed=4))
    assert not same(sorted(first, key=lambda e: e[1]), sorted(other, key=lambda e: e[1]))


def test_iterating_leaves_the_global_generators_as_they_were():
    def both(image):  # draws from torch's and Python's global generators
        return image * random.random() + torch.rand(())

    torch.manual_seed(5)
    random.seed(5)
    torch_before, random_before = torch.get_rng_state(), random.getstate()
    examples = list(EchoDataset(Folder(12), augment=lambda e: (both(e[0]), e[1]), factor=2))
    assert len(examples) == 24
    assert torch.equal(torch.get_rng_state(), torch_before)
    assert random.getstate() == random_before


def test_a_restored_checkpoint_resumes_the_copies_exactly():
    def make():
        return EchoDataset(Folder(30), augment=train_tf, factor=2, buffer_size=6, seed=2)

    ds = make()
    full = list(DataLoader(ds, batch_size=4))
    for k in (1, 6, 11):
        first = make()
        batches = iter(DataLoader(first, batch_size=4))
        head = [next(batches) for _ in range(k)]
        state = json.loads(json.dumps(first.state_dict()))
        torch.manual_seed(k)  # the global stream moved on since the checkpoint
        restored = make()
        restored.load_state_dict(state)
        assert same(head + list(DataLoader(restored, batch_size=4)), full), k


def test_a_stateful_dataloader_with_two_workers_resumes_the_copies_exactly():
    from torchdata.stateful_dataloader import StatefulDataLoader

    def make():
        ds = EchoDataset(Folder(32), augment=train_tf, factor=2, buffer_size=4, seed=1)
        return StatefulDataLoader(ds, batch_size=4, num_workers=2)

    full = list(make())
    loader = make()
    batches = iter(loader)
    head = [next(batches) for _ in range(5)]
    state = loader.state_dict()
    del batches
    restored = make()
    restored.load_state_dict(state)
    assert same(head + list(restored), full)


def test_two_workers_draw_apart_and_rerun_alike_whatever_their_global_seeds():
    def loader_rows(worker_seeds):
        ds = EchoDataset(Folder(40), augment=train_tf, factor=2, seed=7)
        # The loader's own generator picks its workers' global seeds (and leaves the
        # training process's stream alone); the copies must not depend on them.
        return _run(ds, num_workers=2, generator=torch.Generator().manual_seed(worker_seeds))

    torch_before = torch.get_rng_state()
    rows = loader_rows(0)
    assert torch.equal(torch.get_rng_state(), torch_before)
    assert _copies_differ(rows)
    assert rows == loader_rows(1)
    # Each worker reads its own half of the examples and draws its own copies.
    assert len({tuple(pixels) for _, pixels in rows}) == 80


def jitter(example, rng):
    image, label = example
    return image + float(rng.random()), label


def test_an_augment_of_example_and_rng_is_called_with_dataechos_generator_as_before():
    ds = EchoDataset(Folder(4), augment=jitter, factor=2, seed=0)
    assert ds.recipe.augment is jitter
    assert "augment=jitter," in repr(ds)


def test_a_one_argument_augment_shows_as_seeded_and_generators_none_runs_it_as_it_is():
    assert "augment=Seeded(train_tf)" in repr(EchoDataset(Folder(4), augment=train_tf))
    plain = EchoDataset(Folder(4), augment=Seeded(train_tf, generators=()))
    assert plain.recipe.augment is train_tf and "augment=train_tf" in repr(plain)
    torch.manual_seed(0)
    before = torch.get_rng_state()
    list(plain)  # called as train_tf(example): it draws from the global stream
    assert not torch.equal(torch.get_rng_state(), before)


def test_numpy_global_generator_is_seeded_and_restored_when_named():
    def speckle(example):
        image, label = example
        return image + float(np.random.random()), label

    def run():
        ds = EchoDataset(Folder(8), augment=Seeded(speckle, generators=("numpy",)),
                         factor=2, seed=0)
        return list(ds)

    np.random.seed(1)
    before = np.random.get_state()
    first = run()
    after = np.random.get_state()
    assert all(np.array_equal(a, b) for a, b in zip(before, after, strict=True))
    np.random.seed(2)
    assert same(first, run())
    assert _copies_differ([(y, x.flatten().tolist()) for x, y in first])


def test_python_random_is_seeded_alike_by_its_raw_state_and_by_setstate(monkeypatch):
    # CPython's generator is copied as raw bytes; elsewhere getstate/setstate do it.
    # Both must give a copy the same draws and put the user's state back.
    from dataecho.torch import augment

    def shuffled(example):  # torchvision v1's RandomOrder draws like this
        image, label = example
        order = list(range(3))
        random.shuffle(order)
        return image[order], label

    def run(user_seed):
        random.seed(user_seed)
        before = random.getstate()
        out = list(EchoDataset(Folder(10), augment=shuffled, factor=2, seed=1))
        assert random.getstate() == before
        return out

    assert augment._RANDOM.at is not None  # this interpreter takes the fast path
    fast = run(9)
    monkeypatch.setattr(augment._RANDOM, "at", None)
    assert same(run(10), fast)
    # 3! orders of 3 channels: copies differ, but some copies may draw the same order.
    assert len({tuple(x.flatten().tolist()) for x, _ in fast}) > 10


def test_seeded_names_the_generators_it_seeds_in_its_repr():
    assert repr(Seeded(noise)) == "Seeded(noise)"
    assert repr(Seeded(noise, generators=["numpy", "torch"])) == (
        "Seeded(noise, generators=('torch', 'numpy'))")


@pytest.mark.parametrize("fn, generators, error, message", [
    (lambda x, rng: x, ("torch",), TypeError,
     r"Seeded\(fn\) is for a function of one argument that draws from global generators, "
     r"got <lambda>, which takes dataecho's generator as fn\(example, rng\) already; "
     r"pass it as augment= without Seeded"),
    (noise, "torch", TypeError,
     r"generators must be a tuple of names from \('torch', 'random', 'numpy'\), got "
     r"'torch' of type str; pass e.g. generators=\('torch',\) for torchvision v2 or "
     r"kornia, or \(\) for a function that draws from none"),
    (noise, ("torch", "cuda"), ValueError,
     r"generators must name distinct global generators from \('torch', 'random', "
     r"'numpy'\), the ones fn draws from, got \('torch', 'cuda'\); pass e.g."),
    (noise, ("torch", "torch"), ValueError, r"got \('torch', 'torch'\); pass e.g."),
    ("noise", ("torch",), TypeError,
     r"fn must be callable as fn\(example\), got 'noise' of type str; pass a function"),
])
def test_seeded_refuses_what_it_cannot_seed(fn, generators, error, message):
    with pytest.raises(error, match=message):
        Seeded(fn, generators=generators)


def test_seeded_refuses_a_seeded_function():
    with pytest.raises(TypeError, match=r"got Seeded\(noise\), which takes dataecho's"):
        Seeded(Seeded(noise))


def test_a_data_set_that_augments_as_it_reads_is_warned_with_the_fix():
    with pytest.warns(UserWarning) as caught:
        EchoDataset(Folder(4, transform=noise), factor=2)
    assert len(caught) == 1
    message = str(caught[0].message)
    assert message == (
        "dataset Folder augments as it reads (its transform, noise), before the echo, so "
        "with echo='before_augmentation' every copy of an example is the same augmented "
        "example; set dataset.transform = None and pass the transform as "
        "EchoDataset(dataset, augment=transform), which augments each copy anew")
    assert caught[0].filename == __file__  # it points at the line that built it


@pytest.mark.parametrize("kwargs", [
    {"factor": 2},  # no transform: nothing to warn
    {"factor": 2, "echo": "after_augmentation"},  # identical copies are that variant
    {"factor": 1},  # no echo
])
def test_no_warning_where_the_transform_does_not_turn_echoing_into_identical_copies(kwargs):
    data = Folder(4) if "echo" not in kwargs and kwargs["factor"] == 2 else Folder(
        4, transform=noise)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        EchoDataset(data, **kwargs)


def test_the_warned_data_set_really_gives_identical_copies_and_the_fix_does_not():
    # What the warning is about, shown: the transform inside, copies alike; moved out
    # to augment=, copies differ.
    with pytest.warns(UserWarning):
        inside = _run(EchoDataset(Folder(20, transform=noise), factor=2, seed=0))
    assert not _copies_differ(inside)
    data = Folder(20, transform=noise)
    transform, data.transform = data.transform, None
    moved = _run(EchoDataset(data, augment=lambda e: (transform(e[0]), e[1]), factor=2))
    assert _copies_differ(moved)
