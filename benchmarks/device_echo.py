"""DeviceEcho on an accelerator: the suite, a race test, flat memory, and throughput at R 4.

Usage: python benchmarks/device_echo.py [--device auto|cuda|cpu] [--steps 1000]
                                        [--train-steps 60] [--trials 2] [--ratio 4]

Four checks, on CUDA when there is a GPU (``--device auto``), else on the CPU with a
CPU-sized model, which the report says:

- **suite**: ``tests/test_torch_device.py`` with ``DATAECHO_TEST_DEVICE`` set to the
  device, so every test of the CPU suite runs through the streams and events;
- **race**: ``window=2``, a slow augmentation and a step that writes its input in place,
  whose outputs must equal bit for bit those of a reference that synchronises the
  device after every copy, event and augmentation;
- **memory**: ``torch.cuda.max_memory_allocated()`` after 20 steps and after ``--steps``
  (flat: the ring is preallocated, nothing grows);
- **throughput**: a loader that sleeps R times the model's step per batch (one
  DataLoader worker, pinned), a small ResNet on synthetic images (224x224, batch 64 on
  CUDA; 64x64, batch 16 on the CPU); steps per second of a plain loop (the baseline:
  the loader, the copy, the same augmentation on the device), DeviceEcho at e = 1, 2, 4
  and EchoDataset at e = 4 on the CPU side (flip in the loader's worker, before the
  copy), each ``--trials`` times alternating, medians and ratios against the baseline
  of the same run.

Writes benchmarks/results/device_echo.json and .md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

import dataecho.torch.device as device_module
from dataecho import __version__
from dataecho.experiments.text import md_table
from dataecho.torch import DeviceEcho, EchoDataset
from dataecho.torch.ordering import CudaOrdering

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return f"CUDA: {torch.cuda.get_device_name(device)}"
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        model = next(line.split(":", 1)[1].strip() for line in lines
                     if line.startswith("model name"))
    except (OSError, StopIteration):
        model = platform.processor() or platform.machine()
    return f"CPU: {model}, {os.cpu_count()} cores (no CUDA device: a CPU-sized model)"


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# The suite.

def suite(device: torch.device) -> dict[str, Any]:
    env = {**os.environ, "DATAECHO_TEST_DEVICE": device.type, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "tests/test_torch_device.py"], cwd=ROOT, env=env, text=True,
                          capture_output=True, timeout=600)
    lines = done.stdout.strip().splitlines()
    return {"returncode": done.returncode, "summary": lines[-1],
            "failed": [line for line in lines if line.startswith("FAILED")]}


# The race test.

class Synchronised(CudaOrdering):
    """The reference: the device finishes everything before and after every operation."""

    def copy(self, work: Callable[[], None], after: Any, resident: bool = False) -> Any:
        torch.cuda.synchronize(self.device)
        ready = super().copy(work, after, resident)
        torch.cuda.synchronize(self.device)
        return ready

    def free(self) -> Any:
        torch.cuda.synchronize(self.device)
        return super().free()

    def wait(self, ready: Any) -> None:
        torch.cuda.synchronize(self.device)
        super().wait(ready)


def slow_augment(batch: Any, generator: torch.Generator) -> Any:
    x, y = batch
    if x.is_cuda:
        torch.cuda._sleep(2_000_000)  # ~1 ms of the GPU: gathers and copies queue up behind
    x = x.float()
    for _ in range(8):
        x = x * 0.5 + torch.rand(x.shape, device=x.device, generator=generator)
    return x, y


def race_run(device: torch.device, reference: bool) -> list[torch.Tensor]:
    pin = device.type == "cuda"
    batches = [(torch.randint(0, 256, (32, 3, 32, 32), dtype=torch.uint8,
                              generator=torch.Generator().manual_seed(k)),
                torch.arange(32) + 32 * k) for k in range(12)]
    if pin:
        batches = [(x.pin_memory(), y.pin_memory()) for x, y in batches]
    patched = device_module.ordering_for
    if reference and pin:  # the CPU has no streams: its reference is the same code
        device_module.ordering_for = Synchronised  # type: ignore[assignment]
    try:
        echo = DeviceEcho(batches, augment=slow_augment, factor=3, device=device, window=2,
                          seed=0)
        out = []
        for x, _ in echo:
            out.append(x.clone())
            x.mul_(0)  # an in-place step on the input
            if reference:
                sync(device)
        sync(device)
        return [t.cpu() for t in out]
    finally:
        device_module.ordering_for = patched


def race(device: torch.device) -> dict[str, Any]:
    fast, slow = race_run(device, False), race_run(device, True)
    equal = len(fast) == len(slow) and all(torch.equal(a, b) for a, b in zip(fast, slow,
                                                                              strict=True))
    return {"steps": len(fast), "equal_to_synchronised_reference": equal}


# Memory over many steps.

def memory(device: torch.device, steps: int) -> dict[str, Any]:
    batches = [(torch.randint(0, 256, (64, 3, 32, 32), dtype=torch.uint8),
                torch.arange(64)) for _ in range(6)]
    if device.type == "cuda":
        batches = [(x.pin_memory(), y.pin_memory()) for x, y in batches]

    def flip(batch: Any, generator: torch.Generator) -> Any:
        x, y = batch
        mask = torch.rand(len(x), device=x.device, generator=generator) < 0.5
        return torch.where(mask[:, None, None, None], x.flip(-1), x).float(), y

    echo = DeviceEcho(batches, augment=flip, factor=2.5, device=device, window=4, seed=0)
    taken, early = 0, None
    while taken < steps:
        for x, _ in echo:
            x.sum()
            taken += 1
            if taken == 20 and device.type == "cuda":
                sync(device)
                early = torch.cuda.max_memory_allocated(device)
            if taken == steps:
                break
    sync(device)
    late = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
    return {"steps": taken, "ring_bytes": echo.stats().device_bytes,
            "max_allocated_after_20": early, "max_allocated_at_end": late,
            "flat": None if late is None else late == early}


# Throughput at R about 4.

class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.a = nn.Sequential(nn.Conv2d(width, width, 3, padding=1, bias=False),
                               nn.BatchNorm2d(width), nn.ReLU(),
                               nn.Conv2d(width, width, 3, padding=1, bias=False),
                               nn.BatchNorm2d(width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x + self.a(x))


def resnet(width: int) -> nn.Module:
    """A small ResNet: a strided stem, two residual stages, a linear head."""
    return nn.Sequential(nn.Conv2d(3, width, 7, stride=4, padding=3, bias=False),
                         nn.BatchNorm2d(width), nn.ReLU(), Block(width),
                         nn.Conv2d(width, 2 * width, 3, stride=2, padding=1), Block(2 * width),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2 * width, 10))


class SleepingBatches(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Decoded batches that take ``delay`` seconds each to read (batch_size=None)."""

    def __init__(self, n: int, batch: int, size: int, delay: float) -> None:
        self.n, self.batch, self.size, self.delay = n, batch, size, delay

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        time.sleep(self.delay)
        g = torch.Generator().manual_seed(k)
        return (torch.randint(0, 256, (self.batch, 3, self.size, self.size),
                              dtype=torch.uint8, generator=g), torch.randint(0, 10, (self.batch,)))


