"""``dataecho demo``: the paper's headline, data echoing on data read over a network.

Fashion-MNIST is written once into WebDataset-style tar shards of PNGs and served by a
throttled HTTP server on loopback. A small CNN trains on it three times, side by side:
without echoing, with echoing at a fixed factor near ``R``, and with adaptive echoing;
``--variant`` chooses where the echo stands (before augmentation, the default, after
it, or whole batches). Run ``dataecho demo --help`` for the options.

Every arm is built from public pieces: ``dataecho.TarShards`` over the served shards
with a decode ``Map``, ``dataecho.torch.EchoDataset`` in the DataLoader workers (fixed
or ``Auto`` factors), and ``dataecho.torch.EchoBatches`` for batch echoing.

Modules: ``remote`` (the simulated object store: shards, index, decode, server, fetch),
``augment``, ``loader`` (each arm's loader), ``model``, ``calibrate``, ``train``,
``data``, ``report`` (table, figure, JSON), ``config`` and ``command`` (the CLI);
``grid`` (the resumable run store of ``benchmarks/wallclock.py``) and ``gridreport``
(its summary, table and figure), both without torch.
"""

from __future__ import annotations

# Import names the demo cannot train without (the demo extra); matplotlib only draws
# the figure, so without it the demo warns and still writes its table and JSON.
REQUIRED = ("torch", "PIL")


def main(argv: list[str]) -> int:
    """Runs ``dataecho demo ARGS``; see :func:`dataecho.demo.command.run`.

    The flags are parsed (``--help`` printed, a bad flag refused) before torch is
    imported, and a missing torch or Pillow raises :class:`dataecho.cli.MissingExtra`,
    naming the extra, before any data is written. ``torch`` is imported lazily, so
    ``dataecho.demo.remote`` and ``grid`` work without it.
    """
    from ..cli import require
    from .config import parse_args

    cfg = parse_args(argv)
    require("demo", "demo", *REQUIRED)
    from .command import execute

    return execute(cfg)


__all__ = ["main"]
