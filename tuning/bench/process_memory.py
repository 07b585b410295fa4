"""Where one CIFAR trial process's memory goes: ``python -m tuning.bench.process_memory BATCH``
prints, as JSON, this process's anonymous private memory (MB) after each import a trial makes,
after mapping the node's copy of 50,000 synthetic images, and at its peak over 20 training steps
at BATCH. Anonymous private pages are what no other process can share; the node_memory section
of tuning.bench shows the same from outside, summed over trials."""

from __future__ import annotations

import importlib
import json
import sys
import threading
from pathlib import Path

import psutil


def anonymous_private_mb() -> float:
    """Private pages of mappings without a file: the heap, thread stacks, torch's allocations."""
    maps = psutil.Process().memory_maps(grouped=True)
    return sum(m.private_clean + m.private_dirty for m in maps if not m.path.startswith("/")) / 2**20


def main(batch: int) -> dict:
    stages = {"python": anonymous_private_mb()}
    importlib.import_module("ray.tune")  # every trial process has it imported
    stages["ray_tune"] = anonymous_private_mb()
    import torch
    stages["torch"] = anonymous_private_mb()
    from tuning.trial import data, trainer
    torch.set_num_threads(1)
    source = data.prepare("synthetic", Path("data"), seed=0, synthetic_train=50_000, synthetic_test=1000)
    train, val = data.load_train_val(source)  # mapped when TUNING_SHARED_DATA is on (the default)
    stages["data"] = anonymous_private_mb()
    peak, done = [0.0], threading.Event()

    def watch() -> None:
        while not done.wait(0.1):
            peak[0] = max(peak[0], anonymous_private_mb())

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    trainer.train_cifar(lr=1e-3, batch_size=batch, epochs=1, train=train, val=val, max_steps=20)
    done.set()
    watcher.join()
    stages["training_peak"] = peak[0]
    return {"batch": batch, **{k: round(v) for k, v in stages.items()}}


if __name__ == "__main__":
    print(json.dumps(main(int(sys.argv[1]) if len(sys.argv) > 1 else 512)))