class SleepingExamples(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """The same data an example at a time, each taking ``delay / batch`` seconds."""

    def __init__(self, batches: SleepingBatches) -> None:
        self.batches = batches

    def __len__(self) -> int:
        return self.batches.n * self.batches.batch

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        b = self.batches
        time.sleep(b.delay / b.batch)
        g = torch.Generator().manual_seed(i)
        return (torch.randint(0, 256, (3, b.size, b.size), dtype=torch.uint8, generator=g),
                torch.randint(0, 10, ()))


def device_flip(batch: Any, generator: torch.Generator) -> Any:
    x, y = batch[0], batch[1]
    mask = torch.rand(len(x), device=x.device, generator=generator) < 0.5
    return torch.where(mask[:, None, None, None], x.flip(-1), x).float() / 255, y


def cpu_flip(example: Any, rng: Any) -> Any:
    x, y = example
    return (x.flip(-1) if rng.random() < 0.5 else x), y


class Trainer:
    def __init__(self, device: torch.device, width: int) -> None:
        self.device = device
        self.model = resnet(width).to(device)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)

    def step(self, x: torch.Tensor, y: torch.Tensor) -> None:
        loss = nn.functional.cross_entropy(self.model(x), y)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()

    def time_step(self, batch: int, size: int, n: int = 20) -> float:
        """The median of ``n`` steps' times (a shared machine's load makes the mean jump)."""
        x = torch.rand(batch, 3, size, size, device=self.device)
        y = torch.randint(0, 10, (batch,), device=self.device)
        for _ in range(3):
            self.step(x, y)
        times = []
        for _ in range(n):
            sync(self.device)
            t0 = time.perf_counter()
            self.step(x, y)
            sync(self.device)
            times.append(time.perf_counter() - t0)
        return statistics.median(times)


def steps_per_s(trainer: Trainer, batches: Iterable[Any], steps: int,
                prepare: Callable[[Any], tuple[torch.Tensor, torch.Tensor]]) -> float:
    device, taken = trainer.device, 0
    it = iter(batches)
    x, y = prepare(next(it))  # the first batch: loader start-up is not timed
    trainer.step(x, y)
    sync(device)
    t0 = time.perf_counter()
    for batch in it:
        x, y = prepare(batch)
        trainer.step(x, y)
        taken += 1
        if taken == steps:
            break
    sync(device)
    return taken / (time.perf_counter() - t0)


