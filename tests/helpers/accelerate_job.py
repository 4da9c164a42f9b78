"""One process of a two-process accelerate job over an EchoDataset (run by torchrun).

Writes OUT_DIR/rank<r>.json: the example ids each mode trained on, and the counts
summed over the ranks. Usage: accelerate_job.py OUT_DIR NUM_WORKERS.
"""
import json
import pathlib
import sys

import torch
from accelerate import Accelerator
from accelerate.utils import DataLoaderConfiguration
from torch.utils.data import DataLoader, Dataset

from dataecho.torch import EchoDataset
from dataecho.torch.distributed import stats_over_ranks

N, FACTOR, EPOCHS = 96, 2, 2


class Ids(Dataset):
    def __len__(self):
        return N

    def __getitem__(self, i):
        return torch.tensor([i])


def main() -> None:
    out_dir, workers = pathlib.Path(sys.argv[1]), int(sys.argv[2])
    out = {}
    for dispatch in (True, False):
        accelerator = Accelerator(
            cpu=True, dataloader_config=DataLoaderConfiguration(dispatch_batches=dispatch))
        ds = EchoDataset(Ids(), factor=FACTOR, buffer_size=8, seed=0)
        loader = accelerator.prepare(DataLoader(ds, batch_size=4, num_workers=workers))
        seen = []
        for _ in range(EPOCHS):
            for batch in loader:
                seen.extend(batch.flatten().tolist())
        total = stats_over_ranks(ds)
        out["dispatched" if dispatch else "sliced"] = {
            "seen": seen, "fresh": total.fresh_examples, "emitted": total.emitted_examples}
    rank = accelerator.process_index
    (out_dir / f"rank{rank}.json").write_text(json.dumps({"rank": rank, **out}))


if __name__ == "__main__":
    main()
