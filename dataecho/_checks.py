"""Argument checks shared by the stages.

Every message names the parameter, the rule, the value received and the fix, because
a user who mistypes a factor deep inside a training script should not have to read
our source to learn what we wanted.
"""

from __future__ import annotations

import argparse
import math
import numbers
import operator
import reprlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, TypeVar

import numpy as np

T = TypeVar("T")

_MAX_SEED = 2**63 - 1
_STATE_FIX = "pass the dict saved from this one's checkpoint"  # a bad state's usual remedy


def check_factor(factor: object, name: str = "factor") -> float:
    """Returns ``factor`` as a float after checking it is a finite real >= 1."""
    if isinstance(factor, bool) or not isinstance(factor, numbers.Real):
        raise TypeError(
            f"{name} must be a real number >= 1 (e.g. 2 or 2.5), got {factor!r} of type "
            f"{type(factor).__name__}; pass a number such as {name}=2.0"
        )
    value = float(factor)
    if not math.isfinite(value):
        raise ValueError(
            f"{name} must be finite and >= 1, got {value!r}; pass a number such as {name}=2.0"
        )
    if value < 1.0:
        raise ValueError(
            f"{name} must be >= 1 (each item is used at least once; 1 disables echoing), "
            f"got {value!r}; pass {name}=1 for no echoing or a larger value to echo"
        )
    return value


