"""Workloads by reference: a built-in name or an import string, and their fingerprints.

``dataecho reproduce --workload pkg.mod:attr`` runs a workload written outside
dataecho: ``attr`` is a :class:`~dataecho.experiments.workloads.Workload`, or a function
called without arguments that returns one, found with :func:`pkgutil.resolve_name`.
Conditions and records carry the reference, not the object, so a trial process
(spawned, not forked) resolves the same workload from it. The result store keeps each
workload's :func:`fingerprint`, and :func:`claim` refuses to resume a store with a
workload that has changed since: its finished trials and the new ones would measure
two different experiments.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import pkgutil
import sys
from typing import Any

from .record import Record, definition
from .store import Store
from .workloads import WORKLOADS, Workload


def is_import(ref: str) -> bool:
    """Whether ``ref`` is an import string (``pkg.mod:attr``) rather than a built-in name.

    Example:
        >>> is_import("fmnist"), is_import("mypkg.work:make")
        (False, True)
    """
    return ":" in ref


@functools.cache
def resolve(ref: str) -> Workload:
    """The workload ``ref`` names: a key of ``WORKLOADS`` or ``MODULE:ATTR``.

    ``ATTR`` may be a Workload or a function called without arguments that returns
    one; either way the result is kept, so a process builds (and loads the data of)
    each workload once. The working directory is importable, as with ``python -m``.

    Raises:
        ImportError: the module cannot be imported; the message names it.
        ValueError: ``ref`` is neither a built-in name nor ``MODULE:ATTR``, or the
            module has no ``ATTR``.
        TypeError: ``ATTR`` is not a Workload and does not return one.

    Example:
        >>> resolve("dataecho.experiments.workloads:DIGITS") is resolve("digits")
        True
    """
    if ref in WORKLOADS:
        return WORKLOADS[ref]
    module, _, attr = ref.partition(":")
    if not (module and attr):
        raise ValueError(
            f"workload must be one of {', '.join(WORKLOADS)} or an import string "
            f"MODULE:ATTR naming a Workload (or a function returning one), got {ref!r}; "
            "pass e.g. mypkg.work:make")
    if "" not in sys.path:
        sys.path.insert(0, "")  # like `python -m`: modules in the working directory
    try:
        found: Any = pkgutil.resolve_name(ref)
    except ImportError as error:
        raise ImportError(_import_failure(ref, module, error), name=module) from error
    except AttributeError as error:
        raise ValueError(f"workload {ref}: module {module} has no attribute {attr} "
                         f"({error}); pass MODULE:ATTR of the Workload, or of a function "
                         "returning one") from error
    if isinstance(found, Workload):
        return found
    if callable(found) and not isinstance(found, type):
        try:
            inspect.signature(found).bind()
        except TypeError:
            raise TypeError(f"workload {ref}: {attr} must take no arguments, as it is called "
                            f"without any, but its signature is {attr}"
                            f"{inspect.signature(found)}; pass a Workload, or a function "
                            "of no arguments that builds one") from None
        except ValueError:  # no signature to read (a builtin): let the call decide
            pass
        made = found()
        if isinstance(made, Workload):
            return made
        raise TypeError(f"workload {ref}: {attr}() must return a Workload, got {made!r} of "
                        f"type {type(made).__name__}; return an instance of a Workload "
                        "subclass (ImageWorkload, TextWorkload or your own)")
    what = f"the class {found.__name__}" if isinstance(found, type) else (
        f"{found!r} of type {type(found).__name__}")
    raise TypeError(f"workload {ref}: {attr} must be a Workload or a function called without "
                    f"arguments that returns one, got {what}; pass {module}:NAME of an "
                    "instance, or of a function that builds one")


def _import_failure(ref: str, module: str, error: ImportError) -> str:
    # error.name is the module that was missing: the one named, one of its parents, or
    # one that the module itself imports (then it exists, but is broken here).
    if error.name and error.name != module and not module.startswith(error.name + "."):
        return (f"workload {ref}: importing module {module} failed: {error} (a module it "
                f"imports); install {error.name} or fix the import in {module}")
    return (f"workload {ref}: cannot import module {module} ({error}); run from the folder "
            "that holds it, or add that folder to PYTHONPATH")


def fingerprint(workload: Workload) -> str:
    """16 hex digits that change with the workload's definition or its own code.

    The definition is what :func:`~dataecho.experiments.record.definition` keeps of its
    fields (prose and ETA estimates aside); the code is the source of each class in its
    type's MRO outside dataecho (a subclass written for it: its ``data()``, ``model()``
    and ``loss()`` decide outcomes as much as its fields do).

    Example:
        >>> import dataclasses
        >>> from dataecho.experiments.workloads import DIGITS
        >>> fingerprint(DIGITS) == fingerprint(dataclasses.replace(DIGITS, target=0.9))
        False
    """
    blob = json.dumps({"definition": _fields(workload), "code": _code(workload)},
                      sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _fields(workload: Workload) -> Any:
    # Through JSON, so a definition compares equal to the one read back from the store.
    return json.loads(json.dumps(definition(workload.config()), sort_keys=True, default=str))


def _code(workload: Workload) -> list[str]:
    sources = []
    for cls in type(workload).__mro__:
        if cls.__module__ == "builtins" or cls.__module__.split(".")[0] == "dataecho":
            continue
        try:
            sources.append(inspect.getsource(cls))
        except (OSError, TypeError):  # defined where no source file is (a REPL)
            sources.append(f"{cls.__module__}.{cls.__qualname__}")
    return sources


def claim(store: Store, ref: str, workload: Workload) -> Record:
    """Records ``workload`` in ``store`` under ``ref``, or checks it against the record.

    Returns the store's record. A store started with a different fingerprint for
    ``ref`` is refused: its trials were run with another workload.

    Raises:
        ValueError: the workload changed since the store was started; the message says
            what changed and how to start afresh.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> from dataecho.experiments.workloads import DIGITS
        >>> store = Store(Path(tempfile.mkdtemp()) / "results.jsonl")
        >>> claim(store, "digits", DIGITS)["fingerprint"] == fingerprint(DIGITS)
        True
    """
    key = "workload-" + hashlib.sha256(ref.encode()).hexdigest()[:16]
    mark = fingerprint(workload)
    record = store.get(key)
    if record is None:
        return store.append({"kind": "workload", "key": key, "workload": ref,
                             "name": workload.name, "fingerprint": mark,
                             "definition": _fields(workload), "code": _code(workload)})
    if record["fingerprint"] != mark:
        raise ValueError(
            f"workload {ref} has changed since {store.path} was started (fingerprint "
            f"{record['fingerprint']} then, {mark} now: {_changes(record, workload)}); its "
            "finished trials and new ones would measure two different workloads. Start a "
            "new store (dataecho reproduce --out NEW_DIR, or --store PATH), or restore the "
            "workload as it was")
    return record


def _changes(record: Record, workload: Workload) -> str:
    then, now = record.get("definition", {}), _fields(workload)
    fields = [f"{k} {then.get(k)!r} -> {now.get(k)!r}" for k in sorted({*then, *now})
              if then.get(k) != now.get(k)]
    if fields:
        return "fields " + "; ".join(fields)
    return "same fields, its code differs"
