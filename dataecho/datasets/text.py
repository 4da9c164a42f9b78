"""Character-level language-model data: a vocabulary, an encoder and fixed-length examples.

A corpus becomes a map-style set of examples: rows of ``seq_len + 1`` token ids
taken end to end without overlap (inputs are ``row[:-1]``, targets ``row[1:]``),
so one epoch reads every character once. Validation is the last contiguous
stretch of the text, so no validation character is ever trained on; a random
split of rows would leak, because neighbouring rows continue each other's lines.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


def char_vocab(text: str) -> str:
    """Returns the sorted distinct characters of ``text``; position = token id.

    Example:
        >>> char_vocab("to be or not")
        ' benort'
    """
    return "".join(sorted(set(text)))


def _codes(text: str) -> np.ndarray:
    # UTF-32 gives one fixed-width code point per character, so numpy can
    # translate the whole corpus with one table lookup instead of a Python loop.
    return np.frombuffer(text.encode("utf-32-le"), dtype="<u4")


def encode(text: str, vocab: str) -> np.ndarray:
    """Maps each character to its index in ``vocab``.

    Returns:
        uint8 ids when the vocabulary has at most 256 characters, else int64.

    Raises:
        ValueError: ``text`` holds a character that ``vocab`` lacks.

    Example:
        >>> encode("be", char_vocab("to be or not")).tolist()
        [1, 2]
    """
    if not vocab:
        raise ValueError("encode: vocab must hold at least one character, got ''; "
                         "build it with char_vocab(text)")
    dtype = np.uint8 if len(vocab) <= 256 else np.int64
    codes = _codes(text)
    table = np.full(max(ord(ch) for ch in vocab) + 1, -1, dtype=np.int64)
    table[_codes(vocab)] = np.arange(len(vocab))
    known = codes < table.size
    ids = np.full(codes.shape, -1, dtype=np.int64)
    ids[known] = table[codes[known]]
    missing = np.flatnonzero(ids < 0)
    if missing.size:
        ch = text[int(missing[0])]
        raise ValueError(
            f"encode: every character must be in vocab, but {ch!r} (at index "
            f"{int(missing[0])}, {missing.size} such characters in all) is not; build the "
            "vocabulary from the whole corpus with char_vocab(text)"
        )
    return ids.astype(dtype)


def decode(ids: np.ndarray, vocab: str) -> str:
    """Inverse of ``encode``.

    Example:
        >>> vocab = char_vocab("to be or not")
        >>> decode(encode("not to be", vocab), vocab)
        'not to be'
    """
    return "".join(vocab[int(i)] for i in np.asarray(ids).ravel())


class LMSplits(NamedTuple):
    """Training and validation examples of a character-level corpus.

    Example:
        >>> train, val, vocab = lm_splits("abcdefghij" * 3, seq_len=4, val_fraction=0.5)
        >>> inputs, targets = train[:, :-1], train[:, 1:]  # next-character prediction
        >>> decode(inputs[0], vocab), decode(targets[0], vocab)
        ('abcd', 'bcde')
    """

    train: np.ndarray  # [n_train, seq_len + 1] token ids, from the first part of the text
    val: np.ndarray  # [n_val, seq_len + 1] token ids, from the last part of the text
    vocab: str  # token id -> character


def lm_splits(
    text: str, seq_len: int, val_fraction: float = 0.1, *, vocab: str | None = None
) -> LMSplits:
    """Cuts ``text`` into non-overlapping ``(seq_len + 1)``-character examples.

    The first ``1 - val_fraction`` of the characters give the training rows and
    the rest the validation rows; a remainder shorter than a row is dropped at
    the end of each part. Shuffle the training rows downstream (for instance in
    a shuffle buffer after an echo stage), not here: the order is text order.

    Args:
        text: The corpus.
        seq_len: Characters of context per example; each row has one more, the last target.
        val_fraction: Share of the text, from its end, held out for validation; in (0, 1).
        vocab: Token alphabet; defaults to ``char_vocab(text)`` of the whole corpus.

    Returns:
        ``LMSplits(train, val, vocab)``; the arrays are uint8 for vocabularies of
        up to 256 characters.

    Raises:
        TypeError: ``seq_len`` is not an int.
        ValueError: An argument is out of range, or a part is too short for one row.

    Example:
        >>> splits = lm_splits("abcdefghijklmnopqrst", seq_len=3, val_fraction=0.2)
        >>> splits.train.shape, splits.val.shape, decode(splits.val[0], splits.vocab)
        ((4, 4), (1, 4), 'qrst')
    """
    if isinstance(seq_len, bool) or not isinstance(seq_len, int):
        raise TypeError(f"lm_splits: seq_len must be an int, got {type(seq_len).__name__}")
    if seq_len < 1:
        raise ValueError(f"lm_splits: seq_len must be >= 1, got {seq_len}")
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(
            f"lm_splits: val_fraction must lie strictly between 0 and 1, got {val_fraction}; "
            "use e.g. 0.1 to hold out the last 10% of the text"
        )
    vocab = char_vocab(text) if vocab is None else vocab
    ids = encode(text, vocab)
    cut = round(len(ids) * (1.0 - val_fraction))
    row = seq_len + 1
    parts = []
    for name, part in (("training", ids[:cut]), ("validation", ids[cut:])):
        if len(part) < row:
            raise ValueError(
                f"lm_splits: the {name} part has {len(part)} characters, fewer than one "
                f"example of seq_len + 1 = {row}; use a longer text, a smaller seq_len or "
                "a val_fraction nearer 0.5"
            )
        parts.append(part[: len(part) // row * row].reshape(-1, row))
    return LMSplits(train=parts[0], val=parts[1], vocab=vocab)
