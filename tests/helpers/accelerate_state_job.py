"""An accelerate loop on one process, resumed through a StatefulDataLoader's state.

``DataLoaderConfiguration(use_stateful_dataloader=True)`` makes ``save_state`` save the
loader's position and ``load_state`` restore it. Phase ``first``: for 0 and 2
DataLoader workers, three epochs uninterrupted, and the loop stopped after each of
STOPS steps with a checkpoint in CKPT_DIR; phase ``resume`` resumes each in this new
process. Writes OUT_DIR/rank0.json: per run, the example ids trained and the counts.
Usage: accelerate_state_job.py OUT_DIR PHASE CKPT_DIR.
"""
import json
import pathlib
import sys

from accelerate_job import train

STEPS_PER_EPOCH = 24  # 48 examples, factor 2, batches of 4
STOPS = (10, 24, 30)  # mid first epoch, after the first epoch's last batch, mid second


def main() -> None:
    out_dir, phase, ckpt_dir = pathlib.Path(sys.argv[1]), sys.argv[2], pathlib.Path(sys.argv[3])
    runs = {}
    for workers in (0, 2):
        if phase == "first":
            runs[f"full/{workers}"] = train("dispatched", workers, ckpt_dir / "full",
                                            stateful=True)
        for stop in STOPS:
            ckpt = ckpt_dir / f"w{workers}s{stop}"
            if phase == "first":
                runs[f"stopped/{workers}/{stop}"] = train("dispatched", workers, ckpt,
                                                          stop=stop, stateful=True)
            else:
                runs[f"resumed/{workers}/{stop}"] = train("dispatched", workers, ckpt,
                                                          resume=True, stateful=True)
    (out_dir / "rank0.json").write_text(json.dumps(runs))


if __name__ == "__main__":
    main()
