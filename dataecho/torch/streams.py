"""The one table of stream readers: how ``EchoDataset`` recognises, splits and checks a stream.

Each library's streams differ in who splits them across DataLoader workers and ranks,
in what would make every rank read everything, and in what their own checkpoint leaves
out. One :class:`StreamReader` says all of that for one kind of stream; :data:`READERS`
lists them, first match wins, and :func:`register` puts a reader of your own first.
Anything no entry recognises is read by :data:`ANY` (split by dataecho when asked).

How a stream is checkpointed needs no entry: one with its own ``state_dict()``/
``load_state_dict()`` keeps its own state, anything else is re-iterated and the
consumed examples skipped (:func:`dataecho.readers.as_stage`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from ..map import Map
from ..stage import Stage

Split = Literal["stream", "dataecho"]


@dataclass(frozen=True)
class StreamReader:
    """How dataecho reads one kind of stream.

    Args:
        name: the library or kind, for messages.
        recognises: ``recognises(stream)``: whether this entry reads ``stream``.
        split: who splits it across workers and ranks by default: ``"stream"`` (it
            reads ``get_worker_info()`` and its rank itself), ``"dataecho"`` (every
            reader keeps its share), or None (the user must say, once more than one
            worker or rank reads it).
        check: ``check(stream, world_size)`` raises ``ValueError`` for a setup that
            would duplicate or lose examples across ranks, naming the fix; None: none.
        shards: ``shards(stream, shard_index, num_shards, epoch)``: the stream rebuilt
            to read whole shards for one reader (a stage or any re-iterable; split by
            dataecho without reading the others' part); None: the stream is read as
            it is.
        inexact: ``inexact(stream)``: why its own checkpoint cannot resume it exactly
            (warned at the first checkpoint), or None.

    Example:
        >>> mine = StreamReader("numbers", lambda s: isinstance(s, range), split="dataecho")
        >>> reader_of(range(3)).name, mine.recognises(range(3))
        ('any stream', True)
    """

    name: str
    recognises: Callable[[object], bool]
    split: Split | None = None
    check: Callable[[object, int | None], None] | None = None
    shards: Callable[[Any, int, int, int], Any] | None = None
    inexact: Callable[[object], str | None] | None = None


def _library(*names: str) -> Callable[[object], bool]:
    """Recognises the objects whose class comes from one of these top-level packages."""
    return lambda stream: type(stream).__module__.split(".")[0] in names


def _shard_reader(stream: object) -> Any:
    """The stage whose ``with_reader`` reads whole shards, under ``Map`` stages, or None."""
    while isinstance(stream, Map):
        stream = stream.upstream
    return stream if callable(getattr(stream, "with_reader", None)) else None


def _whole_shards(stream: Any, shard_index: int, num_shards: int, epoch: int) -> Stage[Any]:
    """``stream`` over one reader's whole shards: ``Map`` stages rebuilt over it, same seeds."""
    if isinstance(stream, Map):
        inner = _whole_shards(stream.upstream, shard_index, num_shards, epoch)
        return Map(inner, stream.fn, seed=stream.seed, random=stream.random)
    return stream.with_reader(shard_index, num_shards, epoch)  # type: ignore[no-any-return]


def _hf_check(stream: object, world_size: int | None) -> None:
    # datasets records split_dataset_by_node in this attribute (checked on 2.x-5.x);
    # a version without it is not checked rather than refused.
    if (world_size is not None and world_size > 1 and hasattr(stream, "_distributed")
            and getattr(stream, "_distributed", None) is None):
        raise ValueError(
            f"dataset is a Hugging Face stream that every one of the {world_size} ranks would "
            "read whole, duplicating every example; split it first with "
            "datasets.distributed.split_dataset_by_node(dataset, rank=rank, "
            "world_size=world_size)")


def _hf_inexact(stream: object) -> str | None:
    # datasets keeps its steps as a chain of examples iterables (checked on 2.x-5.x); a
    # buffered shuffle leaves its buffer out of the stream's state_dict().
    part, seen = getattr(stream, "_ex_iterable", None), 0
    while part is not None and seen < 64:
        if type(part).__name__ == "BufferShuffledExamplesIterable":
            return (f"the Hugging Face stream {type(stream).__name__} was shuffled with a "
                    f"buffer (.shuffle(seed, buffer_size={getattr(part, 'buffer_size', '?')}"
                    ")), which its state_dict() leaves out, so a resume loses the examples "
                    "in that buffer; drop .shuffle() on the stream and let EchoDataset's "
                    "window shuffle (EchoDataset(..., buffer_size=...)), which a checkpoint "
                    "restores exactly")
        part, seen = getattr(part, "ex_iterable", None), seen + 1
    return None


#: A stream no entry recognises: the user says who splits it.
ANY = StreamReader("any stream", lambda stream: True)

#: The readers, first match wins (:func:`register` puts new ones first).
READERS: list[StreamReader] = [
    StreamReader("whole shards (with_reader: dataecho.TarShards)",
                 lambda stream: _shard_reader(stream) is not None, split="dataecho",
                 shards=_whole_shards),
    StreamReader("WebDataset", _library("webdataset"), split="stream"),
    StreamReader("Hugging Face datasets", _library("datasets"), split="stream",
                 check=_hf_check, inexact=_hf_inexact),
    StreamReader("LitData", _library("litdata"), split="stream"),
    StreamReader("Mosaic streaming", _library("streaming"), split="stream"),
]


def register(reader: StreamReader) -> None:
    """Makes ``reader`` the first entry asked, before the built-in ones.

    Raises:
        TypeError: ``reader`` is not a :class:`StreamReader`.

    Example:
        >>> class Numbers:  # a stream of one's own that splits itself by worker
        ...     def __iter__(self): return iter(range(3))
        >>> register(StreamReader("Numbers", lambda s: isinstance(s, Numbers), split="stream"))
        >>> reader_of(Numbers()).split
        'stream'
        >>> _ = READERS.pop(0)  # (the example's own entry, removed again)
    """
    if not isinstance(reader, StreamReader):
        raise TypeError(
            f"reader must be a dataecho.torch.streams.StreamReader, got "
            f"{type(reader).__name__}; pass StreamReader(name, recognises, split=...)")
    READERS.insert(0, reader)


def reader_of(stream: object) -> StreamReader:
    """The entry that reads ``stream``: the first of :data:`READERS` that recognises it.

    Example:
        >>> reader_of([1, 2]).name
        'any stream'
    """
    return next((r for r in READERS if r.recognises(stream)), ANY)
