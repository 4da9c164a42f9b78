"""Example echoing inside a Ray Train job: a TorchTrainer with 2 workers on Fashion-MNIST.

Ray Data decodes each PNG once, ``echo_rows`` repeats the decoded row twice before the
augmentation (each copy gets its own shift and flip), and each training worker reads
its shard with ``ray.train.get_dataset_shard``. Each rank counts its fresh rows with
``CountCopies``; an all-reduce sums them. The first run stops after one epoch; a second
``TorchTrainer`` with the same run name resumes from its Ray Train checkpoint (model,
optimizer, epoch, each rank's ``CountCopies`` state) and trains the second.
Everything runs on a local Ray cluster whose node address is 127.0.0.1, so its processes
reach each other over loopback; nothing is read from the network.
Run: python examples/ray_train_echo.py (``--examples 60000`` for the whole training set).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import tempfile
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import ray
import ray.train
import torch
import torch.distributed as dist
from PIL import Image
from ray.train import Checkpoint, RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer, prepare_model

from dataecho import EchoStats
from dataecho.datasets import load_fashion_mnist
from dataecho.ray_data import COPY_COLUMN, CountCopies, echo_rows


@dataclass(frozen=True)
class Config:
    examples: int = 2048  # fresh training examples (the first n of the training split)
    epochs: int = 2  # passes over them
    stop_after: int = 1  # epochs the first run trains; a second run resumes for the rest
    factor: int = 2  # example-echoing factor: copies of each decoded row
    batch_size: int = 64  # examples per step on each rank
    workers: int = 2  # Ray Train workers (DDP ranks, gloo on the CPU)
    cpus: int = 4  # logical CPUs of the local Ray cluster: 1 per worker, the rest for Data
    shuffle_buffer: int = 512  # rows in each rank's local shuffle buffer (spreads copies)
    lr: float = 0.05  # SGD learning rate
    seed: int = 0  # model init, augmentation and shuffle seeds


def encode(images: np.ndarray) -> list[bytes]:
    """The stored form: one PNG per image, as an image bucket holds them."""
    out = []
    for image in images:
        buffer = io.BytesIO()
        Image.fromarray(image).save(buffer, format="PNG")
        out.append(buffer.getvalue())
    return out


def decode(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    # The expensive, once-per-fresh-row work echoing saves: PNG decode to floats.
    images = np.stack([np.asarray(Image.open(io.BytesIO(png))) for png in batch["png"]])
    return {"id": batch["id"], "image": images.astype(np.float32) / 255.0,
            "label": batch["label"]}


class Augment:
    """Random shift (up to 2 pixels) and horizontal flip, keyed by (seed, epoch, id, copy).

    The copy number is part of the key, so the two copies of a row differ, and the
    same run gives the same augmentations on any cluster layout.
    """

    def __init__(self, seed: int, epoch: int) -> None:
        self.seed, self.epoch = seed, epoch

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        images = batch["image"].copy()
        for i, (row, copy) in enumerate(zip(batch["id"], batch[COPY_COLUMN], strict=True)):
            rng = np.random.default_rng((self.seed, self.epoch, int(row), int(copy)))
            images[i] = np.roll(images[i], rng.integers(-2, 3, size=2), axis=(0, 1))
            if rng.random() < 0.5:
                images[i] = images[i][:, ::-1]
        return {**batch, "image": images.reshape(len(images), -1)}


def pipeline(source: ray.data.Dataset, epoch: int, config: Config) -> ray.data.Dataset:
    ds = source.map_batches(decode, batch_format="numpy", batch_size=256)
    ds = echo_rows(ds, config.factor, key="id", seed=config.seed, epoch=epoch)
    return ds.map_batches(Augment(config.seed, epoch), batch_format="numpy")


def source(config: Config) -> ray.data.Dataset:
    images, labels = load_fashion_mnist("train")
    n = config.examples
    table = pa.table({"id": np.arange(n), "png": pa.array(encode(images[:n]), pa.binary()),
                      "label": labels[:n].astype(np.int64)})
    # Eight blocks, so decoding runs as several Ray Data tasks.
    step = -(-n // 8)
    return ray.data.from_arrow([table.slice(i, step) for i in range(0, n, step)])


def model() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(784, 128), torch.nn.ReLU(),
                               torch.nn.Linear(128, 10))


def train_loop(raw: dict[str, Any]) -> None:
    """Runs on each Ray Train worker: one DDP rank, epochs up to ``raw["until"]``."""
    config = Config(**{k: v for k, v in raw.items() if k != "until"})
    rank, world = ray.train.get_context().get_world_rank(), config.workers
    torch.manual_seed(config.seed)  # the same initial weights on every rank
    net = model()
    ddp = prepare_model(net)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=config.lr, momentum=0.9)
    start, total, resumed = 0, EchoStats(0, 0, 0, 0, 0), None
    checkpoint = ray.train.get_checkpoint()  # the latest one of this run name, if any
    if checkpoint is not None:
        start, total, resumed = restore(checkpoint, net, optimizer, rank)
    for epoch in range(start, raw["until"]):
        shard = ray.train.get_dataset_shard(f"epoch{epoch}")
        batches = CountCopies(shard.iter_torch_batches(
            batch_size=config.batch_size, local_shuffle_buffer_size=config.shuffle_buffer,
            local_shuffle_seed=config.seed * 10_000 + epoch * 100 + rank))
        loss = torch.zeros(())
        for batch in batches:
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(ddp(batch["image"]), batch["label"])
            loss.backward()  # DDP all-reduces the gradients: both ranks step together
            optimizer.step()
        total = total + batches.stats()
        # Every rank's counts, gathered: the sum is the job's fresh count.
        ranks: list[Any] = [None] * world
        dist.all_gather_object(ranks, {"total": asdict(total),
                                       "steps": batches.stats().batches,
                                       "count_copies": batches.state_dict()})
        losses = [float(loss)] * world
        dist.all_gather_object(losses, float(loss))
        summed = sum((EchoStats(**r["total"]) for r in ranks), EchoStats(0, 0, 0, 0, 0))
        metrics = {"epoch": epoch, "loss": sum(losses) / world, "resumed_fresh": resumed,
                   "steps": [r["steps"] for r in ranks], "total": asdict(summed)}
        save(net, optimizer, {"epoch": epoch, "ranks": ranks}, metrics, rank)


def restore(checkpoint: Checkpoint, net: torch.nn.Module, optimizer: torch.optim.Optimizer,
            rank: int) -> tuple[int, EchoStats, int]:
    """Loads weights and this rank's counts: (next epoch, counts so far, job's fresh)."""
    with checkpoint.as_directory() as folder:
        weights = torch.load(Path(folder) / "model.pt", weights_only=True)
        state = json.loads((Path(folder) / "counts.json").read_text())
    net.load_state_dict(weights["model"])
    optimizer.load_state_dict(weights["optimizer"])
    fresh = sum(r["total"]["fresh_examples"] for r in state["ranks"])
    return state["epoch"] + 1, EchoStats(**state["ranks"][rank]["total"]), fresh


def save(net: torch.nn.Module, optimizer: torch.optim.Optimizer, counts: dict[str, Any],
         metrics: dict[str, Any], rank: int) -> None:
    """Reports the epoch; rank 0 adds one checkpoint holding every rank's counts."""
    with tempfile.TemporaryDirectory() as folder:
        saved = None
        if rank == 0:
            torch.save({"model": net.state_dict(), "optimizer": optimizer.state_dict()},
                       Path(folder) / "model.pt")
            (Path(folder) / "counts.json").write_text(json.dumps(counts))
            saved = Checkpoint.from_directory(folder)
        ray.train.report(metrics, checkpoint=saved)  # a barrier: every rank calls it


