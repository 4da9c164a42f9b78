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


def main(argv: list[str]) -> int:
    """Runs ``dataecho demo ARGS``; see :func:`dataecho.demo.command.main`.

    Imported lazily, so ``dataecho.demo.remote`` and ``grid`` work without torch.
    """
    from .command import main as run_demo

    return run_demo(argv)


__all__ = ["main"]