def check_positive_int(value: object, name: str, *, minimum: int = 1) -> int:
    """Returns ``value`` after checking it is an int >= ``minimum`` (bools rejected)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(
            f"{name} must be an int >= {minimum}, got {value!r} of type "
            f"{type(value).__name__}; pass a whole number such as {name}={max(minimum, 1)}"
        )
    if int(value) < minimum:
        raise ValueError(
            f"{name} must be an int >= {minimum}, got {int(value)}; pass {name}={minimum} "
            "or more"
        )
    return int(value)


def check_bool(value: object, name: str) -> bool:
    """Returns ``value`` as a bool after checking it is one (``numpy.bool_`` too).

    A string such as ``'False'`` is rejected: ``bool('False')`` is True.

    Example:
        >>> check_bool(False, "shuffle")
        False
    """
    if not isinstance(value, bool | np.bool_):
        raise TypeError(
            f"{name} must be True or False, got {reprlib.repr(value)} of type "
            f"{type(value).__name__}; pass {name}=True or {name}=False"
        )
    return bool(value)


def check_callable(value: object, name: str, usage: str, fix: str = "pass a function",
                   *, optional: bool = True) -> Any:
    """Returns ``value`` after checking it is callable (or None, when ``optional``).

    Args:
        value: the argument.
        name: the parameter's name.
        usage: how the stage calls it, e.g. ``"collate(list_of_examples)"``.
        fix: what to pass instead.
        optional: whether None (the parameter's default behaviour) is accepted.

    Example:
        >>> try:
        ...     check_callable("stack", "fn", "fn(items)")
        ... except TypeError as e:
        ...     print(e)
        fn must be callable as fn(items), or None, got 'stack' of type str; pass a function
    """
    if (value is None and optional) or callable(value):
        return value
    raise TypeError(
        f"{name} must be callable as {usage}{', or None' if optional else ''}, got "
        f"{reprlib.repr(value)} of type {type(value).__name__}; {fix}"
    )


def check_augment(augment: object, name: str = "augment") -> Any:
    """Returns ``augment`` after checking it is None or a function of an example."""
    return check_callable(augment, name, f"{name}(example) or {name}(example, rng)",
                          "pass a function, or None for no augmentation")


def check_size(size: object, name: str = "size") -> Any:
    """Returns ``size`` after checking it is None or callable as ``size(item) -> int``."""
    return check_callable(size, name, f"{name}(item) -> examples in the item",
                          "pass a function such as len, or None for the default count "
                          "(1 per item, or the batch size after a Batch stage)")


def check_count(value: object, item: object, name: str = "size") -> int:
    """Returns what ``size(item)`` returned after checking it is a count of examples.

    Called on every item a ``size=`` function measures: a negative or fractional count
    would corrupt the fresh and emitted totals (-20 fresh examples) without an error.

    Example:
        >>> try:
        ...     check_count(-2, [1, 2])
        ... except ValueError as e:
        ...     print(str(e)[:56])
        size(item) must return a count of examples, an int >= 0,
    """
    if type(value) is int and value >= 0:  # the common answer, on the per-batch path
        return value
    try:
        count = None if isinstance(value, bool | np.bool_) else operator.index(
            value)  # type: ignore[arg-type]
    except TypeError:
        count = None
    if count is None or count < 0:
        raise (TypeError if count is None else ValueError)(
            f"{name}(item) must return a count of examples, an int >= 0, but returned "
            f"{reprlib.repr(value)} of type {type(value).__name__} for the item "
            f"{reprlib.repr(item)}; fix {name}= (e.g. size=len, or lambda b: b.shape[0])")
    return int(count)


def check_seed(seed: object, name: str = "seed") -> int:
    """Returns ``seed`` after checking it is an int in ``[0, 2**63)``."""
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise TypeError(
            f"{name} must be an int in [0, 2**63), got {seed!r} of type "
            f"{type(seed).__name__}; pass e.g. {name}=0"
        )
    if not 0 <= int(seed) <= _MAX_SEED:
        raise ValueError(
            f"{name} must be an int in [0, 2**63), got {int(seed)}; pass e.g. {name}=0"
        )
    return int(seed)


def check_iterable(upstream: object, name: str = "upstream") -> Iterable[Any]:
    """Returns ``upstream`` after checking it can be iterated."""
    if not isinstance(upstream, Iterable):
        raise TypeError(
            f"{name} must be iterable (a Stage, a list, a DataLoader, a generator...), "
            f"got {type(upstream).__name__}; wrap a single item in a list, or pass the "
            "data set itself"
        )
    return upstream


def check_timeout(timeout: object, name: str = "timeout") -> float | None:
    """Returns ``timeout`` as float seconds (numpy numbers too) after checking it is > 0.

    None (wait forever) is returned as it is.

    Example:
        >>> check_timeout(120), check_timeout(np.float32(0.5)), check_timeout(None)
        (120.0, 0.5, None)
    """
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real):
        raise TypeError(
            f"{name} must be a number of seconds > 0 or None, got {timeout!r} of type "
            f"{type(timeout).__name__}; pass e.g. {name}=120, or {name}=None to wait for "
            "the upstream forever")
    if not float(timeout) > 0:
        raise ValueError(
            f"{name} must be a number of seconds > 0 or None, got {timeout!r}; pass e.g. "
            f"{name}=120, or {name}=None to wait for the upstream forever")
    return float(timeout)


def check_reiterable(value: object, name: str, why: str, consequence: str) -> Iterable[Any]:
    """Returns ``value`` after checking it can be iterated again (not a one-shot iterator).

    Args:
        value: the iterable to check; never iterated here (iterating a DataLoader would
            start its workers).
        name: the parameter's name.
        why: why it is iterated more than once, e.g. "iterated once per epoch".
        consequence: what a one-shot iterator would cause, e.g. "later epochs would be
            empty".

    Example:
        >>> try:
        ...     check_reiterable(iter([1]), "loader", "iterated once per epoch", "...")
        ... except TypeError as e:
        ...     print(str(e)[:57])
        loader must be re-iterable (iterated once per epoch), got
    """
    value = check_iterable(value, name)
    if isinstance(value, Iterator):
        raise TypeError(
            f"{name} must be re-iterable ({why}), got a one-shot iterator "
            f"({type(value).__name__}) whose {consequence}; pass the DataLoader (or list) "
            "itself rather than iter(...) or a generator, or an object whose __iter__ "
            "returns a fresh generator")
    return value


def state_value(state: Mapping[str, Any], key: str, owner: str) -> Any:
    """Returns ``state[key]``, or raises ``ValueError`` naming ``owner`` when it is missing.

    Example:
        >>> try:
        ...     state_value({"stage": "Echo"}, "left", "Echo")
        ... except ValueError as e:
        ...     print(str(e)[:44])
        state of Echo lacks the key 'left' that Echo
    """
    if key not in state:
        raise ValueError(
            f"state of {owner} lacks the key {key!r} that {owner}.state_dict() writes (it "
            f"has {', '.join(map(repr, state)) or 'none'}): the checkpoint is damaged or "
            "was saved by another object; pass the dict saved from this one's checkpoint")
    return state[key]


def state_int(state: Mapping[str, Any], key: str, owner: str, *, minimum: int = 0,
              maximum: int | None = None, rule: str = "", fix: str = _STATE_FIX) -> int:
    """Returns ``state[key]`` after checking it is an int in ``[minimum, maximum]``.

    The one check every stage's ``load_state_dict`` uses for its counters, so a damaged
    checkpoint is refused with the stage, the key, the value and the rule, instead of
    replaying items or yielding ``None`` ones. Integral floats (``3.0``, from a JSON
    writer that turns ints into floats) are accepted; strings, bools and ``3.5`` are not.

    Args:
        state: the state dict being loaded.
        key: the counter's key in it.
        owner: the stage (or object) whose state it is, for the message.
        minimum: the smallest valid value.
        maximum: the largest valid value, or None for no bound.
        rule: why the bounds are what they are, for the message.
        fix: what to do instead, for the message: where the state comes from (a
            Trainer's checkpoint, say) when it is not a dict the user passes.

    Example:
        >>> try:
        ...     state_int({"index": -3}, "index", "Source", maximum=9)
        ... except ValueError as e:
        ...     print(str(e)[:51])
        state of Source has index=-3, but it must be an int
    """
    value = state_value(state, key, owner)
    integral = (isinstance(value, numbers.Integral)
                or (isinstance(value, float) and value.is_integer()))
    number = int(value) if integral and not isinstance(value, bool | np.bool_) else None
    if number is not None and number >= minimum and (maximum is None or number <= maximum):
        return number
    bounds = f"in [{minimum}, {maximum}]" if maximum is not None else f">= {minimum}"
    why = f" ({rule})" if rule else ""
    if number is None:
        raise TypeError(
            f"state of {owner} has {key}={reprlib.repr(value)} of type "
            f"{type(value).__name__}, but it must be an int {bounds}{why}: the checkpoint "
            f"is damaged; {fix}")
    raise ValueError(
        f"state of {owner} has {key}={number}, but it must be an int {bounds}{why}: "
        f"the checkpoint is damaged or was taken from another pipeline; {fix}")


def state_mapping(state: Mapping[str, Any], key: str, owner: str) -> Mapping[str, Any]:
    """Returns ``state[key]`` after checking it is a dict (an upstream's state).

    Example:
        >>> state_mapping({"upstream": {}}, "upstream", "Echo")
        {}
    """
    value = state_value(state, key, owner)
    if not isinstance(value, Mapping):
        raise TypeError(
            f"state of {owner} has {key}={reprlib.repr(value)} of type "
            f"{type(value).__name__}, but it must be a dict (the upstream's state): the "
            "checkpoint is damaged; pass the dict saved from this one's checkpoint")
    return value


def state_bool(state: Mapping[str, Any], key: str, owner: str) -> bool:
    """Returns ``state[key]`` after checking it is a bool (a flag of a checkpoint).

    Example:
        >>> state_bool({"ended": True}, "ended", "Counted")
        True
    """
    value = state_value(state, key, owner)
    if not isinstance(value, bool | np.bool_):
        raise TypeError(
            f"state of {owner} has {key}={reprlib.repr(value)} of type "
            f"{type(value).__name__}, but it must be True or False: the checkpoint is "
            "damaged; pass the dict saved from this one's checkpoint")
    return bool(value)


def check_shard(shard_index: object, num_shards: object) -> tuple[int, int]:
    """Returns ``(shard_index, num_shards)`` after checking ``0 <= shard_index < num_shards``.

    Example:
        >>> check_shard(1, 4)
        (1, 4)
    """
    count = check_positive_int(num_shards, "num_shards")
    index = check_positive_int(shard_index, "shard_index", minimum=0)
    if index >= count:
        raise ValueError(
            f"shard_index must be in [0, num_shards={count}), got {index}; pass "
            "rank * num_workers + worker_id")
    return index, count


def check_epochs(num_epochs: object, epoch: object) -> tuple[int | None, int]:
    """Returns ``(num_epochs, epoch)`` of a reader: epochs to read (None: forever), first one.

    Example:
        >>> check_epochs(None, 3)
        (None, 3)
    """
    count = None if num_epochs is None else check_positive_int(num_epochs, "num_epochs")
    return count, check_positive_int(epoch, "epoch", minimum=0)


def flag(check: Callable[[Any, str], T], name: str,
         parse: Callable[[str], Any] = float) -> Callable[[str], T]:
    """An argparse ``type=`` that runs one of these checks on a command-line flag.

    The text is parsed with ``parse`` (argparse's own "invalid float value" when it
    cannot be), then checked as ``check(value, name)``; a value the check refuses is a
    usage error (exit status 2) with the check's message after argparse's "argument
    NAME:", before the command does anything.

    Args:
        check: a check of this module, e.g. :func:`check_factor`.
        name: the flag, e.g. ``"--factor"``.
        parse: turns the flag's text into a value, e.g. ``int``.

    Example:
        >>> parser = argparse.ArgumentParser(prog="tour", exit_on_error=False)
        >>> _ = parser.add_argument("--factor", type=flag(check_factor, "--factor"))
        >>> parser.parse_args(["--factor", "2.5"]).factor
        2.5
        >>> try:
        ...     parser.parse_args(["--factor", "0"])
        ... except argparse.ArgumentError as e:
        ...     print(str(e)[:45])
        argument --factor: must be >= 1 (each item is
    """
    def convert(text: str) -> T:
        value = parse(text)  # a ValueError here: argparse says "invalid <parse> value"
        try:
            return check(value, name)
        except (TypeError, ValueError) as error:  # argparse puts the flag's name first
            raise argparse.ArgumentTypeError(str(error).removeprefix(f"{name} ")) from None

    convert.__name__ = getattr(parse, "__name__", "convert")  # for argparse's message
    return convert
