"""``python -m tuning.bench.gpucheck`` (``make gpu-check``): every GPU measurement, in one go.

Time on a GPU machine may be short; this runs everything in one go and keeps whatever it
measured. Each step runs in its own process under a time cap (a hang or a CUDA crash costs that
step only), prints its figures as it measures them, and appends them to steps/<step>.jsonl;
after every step gpu-check.csv and gpu-check.json are written again from all of them. Steps:

  data         synthetic CIFAR-10 (50k/10k: what tuning.run --data synthetic uses), generated once
  doctor       tuning.doctor's GPU lines (NVML, GPUtil) and Ray's view of the GPUs
  throughput   trainer vs the bare loop, bf16 vs fp32, batch 512 and 128, images/s; peak CUDA memory
  accuracy     time for the best cifar configuration to reach --target-accuracy on validation
  nccl         the nccl path at world size 1 (one GPU cannot hold two nccl ranks)
  asha_gpu1    cifar_asha on synthetic data, 1 GPU per trial: trials per hour, GPU utilisation
  asha_gpu025  the same with 0.25 GPU per trial: four trials share the GPU
  refuse       --gpus-per-trial one more than the machine has: refused with exit 2

Without a GPU it says "no GPU", measures bf16 against fp32 on CPU (small) and exits 0, so CI
runs it. --rehearse runs the GPU steps on CPU at toy sizes: the script's paths, not its figures.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from tuning import cli, provenance, results
from tuning.bench import gpusteps
from tuning.bench.harness import write_rows

GPU_STEPS = ("data", "doctor", "throughput", "accuracy", "nccl", "asha_gpu1", "asha_gpu025", "refuse")
CPU_STEPS = ("doctor", "cpu_precision")
# Seconds per step, on one H200; what the whole run may take is --budget-s.
CAPS = {"data": 120, "doctor": 90, "throughput": 120, "accuracy": 120, "nccl": 90, "asha_gpu1": 150,
        "asha_gpu025": 150, "refuse": 90, "cpu_precision": 120}
# gpu: the real check. rehearse: the same steps on CPU, toy sizes. cpu: the CPU side alone.
SIZES = {
    "gpu": dict(synthetic=(50_000, 10_000), train=20_000, val=2_000, batches=(512, 128), epochs=3,
                acc_epochs=60, asha=["--num-samples", "8", "--max-epochs", "4"]),
    "rehearse": dict(synthetic=(5_000, 1_000), train=64, val=32, batches=(32, 16), epochs=2, width=4,
                     acc_epochs=2, asha=["--smoke", "--num-samples", "2", "--max-epochs", "1"]),
    # bf16 runs this net several times slower than fp32 on a CPU without native bf16
    # (cpu_bf16_vs_fp32_speed): a narrower net, few steps.
    "cpu": dict(synthetic=(600, 100), train=32, val=32, batches=(16,), epochs=2, width=8),
}
FIELDS = ["step", "metric", "value", "unit", "detail"]


def build_parser():
    p = cli.Parser(prog="python -m tuning.bench.gpucheck", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", help="output folder (default results/gpu-check-<time>)")
    p.add_argument("--data-dir", default="./data", help="where the synthetic data is generated (default ./data)")
    p.add_argument("--target-accuracy", type=cli.fraction, default=0.7,
                   help="validation accuracy the accuracy step times the best configuration to (default 0.7)")
    p.add_argument("--lr", type=cli.positive_float, default=2e-3,
                   help="the best configuration's learning rate (default 2e-3)")
    p.add_argument("--batch-size", type=cli.positive_int, default=512,
                   help="the best configuration's batch (default 512)")
    p.add_argument("--budget-s", type=cli.positive_float, default=420,
                   help="seconds for all steps together; a step gets min(its cap, what is left) (default 420)")
    p.add_argument("--only", action="append", choices=list(dict.fromkeys(GPU_STEPS + CPU_STEPS)),
                   help="run only this step (repeatable); the other steps' figures in --out are kept")
    p.add_argument("--rehearse", action="store_true",
                   help="without a GPU: run the GPU steps on CPU at toy sizes, to try the script itself")
    p.add_argument("--step", help=argparse.SUPPRESS)  # internal: run one step in this process
    p.add_argument("--deadline", type=cli.positive_float, help=argparse.SUPPRESS)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        args = build_parser().parse_args(argv)
        if args.step:
            return _run_one(args)
        out = _prepare_out(args)
    except cli.UsageError as exc:
        print(f"tuning.bench.gpucheck: error: {exc}", file=sys.stderr)
        return 2
    try:
        return _orchestrate(args, argv, out)
    except KeyboardInterrupt:
        print(f"\ninterrupted: what was measured is in {out} (steps/*.jsonl, gpu-check.csv)", file=sys.stderr)
        return 130


def _prepare_out(args) -> Path:
    out = Path(args.out or f"results/gpu-check-{time.strftime('%Y%m%d-%H%M%S')}").absolute()
    if (out / "gpu-check.json").exists() and not args.only:
        raise cli.UsageError(f"{out} holds an earlier gpu check: choose a new --out, or rerun steps into it "
                             "with --only STEP (the other steps' figures are kept)")
    try:
        (out / "steps").mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise cli.UsageError(f"cannot write to {out} ({exc.strerror or exc}): choose a writable --out") from None
    return out


def _mode(args) -> str:
    import torch

    return "gpu" if torch.cuda.is_available() else "rehearse" if args.rehearse else "cpu"


def _orchestrate(args, argv: list[str], out: Path) -> int:
    import torch

    mode = _mode(args)
    if mode != "gpu":
        built = f"torch {torch.__version__}, CUDA build {torch.version.cuda}" if torch.version.cuda else \
            f"torch {torch.__version__}, CPU-only build"
        print(f"no GPU ({built}): " + ("rehearsing the GPU steps on CPU at toy sizes" if mode == "rehearse"
                                        else "running the CPU side only: bf16 against fp32 on CPU, small"), flush=True)
    steps = [s for s in (CPU_STEPS if mode == "cpu" else GPU_STEPS) if not args.only or s in args.only]
    report = {"mode": mode, "machine": _machine(cuda=False), "argv": argv, "steps": {}}
    if (out / "gpu-check.json").exists():  # --only: keep what the other steps measured
        report["steps"] = json.loads((out / "gpu-check.json").read_text()).get("steps", {})
    end = time.time() + args.budget_s
    print(f"{'step':<13} {'metric':<34} {'value':>12} {'unit':<8} detail", flush=True)
    for step in steps:
        cap = min(CAPS[step], end - time.time())
        if cap < 5:
            report["steps"][step] = {"status": "skipped: --budget-s spent"}
            print(f"{step:<13} skipped: the budget of {args.budget_s:g} s is spent", flush=True)
        else:
            (out / "steps" / f"{step}.jsonl").unlink(missing_ok=True)
            report["steps"][step] = _run_step(step, argv + ["--out", str(out)], cap)
        _write(out, report)
    report["machine"] = _machine(cuda=mode == "gpu")
    _write(out, report)
    failed = [s for s in steps if report["steps"][s]["status"] != "ok"]
    print(f"\n{len(steps) - len(failed)} of {len(steps)} steps ok"
          + (f"; not ok: {', '.join(failed)}" if failed else ""))
    print(f"Written: {out / 'gpu-check.csv'}, {out / 'gpu-check.json'}", flush=True)
    return 0 if mode != "gpu" or not failed else 1


def _run_step(step: str, argv: list[str], cap: float) -> dict:
    """One step in its own process group, killed at its cap (SIGINT first: tuning.run then saves
    its tables)."""
    started = time.time()
    cmd = [sys.executable, "-m", "tuning.bench.gpucheck", *argv, "--step", step, "--deadline", str(started + cap - 10)]
    proc = subprocess.Popen(cmd, start_new_session=True)
    try:
        rc = proc.wait(timeout=cap)
        status = "ok" if rc == 0 else f"failed: exit code {rc}"
    except subprocess.TimeoutExpired:
        gpusteps.stop_group(proc)
        status = f"timed out after {cap:.0f} s"
    except KeyboardInterrupt:  # the step has its own session: Ctrl-C here must end it too
        gpusteps.stop_group(proc)
        raise
    wall = time.time() - started
    print(f"{step:<13} {'step_wall_s':<34} {wall:>12.1f} {'s':<8} {status}", flush=True)
    return {"status": status, "wall_s": round(wall, 1), "cap_s": round(cap, 1)}


def _write(out: Path, report: dict) -> None:
    rows = []
    for step in dict.fromkeys(GPU_STEPS + CPU_STEPS):
        path = out / "steps" / f"{step}.jsonl"
        for line in path.read_text().splitlines() if path.exists() else []:
            if line.endswith("}"):  # not a line cut short by a kill
                rows.append(json.loads(line))

    write_rows(out / "gpu-check.csv", rows, FIELDS)
    results.write_json(out / "gpu-check.json", {**report, "rows": rows})


def _machine(cuda: bool) -> dict:
    """What the figures were measured on. With cuda, torch's view too: only once the steps are
    done, because it starts a CUDA context here that would hold GPU memory during them."""
    import torch

    from tuning import doctor

    info = provenance.machine() if cuda else {**provenance.versions(), "cpus": os.cpu_count()}
    try:
        info["nvml"] = doctor.read_gpus()
    except Exception as exc:  # no driver, no nvidia-ml-py: the steps say what that means
        info["nvml"] = f"{type(exc).__name__}: {exc}"
    info.update(torch_cuda=torch.version.cuda, cudnn=torch.backends.cudnn.version() if cuda else None)
    if cuda:
        info["cuda_capability"] = [list(torch.cuda.get_device_capability(i)) for i in range(torch.cuda.device_count())]
    return info


# ---------------------------------------------------------------- inside a step's process

def _run_one(args) -> int:
    mode = _mode(args)
    ctx = {"out": Path(args.out), "data_dir": Path(args.data_dir).absolute(), "mode": mode,
           "device": "cuda" if mode == "gpu" else "cpu", "sizes": SIZES[mode], "deadline": args.deadline,
           "target": args.target_accuracy, "lr": args.lr,
           "batch": args.batch_size if mode == "gpu" else SIZES[mode]["batches"][0]}  # toy data, toy batches
    path = ctx["out"] / "steps" / f"{args.step}.jsonl"

    def emit(metric: str, value, unit: str = "", detail: str = "") -> None:
        if isinstance(value, float):
            value = float(f"{value:.5g}")
        row = {"step": args.step, "metric": metric, "value": value, "unit": unit, "detail": detail}
        with open(path, "a") as f:  # one line per figure, flushed: a kill later loses nothing measured
            f.write(json.dumps(row) + "\n")
        shown = f"{value:.4g}" if isinstance(value, float) else str(value)
        print(f"{args.step:<13} {metric:<34} {shown:>12} {unit:<8} {detail}", flush=True)

    try:
        getattr(gpusteps, f"step_{args.step}")(ctx, emit)
    except KeyboardInterrupt:  # the orchestrator's SIGINT at the step's cap: what was measured is kept
        print(f"{args.step:<13} stopped at its time cap", flush=True)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
