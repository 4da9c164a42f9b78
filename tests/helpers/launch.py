"""Runs a job script on two CPU processes under torchrun (gloo), and reads their results."""

from __future__ import annotations

import json
import os
import pathlib
import socket
import subprocess
import sys
from typing import Any

HELPERS = pathlib.Path(__file__).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_two_processes(script: str, out_dir: pathlib.Path, *args: object,
                      timeout: float = 240) -> list[dict[str, Any]]:
    """Runs ``helpers/<script> out_dir *args`` on two processes; each one's JSON result.

    Each process writes ``out_dir/rank<r>.json``.
    """
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
           "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
         "--master_addr", "127.0.0.1", "--master_port", str(_free_port()),
         str(HELPERS / script), str(out_dir), *map(str, args)],
        capture_output=True, text=True, timeout=timeout, env=env, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return [json.loads((out_dir / f"rank{r}.json").read_text()) for r in range(2)]


def run_one_process(script: str, out_dir: pathlib.Path, *args: object,
                    timeout: float = 240) -> dict[str, Any]:
    """Runs ``helpers/<script> out_dir *args`` as one plain process; its JSON result.

    The process writes ``out_dir/rank0.json``, as rank 0 of a two-process job does.
    """
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
           "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run([sys.executable, str(HELPERS / script), str(out_dir), *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, env=env, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads((out_dir / "rank0.json").read_text())
