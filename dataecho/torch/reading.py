"""How an ``EchoDataset`` reads its data: a map-style data set by index, or a stream.

The options that mean something for one kind of data only are values of their own,
as grain's option classes are: :class:`Indexed` (order and length of a map-style data
set) and :class:`Streamed` (who splits a stream across workers and ranks). An option
of the other kind cannot be written down; :func:`read_of` checks the pair.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from torch.utils.data import IterableDataset

from .._checks import check_bool
from ..stage import Stage
from .streams import Split, reader_of


@dataclass(frozen=True)
class Indexed:
    """Reads a map-style data set (``len`` and ``[i]``) in a per-epoch permutation.

    Worker ``w`` of rank ``r`` reads shard ``r * num_workers + w`` of ``world_size *
    num_workers``; shards differ by at most one example.

    Args:
        shuffle: permute the data set each epoch (by ``(seed, epoch)``).
        drop_remainder: drop ``len(dataset) % (world_size * num_workers)`` examples of
            each epoch (a different few each epoch), so every shard has the same length
            and, with an integer factor, every rank the same number of steps.

    Example:
        >>> Indexed(shuffle=False)
        Indexed(shuffle=False, drop_remainder=False)
    """

    shuffle: bool = True
    drop_remainder: bool = False

    def __post_init__(self) -> None:
        check_bool(self.shuffle, "Indexed.shuffle")
        check_bool(self.drop_remainder, "Indexed.drop_remainder")


@dataclass(frozen=True)
class Streamed:
    """Reads a stream: iterated once per epoch in every DataLoader worker.

    Args:
        split: who splits it across workers and ranks: ``"stream"``, the stream
            itself (WebDataset splits shards by worker, and by rank with
            ``nodesplitter=wds.split_by_node``; Hugging Face by worker, and by rank
            after ``split_dataset_by_node``); ``"dataecho"``, every reader reads it
            all and keeps every ``world_size * num_workers``-th example (exact for any
            stream, but each example is read by every reader); None: ``"stream"`` for
            WebDataset and Hugging Face streams, ``"dataecho"`` for
            :class:`dataecho.TarShards` (split by whole shards), and for other streams
            an error once more than one worker or rank reads them.

    Example:
        >>> Streamed(split="dataecho")
        Streamed(split='dataecho')
    """

    split: Split | None = None

    def __post_init__(self) -> None:
        if self.split not in (None, "stream", "dataecho"):
            raise ValueError(
                f"Streamed.split must be 'stream' (the stream splits itself by worker and "
                f"rank), 'dataecho' (every reader keeps every n-th example) or None, got "
                f"{self.split!r}; pass Streamed(split='stream') for WebDataset or Hugging "
                "Face streams")


def read_of(dataset: object, read: object) -> Indexed | Streamed:
    """How to read ``dataset``: ``read`` checked against its kind, or that kind's default.

    A stream's ``split`` comes back resolved where its library says (see
    :class:`Streamed`).

    Raises:
        TypeError: ``read`` is not an option, or ``dataset`` is neither kind.
        ValueError: an option of the other kind, or an empty map-style data set.

    Example:
        >>> read_of([1, 2], None)
        Indexed(shuffle=True, drop_remainder=False)
    """
    if read is not None and not isinstance(read, Indexed | Streamed):
        raise TypeError(
            f"read must be dataecho.torch.Indexed(...) for a map-style data set, "
            f"dataecho.torch.Streamed(...) for a stream, or None, got {read!r}; pass "
            "read=Indexed(shuffle=False), for example")
    stream = is_stream(dataset)
    kind = "a stream" if stream else "a map-style data set"
    wanted = Streamed if stream else Indexed
    if read is not None and not isinstance(read, wanted):
        raise ValueError(
            f"read={read!r} says how to read "
            f"{'a map-style data set' if isinstance(read, Indexed) else 'a stream'}, but "
            f"dataset is {kind} "
            f"({type(dataset).__name__}); pass read={wanted.__name__}(...), or drop read")
    if not stream:
        if len(dataset) == 0:  # type: ignore[arg-type]
            raise ValueError(
                "dataset is empty (len(dataset) == 0); pass a data set with examples")
        return read or Indexed()
    split = read.split if isinstance(read, Streamed) else None
    return Streamed(split=_split_of(dataset, split))


def is_stream(dataset: object) -> bool:
    """Whether ``dataset`` is read as a stream (iterated) rather than indexed.

    Raises:
        TypeError: a one-shot iterator (a generator), or neither kind.

    Example:
        >>> is_stream([1, 2]), is_stream(range(3).__class__)
        (False, False)
    """
    if isinstance(dataset, IterableDataset | Stage):
        return True
    if hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__"):
        return False
    if isinstance(dataset, Iterator):
        raise TypeError(
            f"dataset must be re-iterable (iterated once per epoch in every worker), got a "
            f"one-shot iterator ({type(dataset).__name__}); pass the data set or stream "
            "itself (an IterableDataset, a list), not iter(...) or a generator")
    if isinstance(dataset, Iterable):
        return True
    raise TypeError(
        f"dataset must be a map-style data set (len() and integer indexing) or a stream "
        f"(an IterableDataset or another re-iterable), got {type(dataset).__name__}; pass "
        "a torch Dataset, a list, a WebDataset or a Hugging Face IterableDataset")


def _split_of(dataset: object, split: Split | None) -> Split | None:
    reader = reader_of(dataset)
    if reader.shards is not None and split == "stream":
        raise ValueError(
            f"{type(dataset).__name__} is split by dataecho, one reader of whole shards "
            f"per worker and rank (its with_reader()), got Streamed(split='stream'); "
            "drop split")
    return reader.split if split is None or reader.shards is not None else split
