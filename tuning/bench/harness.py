"""What every bench section shares: a row of figures and its goal, one writer of row tables, the
workloads (synthetic data, the busy trainer), the two ways of running them (through tuning.run's
path, and through a plain ``tune.run`` as Ray's own peer), and the one measurement of the trainer
against a bare PyTorch loop that the bench and the GPU check share.

No torch at import: the overhead section's trials import this module for ``busy``, and a trial that
imported torch would measure torch's import, not the harness."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GOALS = {"harness_overhead_ratio": "<= 1.05", "trial_overhead_later_ms": "<= 50",
         "throughput_ratio_bs128": ">= 0.95", "throughput_ratio_bs512": ">= 0.95",
         "rss_growth_epoch2_to_last_mb": "no growth", "bohb_recomputed_epochs": "0",
         "harness_minus_raw_tune_overhead": "<= 0.05", "added_per_trial_mb_forked": "<= 400",
         # issue 39: thousands of trials (tuning/bench/scale.py)
         **{f"ours_to_raw_{n}": "<= 2" for n in (2000, 10000)},
         **{f"ours_last_to_first_tenth_{n}": "<= 1.2" for n in (2000, 10000)},
         "ours_driver_peak_rss_mb_10000": "<= 1024", "final_report_s_10000": "<= 10"}
# Goals whose figure only a full run measures: --quick runs the scale section at 200 trials.
FULL_SIZE_ONLY = frozenset(m for m in GOALS if m.endswith(("_2000", "_10000")))


# Where the benches find CIFAR-10 (node_memory) and generate their synthetic images: ./data unless
# tuning.bench --data-dir says otherwise (set once, before any section runs).
DATA_DIR = Path("data")


def generated(n_train: int, n_test: int = 1000):
    """Synthetic CIFAR-10 of n_train training and n_test test images, under DATA_DIR."""
    from tuning.trial import data

    return data.prepare("synthetic", DATA_DIR, seed=0, synthetic_train=n_train, synthetic_test=n_test)


def synthetic(n_train: int):
    """Synthetic CIFAR-10 with at least n_train training images beside a validation tenth, under DATA_DIR."""
    return generated(max(n_train + n_train // 9, 5000))


def run_tune(space, strategy: str, *, num_samples: int, max_epochs: int, cpus: float, source=None,
             max_train=None, max_val=None, **spec):
    """One experiment through the same backend.run path as tuning.run; returns the recorder."""
    from tuning import backend

    backend.start_ray()
    rec = backend.recorder()
    with tempfile.TemporaryDirectory() as d:
        spec = backend.RunSpec(space=space, strategy=strategy, num_samples=num_samples, max_epochs=max_epochs,
                               seed=0, cpus_per_trial=cpus, gpus_per_trial=0, source=source, results_dir=Path(d),
                               max_train=max_train, max_val=max_val, progress=False, callbacks=[rec], **spec)
        started = time.perf_counter()
        backend.run(spec)
        rec.wall_s = time.perf_counter() - started
    return rec


def run_raw_tune(n: int, seconds: float, *, loggers: bool = True):
    """The overhead workload through a plain ``tune.run(..., reuse_actors=True)``: Ray's own cost,
    the peer of our harness's. Tune's defaults otherwise (adaptive experiment snapshots; its
    per-trial loggers unless loggers=False), in the Ray the bench started; returns the recorder."""
    from ray import tune

    from tuning import backend

    backend.start_ray()
    rec = backend.recorder()  # only notes starts and results, as it does for run_tune
    before = os.environ.get("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS")
    if not loggers:
        os.environ["TUNE_DISABLE_AUTO_CALLBACK_LOGGERS"] = "1"
    try:
        with tempfile.TemporaryDirectory() as d:
            started = time.perf_counter()
            tune.run(_raw_busy(), config={"x": tune.uniform(0.0, 1.0), "seconds": seconds}, num_samples=n,
                     resources_per_trial={"cpu": 1}, reuse_actors=True, storage_path=d, verbose=0,
                     callbacks=[rec])
            rec.wall_s = time.perf_counter() - started
    finally:
        if before is None:
            os.environ.pop("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", None)
        else:
            os.environ["TUNE_DISABLE_AUTO_CALLBACK_LOGGERS"] = before
    return rec


OVERHEAD_KINDS = ("ours", "ours_tune_logs", "raw", "raw_no_loggers")


def overhead_in_fresh_process(kind: str, n: int, seconds: float) -> dict:
    """One overhead measurement (a kind of OVERHEAD_KINDS) in a new Python process with its own Ray,
    as a user's command runs: each pays its own cold imports, and none inherits another's (Ray's
    usage tagging imports mlflow in a process's first tune.run, ~2 s here). Returns wall_s,
    first_start_s (tune.run called to the first trial running) and loop_s (first trial start to
    last result)."""
    out = subprocess.run([sys.executable, "-m", "tuning.bench.harness", kind, str(n), str(seconds)],
                         capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"the {kind} overhead run failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _overhead(kind: str, n: int, seconds: float) -> dict:
    from tuning.spaces import Space, Uniform

    if kind.startswith("raw"):
        rec = run_raw_tune(n, seconds, loggers=kind == "raw")
    else:
        space = Space(params={"x": Uniform(0.0, 1.0)}, trainer="tuning.bench.harness:busy",
                      fixed={"seconds": seconds}, gpus_per_trial=0)
        rec = run_tune(space, "random", num_samples=n, max_epochs=1, cpus=1, tune_logs=kind == "ours_tune_logs")
    first = min(rec.starts.values())
    return {"wall_s": rec.wall_s, "first_start_s": first, "loop_s": max(r["wall_s"] for r in rec.rows) - first}


def _raw_busy():
    """Ray's release-test trainable: `seconds` of CPU work, one result, no checkpoint. Made inside
    a function so that cloudpickle sends it by value: a trial process imports Ray and nothing of
    ours (tuning.bench.measure imports torch), as a user's script would."""

    def busy_raw(config):
        import time

        from ray import tune

        end = time.process_time() + config["seconds"]
        while time.process_time() < end:
            pass
        tune.report({"loss": config["x"]})

    return busy_raw


def busy(*, x: float, seconds: float, epochs: int, state=None, on_epoch=None, **_):
    """The harness benchmark's trial: `seconds` of CPU work per epoch, nothing else."""
    for epoch in range(int(state["epoch"]) if state else 0, epochs):
        end = time.process_time() + seconds
        while time.process_time() < end:
            pass
        on_epoch({"loss": x, "epoch": epoch + 1}, {"epoch": epoch + 1})


# ---------------------------------------------------------------- the trainer against a bare loop

def trainer_vs_bare(train, val, *, batch: int, epochs: int = 3, device: str = "cpu", precision: str = "fp32",
                    width: int = 16, weight_decay: float = 5e-4, lr: float = 1e-3, threads: int | None = None) -> dict:
    """Training images/s of the trainer and of bare_loop on the same model, data, batch, threads,
    device and precision, each the fastest of epochs 2 to `epochs` (a shared machine only ever
    slows a run down): the bench's throughput section and the GPU check's both measure this.
    Returns {"trainer", "bare", "ratio": trainer / bare, "last": the trainer's last epoch's
    metrics}; on CUDA "last" has the trainer's peak memory, counted from this call."""
    import torch

    from tuning.trial import trainer

    if threads:
        torch.set_num_threads(threads)
    if device == "cuda":  # the peak of this trainer alone, not of what ran before it
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    seen = []
    trainer.train_cifar(lr=lr, batch_size=batch, epochs=epochs, train=train, val=val, device=device,
                        precision=precision, width=width, weight_decay=weight_decay,
                        on_epoch=lambda m, s: seen.append(m))
    mine = max(m["images_per_s"] for m in seen[1:])
    bare = bare_loop(train, batch, torch.get_num_threads(), epochs, device, precision, width)
    return {"trainer": mine, "bare": bare, "ratio": mine / bare, "last": seen[-1]}


def bare_loop(train, batch: int, threads: int, epochs: int = 3, device: str = "cpu",
              precision: str = "fp32", width: int = 16) -> float:
    """The reference: the same model, data, batch size, threads and precision in the plainest
    PyTorch loop (no augmentation, no evaluation); images/s of its fastest epoch after the first.
    On CUDA the split sits on the GPU, as the trainer keeps it."""
    import torch
    import torch.nn.functional as F

    from tuning.trial import trainer

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    dtype = trainer.autocast_dtype(precision, device)
    x_all, y_all = train.x.to(device), train.y.to(device)
    model = trainer.make_model(width).to(device, memory_format=torch.channels_last)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model.train()
    speeds = []
    for _ in range(epochs):
        t, seen = time.perf_counter(), 0
        order = torch.randperm(len(train), device=device)
        for i in range(0, len(order) - batch + 1, batch):
            idx = order[i:i + batch]
            with trainer.autocast(dtype, device):
                loss = F.cross_entropy(model(x_all[idx].contiguous(memory_format=torch.channels_last)), y_all[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            loss.item()  # as the trainer does: one host sync per step
            seen += len(idx)
        speeds.append(seen / (time.perf_counter() - t))
    return max(speeds[1:])


# ---------------------------------------------------------------- rows

def row(section: str, metric: str, value: float, unit: str, detail: str) -> dict:
    """One figure of bench.csv; its goal, if docs/performance.md sets one."""
    return {"section": section, "metric": metric, "value": round(float(value), 4), "unit": unit,
            "goal": GOALS.get(metric, ""), "detail": detail}


def write_rows(path: Path, rows: list[dict], fields: list[str] | None = None) -> None:
    """A table of rows as CSV, replacing `path` whole (a reader never sees half of it)."""
    from tuning import results

    def write(p: Path) -> None:
        with open(p, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=fields or list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)

    results.write_atomic(path, write)


if __name__ == "__main__":  # overhead_in_fresh_process's child: python -m tuning.bench.harness KIND N SECONDS
    print(json.dumps(_overhead(sys.argv[1], int(sys.argv[2]), float(sys.argv[3]))))