def fit(config: Config, storage: str, until: int) -> ray.train.Result:
    rows = source(config)
    trainer = TorchTrainer(
        train_loop, train_loop_config={**asdict(config), "until": until},
        scaling_config=ScalingConfig(num_workers=config.workers, use_gpu=False),
        # One dataset per epoch: each epoch's copies get their own augmentation (and,
        # with a fractional factor, echo_rows(epoch=...) puts the extra copies elsewhere).
        datasets={f"epoch{e}": pipeline(rows, e, config) for e in range(config.epochs)},
        # The same name and storage: a second fit() resumes from the latest checkpoint.
        run_config=RunConfig(name="ray_train_echo", storage_path=storage))
    return trainer.fit()


def show(metrics: dict[str, Any], workers: int) -> EchoStats:
    stats = EchoStats(**metrics["total"])
    steps = metrics["steps"]
    print(f"epoch {metrics['epoch']}: {', '.join(map(str, steps))} steps on the {workers} "
          f"ranks; loss {metrics['loss']:.3f}; {stats}")
    return stats


def accuracy(checkpoint: Checkpoint) -> float:
    with checkpoint.as_directory() as folder:
        weights = torch.load(Path(folder) / "model.pt", weights_only=True)
    net = model()
    net.load_state_dict(weights["model"])
    images, labels = load_fashion_mnist("test")
    with torch.no_grad():
        logits = net(torch.tensor(images.reshape(len(images), -1), dtype=torch.float32) / 255)
    return float((logits.argmax(1).numpy() == labels).mean())


def main(config: Config) -> None:
    rows = config.examples * config.factor
    if rows % config.workers:
        # streaming_split(equal=True) would drop the remainder, which could be fresh rows.
        raise ValueError(
            f"examples * factor ({rows:,}) must divide among workers={config.workers}, so "
            "every rank reads as many rows and takes as many steps; pass another --examples")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray.init(num_cpus=config.cpus, include_dashboard=False, _node_ip_address="127.0.0.1",
             log_to_driver=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    try:
        with tempfile.TemporaryDirectory() as storage:
            first = fit(config, storage, until=config.stop_after)
            show(first.metrics, config.workers)
            second = fit(config, storage, until=config.epochs)  # resumes from the checkpoint
            print(f"resumed from the epoch {first.metrics['epoch']} checkpoint: "
                  f"fresh {second.metrics['resumed_fresh']:,} examples before it")
            stats = show(second.metrics, config.workers)
            print(f"{config.epochs} epochs on {config.workers} ranks: fresh "
                  f"{stats.fresh_examples:,} examples = {config.examples:,} x "
                  f"{config.epochs} epochs, emitted {stats.emitted_examples:,}; "
                  f"test accuracy {accuracy(second.checkpoint):.3f}")
    finally:
        ray.shutdown()


def parse() -> Config:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for field in fields(Config):
        parser.add_argument(f"--{field.name.replace('_', '-')}", type=type(field.default),
                            default=field.default)
    return Config(**vars(parser.parse_args()))


if __name__ == "__main__":
    main(parse())
