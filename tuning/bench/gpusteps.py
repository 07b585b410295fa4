"""The measurements of ``tuning.bench.gpucheck``: one function per step, ``step_<name>(ctx, emit)``.

Each runs in a process of its own (tuning.bench.gpucheck starts it) and hands every figure to
``emit(metric, value, unit, detail)`` the moment it has it. ``ctx`` says where to write, the
device, the sizes (SIZES in tuning.bench.gpucheck) and the step's deadline; a step that sees its time
running out stops and says what it did not measure. No Ray here: the Tune runs are tuning.run
subprocesses, as a user starts them.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from search_spaces._cifar import FIXED  # the cifar spaces' fixed settings: width, weight decay, precision


def time_left(ctx: dict) -> float:
    return (ctx["deadline"] or float("inf")) - time.time()


def stop_group(proc: subprocess.Popen, grace_s: float = 15) -> None:
    """SIGINT to the process group (tuning.run then saves its state and tables), SIGKILL if it lingers."""
    for sig, wait in ((signal.SIGINT, grace_s), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
            proc.wait(timeout=wait)
            return
        except (ProcessLookupError, subprocess.TimeoutExpired):
            continue


def run_logged(cmd: list[str], log: Path, ctx: dict) -> int | None:
    """A CLI in its own process group, its output to `log`; stopped when the step's time runs
    out (then None)."""
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            return proc.wait(timeout=max(1.0, time_left(ctx)))
        except subprocess.TimeoutExpired:
            stop_group(proc)
            return None


class GpuSampler:
    """Every GPU's utilisation and memory every `period_s`, in a thread, through NVML (GPUtil
    where NVML cannot be read): what the GPU did while a run went on."""

    def __init__(self, period_s: float = 0.5):
        self.period_s, self.samples, self.error = period_s, [], None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        while not self._stop.wait(self.period_s):
            try:
                self.samples.append(_read_utilisation())
            except Exception as exc:  # neither NVML nor GPUtil reads the GPUs: say so, stop sampling
                self.error = f"{type(exc).__name__}: {exc}"
                return


def _read_utilisation() -> list[tuple[float, float]]:
    """(utilisation %, memory used MB) per GPU."""
    from tuning import doctor

    try:
        return [(g["utilization_pct"], g["memory_used_mb"]) for g in doctor.read_gpus()]
    except Exception as exc:
        nvml = f"NVML: {type(exc).__name__}: {exc}"
    try:
        import GPUtil  # on Python 3.12 without distutils this raises too: then nothing is sampled

        gpus = GPUtil.getGPUs()
    except Exception as exc:
        raise RuntimeError(f"{nvml}; GPUtil: {type(exc).__name__}: {exc}") from None
    if not gpus:
        raise RuntimeError(f"{nvml}; GPUtil sees no GPU")
    return [(100 * g.load, g.memoryUsed) for g in gpus]


def _source(ctx: dict):
    from tuning.trial import data

    n_train, n_test = ctx["sizes"]["synthetic"]
    return data.prepare("synthetic", ctx["data_dir"], seed=0, synthetic_train=n_train, synthetic_test=n_test)


def _splits(ctx: dict, max_train: int | None = None, max_val: int | None = None):
    from tuning.trial import data

    return data.load_train_val(_source(ctx), max_train, max_val)


# ---------------------------------------------------------------- steps

def step_data(ctx: dict, emit) -> None:
    from tuning.trial import data

    t = time.perf_counter()
    source = _source(ctx)
    n_train, n_test = ctx["sizes"]["synthetic"]
    emit("synthetic_data_ready_s", time.perf_counter() - t, "s",
         f"{n_train:,} train + {n_test:,} test images in {source.root} (generated once, then reused)")
    t = time.perf_counter()
    train, val = data.load_train_val(source)
    emit("load_split_s", time.perf_counter() - t, "s", f"read, md5-check, split, normalise: {len(train):,} train, "
         f"{len(val):,} validation images")


def step_doctor(ctx: dict, emit) -> None:
    """tuning.doctor's lines: on a GPU machine the whole doctor (software, GPUs through NVML and
    GPUtil, the GPUs Ray sees), without the live trial the later steps do for real. There it runs
    as a user runs it, in a process of its own: its exit code and its screen (doctor.txt) are the
    CLI's, and a Ray that hangs is stopped at the step's deadline with the exit code still
    written. Its lines come back as data (--json), not read off the screen."""
    from tuning import doctor

    if ctx["mode"] == "cpu":  # the CPU check stays seconds long: no Ray
        lines = doctor.check_gpus()
    else:
        log, found = ctx["out"] / "doctor.txt", ctx["out"] / "doctor.json"
        found.unlink(missing_ok=True)  # a doctor stopped before writing must not pass off an earlier one's lines
        rc = run_logged([sys.executable, "-m", "tuning.doctor", "--no-live", "--data-dir", str(ctx["data_dir"]),
                         "--results-dir", str(ctx["out"]), "--json", str(found)], log, ctx)
        lines = json.loads(found.read_text()) if found.exists() else []
    for line in lines:
        emit(line["what"].strip(), line["status"], "", line["detail"])  # "  node": a node under "ray"
    if ctx["mode"] != "cpu":
        emit("doctor_exit_code", rc if rc is not None else "stopped", "", "0: no FAIL line (doctor.txt has them all)")


def step_throughput(ctx: dict, emit) -> None:
    """Training images/s of the trainer and of the bare loop on the same model, data, batch and
    precision (the fastest epoch after the first; tuning.bench.harness.trainer_vs_bare, as the
    bench's throughput section), and the trainer's peak CUDA memory."""
    from tuning.bench.harness import trainer_vs_bare

    sizes, device = ctx["sizes"], ctx["device"]
    train, val = _splits(ctx, sizes["train"], sizes["val"])
    split_mb = sum(t.nbytes for t in (train.x, train.y, val.x, val.y)) / 2**20
    width = sizes.get("width", FIXED["width"])
    detail = f"{len(train):,} images, width {width}, fastest of epochs 2-{sizes['epochs']}"
    for batch in sizes["batches"]:
        speed = {}
        for precision in ("bf16", "fp32"):
            if time_left(ctx) < 20:
                emit(f"trainer_{precision}_bs{batch}", "not measured", "", "the step's time ran out")
                return
            got = trainer_vs_bare(train, val, batch=batch, epochs=sizes["epochs"], device=device,
                                  precision=precision, width=width, weight_decay=FIXED["weight_decay"], lr=ctx["lr"])
            speed[precision] = got["trainer"]
            emit(f"trainer_{precision}_bs{batch}", got["trainer"], "img/s", detail)
            if device == "cuda" and batch == max(sizes["batches"]):
                emit(f"peak_cuda_mb_{precision}_bs{batch}", got["last"]["cuda_max_allocated_mb"], "MB",
                     f"torch.cuda.max_memory_allocated of one trial, its data split ({split_mb:.0f} MB) included")
            emit(f"bare_loop_{precision}_bs{batch}", got["bare"], "img/s", detail)
            emit(f"trainer_vs_bare_{precision}_bs{batch}", got["ratio"], "x",
                 "trainer / bare loop: same model, data, batch, precision")
        emit(f"bf16_speedup_bs{batch}", speed["bf16"] / speed["fp32"], "x", "trainer images/s, bf16 / fp32")


class _Stop(Exception):
    """Raised out of on_epoch: the target is reached, or the step's time is up."""


def step_accuracy(ctx: dict, emit) -> None:
    """Wall time for the best cifar configuration (FIXED, --lr, --batch-size) to reach
    --target-accuracy on the validation images: from the call (data to the GPU, model built)
    to the end of the epoch whose evaluation reaches it. Every epoch goes to accuracy_curve.csv."""
    from tuning.trial import trainer
    from tuning.bench.harness import write_rows

    sizes, target = ctx["sizes"], ctx["target"]
    train, val = _splits(ctx) if ctx["mode"] == "gpu" else _splits(ctx, sizes["train"], sizes["val"])
    curve, started = [], time.perf_counter()

    def on_epoch(m: dict, state: dict) -> None:
        wall = time.perf_counter() - started
        curve.append({"epoch": m["epoch"], "wall_s": round(wall, 3), "train_time_s": round(m["train_time_s"], 3),
                      "accuracy": m["accuracy"], "loss": m["loss"], "bf16": m["bf16"]})
        write_rows(ctx["out"] / "accuracy_curve.csv", curve)
        print(f"{'accuracy':<13} epoch {m['epoch']}: validation accuracy {m['accuracy']:.4f} at {wall:.1f} s",
              flush=True)
        if m["accuracy"] >= target or time_left(ctx) < 2 * wall / len(curve) + 5:
            raise _Stop

    config = f"lr {ctx['lr']:g}, batch {ctx['batch']}, {FIXED}"
    try:
        trainer.train_cifar(lr=ctx["lr"], batch_size=ctx["batch"], epochs=sizes["acc_epochs"], train=train, val=val,
                            device=ctx["device"], seed=0, on_epoch=on_epoch, **FIXED)
    except _Stop:
        pass
    best = max(curve, key=lambda r: r["accuracy"])
    last = curve[-1]
    if last["accuracy"] >= target:
        emit("time_to_target_s", last["wall_s"], "s", f"validation accuracy {last['accuracy']:.4f} >= {target:g} "
             f"after {last['epoch']} epochs on {len(train):,} images; {config}")
        emit("train_time_to_target_s", sum(r["train_time_s"] for r in curve), "s", "the same, training alone")
    else:
        emit("time_to_target_s", "not reached", "", f"best validation accuracy {best['accuracy']:.4f} (epoch "
             f"{best['epoch']}) in {last['wall_s']:.1f} s, {last['epoch']} epochs; {config}")
    emit("epochs_run", last["epoch"], "epochs", f"bf16 autocast: {last['bf16']}")


def _collective_probe(*, rank: int, world_size: int, device, on_epoch) -> dict:
    """One all_reduce on the rank's device: the collective itself, not only the rendezvous."""
    import torch
    import torch.distributed as dist

    t = torch.ones(1, device=device)
    dist.all_reduce(t)
    return {"sum": t.item(), "backend": str(dist.get_backend())}


def step_nccl(ctx: dict, emit) -> None:
    """The DDP path of GPU trials at world size 1 (one GPU holds one nccl rank): spawn,
    rendezvous, an nccl all_reduce, and two epochs of the trainer as rank 0."""
    from tuning.trial import distributed, trainer

    gpu = ctx["mode"] == "gpu"
    backend, device_type = ("nccl", "cuda") if gpu else ("gloo", "cpu")
    t = time.perf_counter()
    got = distributed.run(_collective_probe, {}, world_size=1, backend=backend, device_type=device_type)
    emit("allreduce_world_size_1", got["sum"], "", f"{got['backend']} all_reduce of 1.0 over 1 rank; "
         f"{time.perf_counter() - t:.1f} s with spawn and rendezvous")
    train, val = _splits(ctx, ctx["sizes"]["train"], ctx["sizes"]["val"])
    seen, t = [], time.perf_counter()
    kwargs = dict(lr=ctx["lr"], batch_size=ctx["batch"], epochs=2, train=train, val=val, seed=0, **FIXED)
    distributed.run(trainer.train_cifar, kwargs, world_size=1, backend=backend, device_type=device_type,
                    on_epoch=lambda m, s: seen.append(m))
    emit("ddp_rank_images_per_s", seen[-1]["images_per_s"], "img/s", f"{backend} rank 0 of 1, epoch 2 of "
         f"{len(train):,} images, bf16 autocast: {seen[-1]['bf16']}")
    emit("ddp_run_wall_s", time.perf_counter() - t, "s", "spawn, rendezvous, 2 epochs with evaluation, teardown")


def _asha(ctx: dict, emit, gpus: str) -> None:
    """cifar_asha through tuning.run on the synthetic data, GPU use sampled all along."""
    name = "asha_gpu" + gpus.replace(".", "")
    gpus = gpus if ctx["mode"] == "gpu" else "0"  # rehearsal: the same path on CPU
    with tempfile.TemporaryDirectory(prefix="gpucheck-") as d:
        run_dir = Path(d) / "run"
        cmd = [sys.executable, "-m", "tuning.run", "--space", "cifar_asha", "--data", "synthetic", "--data-dir",
               str(ctx["data_dir"]), *ctx["sizes"]["asha"], "--gpus-per-trial", gpus, "--cpus-per-trial", "1",
               "--max-failures", "0", "--results-dir", str(run_dir)]
        print(f"{name:<13} running: python {' '.join(cmd[1:])}  (output: {name}.log)", flush=True)
        t = time.perf_counter()
        with GpuSampler() as sampler:
            rc = run_logged(cmd, ctx["out"] / f"{name}.log", ctx)
        wall = time.perf_counter() - t
        if run_dir.exists():  # its tables and run.json; not Tune's folder of checkpoints
            shutil.copytree(run_dir, ctx["out"] / "runs" / name, dirs_exist_ok=True,
                            ignore=lambda folder, names: [n for n in names if n in ("tune", ".lock")])
    emit("exit_code", rc if rc is not None else "stopped", "", f"tuning.run: 0 = finished (see {name}.log)")
    _asha_figures(ctx["out"] / "runs" / name, wall, emit)
    _utilisation(sampler, emit)


def _asha_figures(run_dir: Path, wall: float, emit) -> None:
    import pandas as pd

    if not (run_dir / "trials.csv").exists():
        emit("trials", "none finished", "", "no trials.csv: see the log")
        return
    from tuning import record

    plan = record.read(run_dir)
    trials = pd.read_csv(run_dir / "trials.csv")
    n, took = len(trials), plan.wall_time_s or wall
    emit("trials_per_hour", 3600 * n / took, "trials/h", f"{n} trials ({plan.failed} failed, "
         f"{int(trials['epochs'].sum())} epochs) in {took:.1f} s of tuning.run's run ({wall:.1f} s with Ray start)")
    emit("epochs_per_hour", 3600 * trials["epochs"].sum() / took, "epochs/h", "epochs trained, all trials together")
    if trials["cuda_max_allocated_mb"].notna().any():
        big = trials[trials["batch_size"] == trials["batch_size"].max()]
        emit("peak_cuda_mb_per_trial", float(trials["cuda_max_allocated_mb"].max()), "MB",
             f"max over trials of torch.cuda.max_memory_allocated (the {big['batch_size'].max()} batch: "
             f"{float(big['cuda_max_allocated_mb'].max()):.0f} MB)")
    epochs = pd.read_csv(run_dir / "epochs.csv")
    if "bf16" in epochs:
        emit("epochs_in_bf16", float(epochs["bf16"].astype(bool).mean()), "fraction", "epochs trained under autocast")
    if plan.best is not None and plan.best.row.get("accuracy") is not None:
        emit("best_val_accuracy", float(plan.best.row["accuracy"]), "", f"best trial after {plan.best.epochs} "
             "epochs")


def _utilisation(sampler: GpuSampler, emit) -> None:
    if not sampler.samples:
        emit("gpu_util_mean_pct", "not sampled", "", sampler.error or "no sample taken")
        return
    util = [statistics.fmean(u for u, _ in s) for s in sampler.samples]
    busy = [i for i, u in enumerate(util) if u > 0]
    window = util[busy[0]:busy[-1] + 1] if busy else util
    emit("gpu_util_mean_pct", statistics.fmean(util), "%", f"{len(util)} samples every {sampler.period_s:g} s, "
         "from tuning.run's start to its end")
    emit("gpu_util_busy_mean_pct", statistics.fmean(window), "%", "the same from the first to the last busy sample")
    emit("gpu_util_max_pct", max(util), "%", "")
    emit("gpu_memory_used_max_mb", max(sum(m for _, m in s) for s in sampler.samples), "MB", "all processes, NVML")


def step_asha_gpu1(ctx: dict, emit) -> None:
    _asha(ctx, emit, "1")


def step_asha_gpu025(ctx: dict, emit) -> None:
    _asha(ctx, emit, "0.25")


def step_refuse(ctx: dict, emit) -> None:
    """One GPU more per trial than the machine has: tuning.run refuses with exit 2 and one line."""
    import torch

    have = torch.cuda.device_count() if ctx["mode"] == "gpu" else 0
    log = ctx["out"] / "refuse.log"
    with tempfile.TemporaryDirectory(prefix="gpucheck-") as d:
        rc = run_logged([sys.executable, "-m", "tuning.run", "--space", "cifar_asha", "--data", "synthetic",
                         "--data-dir", str(ctx["data_dir"]), *ctx["sizes"]["asha"], "--gpus-per-trial",
                         str(have + 1), "--results-dir", str(Path(d) / "run")], log, ctx)
    message = next((ln for ln in reversed(log.read_text().splitlines()) if "error:" in ln), "")
    ok = rc == 2 and f"--gpus-per-trial {have + 1}" in message
    emit("exit_code", rc if rc is not None else "stopped", "", f"--gpus-per-trial {have + 1} on {have} GPU(s): "
         f"{'refused as expected' if ok else 'NOT refused with exit 2'}: {message}")
    if not ok:
        sys.exit(1)


def step_cpu_precision(ctx: dict, emit) -> None:
    """bf16 autocast against fp32 on CPU, small: the same seed, data and steps."""
    import torch

    from tuning.trial import trainer

    sizes = ctx["sizes"]
    torch.set_num_threads(1)  # CI machines are shared: threads waiting on each other measured nothing
    train, val = _splits(ctx, sizes["train"], sizes["val"])
    last = {}
    for precision in ("fp32", "bf16"):
        seen = []
        trainer.train_cifar(lr=ctx["lr"], batch_size=sizes["batches"][0], epochs=sizes["epochs"], train=train,
                            val=val, precision=precision, width=sizes["width"], on_epoch=lambda m, s: seen.append(m))
        last[precision] = seen[-1]
        emit(f"cpu_{precision}_images_per_s", seen[-1]["images_per_s"], "img/s",
             f"{len(train)} images, batch {sizes['batches'][0]}, width {sizes['width']}, epoch {sizes['epochs']}, "
             f"{torch.get_num_threads()} thread(s)")
    emit("cpu_bf16_vs_fp32_speed", last["bf16"]["images_per_s"] / last["fp32"]["images_per_s"], "x", "")
    emit("cpu_bf16_vs_fp32_val_loss_diff", abs(last["bf16"]["loss"] - last["fp32"]["loss"]), "",
         f"validation loss fp32 {last['fp32']['loss']:.4f}, bf16 {last['bf16']['loss']:.4f}")
