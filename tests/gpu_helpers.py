"""A trainer for tests/test_gpu_paths.py: trials that prove they ran side by side on one GPU
(as Ray assigned it), and one that runs out of CUDA memory. Follows train_cifar's contract."""

import os
import time
from pathlib import Path


def shares_a_gpu(*, mode, epochs, marker_dir, together=3, state=None, on_epoch=None, **_):
    if mode == "oom":
        import torch

        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    # Each trial says it has started, then waits (up to a minute) until `together` have: only
    # trials running at the same time can all get past this.
    Path(marker_dir, f"started-{mode}").write_text(str(os.getpid()))
    deadline = time.time() + 60
    while len(list(Path(marker_dir).glob("started-*"))) < together and time.time() < deadline:
        time.sleep(0.1)
    on_epoch({"loss": 1.0, "epoch": 1, "together": len(list(Path(marker_dir).glob("started-*"))) >= together,
              "visible_gpus": os.environ.get("CUDA_VISIBLE_DEVICES", "")}, {"epoch": 1})
