"""Optional dependencies: whether one is installed, and the one line that names its extra.

The core needs numpy only; each integration imports its framework at the top and, when
that framework is absent, fails with one line saying which extra installs it
(``ModuleNotFoundError: dataecho.grain needs grain, which is not installed; pip install
'dataecho[grain]'``), raised ``from None`` so that no second traceback precedes it.

The error keeps ``name`` set to the absent package, so ``pytest.importorskip`` and any
check of ``error.name`` still see what is missing.
"""

from __future__ import annotations

import importlib.util
import sys

#: Import names that differ from the names pip installs (and that a message shows).
DISTRIBUTIONS = {"PIL": "Pillow", "sklearn": "scikit-learn"}


def installed(name: str) -> bool:
    """Whether the module ``name`` (an import name) can be imported, without importing it.

    Example:
        >>> installed("json"), installed("no_such_module_here")
        (True, False)
    """
    if name in sys.modules:
        return sys.modules[name] is not None
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a finder that refuses it, a broken parent
        return False


def needs(error: ModuleNotFoundError, module: str, package: str, extra: str,
          what: str | None = None, also: str = "") -> ModuleNotFoundError:
    """The error for ``module`` to raise when importing ``package`` failed with ``error``.

    Use it where the integration imports its framework::

        try:
            import grain
        except ModuleNotFoundError as error:
            raise needs(error, "dataecho.grain", "grain", "grain") from None

    Only the absence of ``package`` itself becomes the one-line message: when ``error``
    names another module (the package is installed, but something it imports is not),
    ``error`` is returned as it is, its own traceback kept, since no extra of ours
    would fix it.

    Args:
        error: what the import raised.
        module: the dataecho module that needs ``package``, e.g. ``"dataecho.grain"``.
        package: the top-level import name, e.g. ``"tensorflow"``.
        extra: the pip extra that installs it, e.g. ``"tf"``.
        what: the package as the message names it (default: its pip name).
        also: more advice after the pip command, e.g. another way to install it.

    Returns:
        A ``ModuleNotFoundError`` naming ``module``, the package and the extra, with
        ``name=package``; or ``error`` itself.

    Example:
        >>> print(needs(ModuleNotFoundError("No module named 'tensorflow'",
        ...                                 name="tensorflow"), "dataecho.tf", "tensorflow", "tf"))
        dataecho.tf needs tensorflow, which is not installed; pip install 'dataecho[tf]'
    """
    if (error.name or "").partition(".")[0] != package:
        return error
    shown = what or DISTRIBUTIONS.get(package, package)
    tail = f" {also}" if also else ""
    return ModuleNotFoundError(f"{module} needs {shown}, which is not installed; pip install "
                               f"'dataecho[{extra}]'{tail}", name=package)