def throughput(device: torch.device, ratio: float, steps: int, trials: int) -> dict[str, Any]:
    cuda = device.type == "cuda"
    batch, size, width = (64, 224, 32) if cuda else (16, 64, 8)
    trainer = Trainer(device, width)
    t_step = trainer.time_step(batch, size)
    delay = ratio * t_step
    fresh = steps + 8  # batches the loader holds: enough for e = 1
    data = SleepingBatches(fresh, batch, size, delay)

    def loader() -> DataLoader[Any]:
        return DataLoader(data, batch_size=None, num_workers=1, pin_memory=cuda,
                          persistent_workers=False)

    def to_device(batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = batch[0].to(device, non_blocking=True), batch[1].to(device, non_blocking=True)
        return x, y

    gen = torch.Generator(device=device).manual_seed(0)
    variants: dict[str, Callable[[], float]] = {
        "baseline: loader, copy, flip on the device": lambda: steps_per_s(
            trainer, loader(), steps, lambda b: device_flip(to_device(b), gen))}
    for e in (1, 2, 4):
        variants[f"DeviceEcho e={e}"] = lambda e=e: steps_per_s(
            trainer, DeviceEcho(loader(), augment=device_flip, factor=e, device=device,
                                window=8, seed=0), steps, lambda b: b)
    examples = SleepingExamples(data)
    variants["EchoDataset e=4 (flip in the worker, before the copy)"] = lambda: steps_per_s(
        trainer, DataLoader(EchoDataset(examples, augment=cpu_flip, factor=4, seed=0,
                                        buffer_size=4 * batch),
                            batch_size=batch, num_workers=1, pin_memory=cuda),
        steps, lambda b: (to_device(b)[0].float() / 255, to_device(b)[1]))
    rates: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(trials):  # alternating, so every variant sees the same machine load
        for name, run in variants.items():
            rates[name].append(run())
    base = statistics.median(rates[next(iter(variants))])
    return {"batch": batch, "image": size, "width": width, "step_s": t_step,
            "loader_s_per_batch": delay, "ratio": ratio, "steps": steps, "trials": trials,
            "rates": rates,
            "speedup": {name: statistics.median(r) / base for name, r in rates.items()}}


def report(meta: dict[str, Any], results: dict[str, Any]) -> str:
    t = results["throughput"]
    rows = [[name, f"{statistics.median(r):.2f}", f"{t['speedup'][name]:.2f}x",
             ", ".join(f"{v:.2f}" for v in r)] for name, r in t["rates"].items()]
    table = "\n".join(md_table(["variant", "steps/s (median)", "vs baseline", "per trial"],
                               rows, "lrrl"))
    m = results["memory"]
    flat = ("not measured on the CPU (torch.cuda.max_memory_allocated is CUDA's)"
            if m["flat"] is None else
            f"{m['max_allocated_after_20']:,} bytes after 20 steps, "
            f"{m['max_allocated_at_end']:,} after {m['steps']}: "
            f"{'flat' if m['flat'] else 'NOT flat'}")
    return (
        f"# DeviceEcho on the device\n\n`python benchmarks/device_echo.py {meta['args']}` on "
        f"**{meta['device']}** (torch {meta['torch']}, dataecho {meta['dataecho']}).\n\n"
        f"- suite (`tests/test_torch_device.py` on `{meta['device_type']}`): "
        f"{results['suite']['summary']}{''.join(f'; {f}' for f in results['suite']['failed'])}\n"
        f"- race (`window=2`, a slow augmentation, an in-place step): "
        f"{results['race']['steps']} steps, equal to the synchronised reference: "
        f"{results['race']['equal_to_synchronised_reference']}\n"
        f"- memory over {m['steps']} steps (ring {m['ring_bytes']:,} bytes): {flat}\n\n"
        f"Throughput: a small ResNet (width {t['width']}) on {t['image']}x{t['image']} "
        f"images, batch {t['batch']}, {t['step_s'] * 1e3:.1f} ms a step; the loader "
        f"sleeps {t['loader_s_per_batch'] * 1e3:.1f} ms a batch (R = {t['ratio']:g}) in one "
        f"worker; {t['steps']} timed steps a run, {t['trials']} trials alternating, "
        f"medians; the ideal speedup at R = {t['ratio']:g} is min(R, e).\n\n{table}\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto", choices=["auto", "cuda", "cpu"])
    parser.add_argument("--steps", type=int, default=1000, help="steps of the memory check")
    parser.add_argument("--train-steps", type=int, default=60, help="timed steps a run")
    parser.add_argument("--trials", type=int, default=2)
    parser.add_argument("--ratio", type=float, default=4.0, help="R: loader over step time")
    args = parser.parse_args()
    name = args.device if args.device != "auto" else (
        "cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    torch.manual_seed(0)
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True
    results = {"suite": suite(device), "race": race(device),
               "memory": memory(device, args.steps),
               "throughput": throughput(device, args.ratio, args.train_steps, args.trials)}
    meta = {"device": device_name(device), "device_type": device.type,
            "torch": torch.__version__, "dataecho": __version__,
            "python": platform.python_version(),
            "args": " ".join(sys.argv[1:]) or "(defaults)"}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "device_echo.json").write_text(json.dumps({"meta": meta, **results}, indent=1))
    text = report(meta, results)
    (RESULTS / "device_echo.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
