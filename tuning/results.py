"""Result tables (pandas) and the files of a results folder, written atomically.

Input is the plain per-trial records from ``tuning.backend``; nothing here knows about Ray.
"""

from __future__ import annotations

import json
import logging
import math
import os
import platform
import subprocess
import time
from importlib import metadata
from pathlib import Path

import pandas as pd

from tuning import atomic

log = logging.getLogger(__name__)

# Per-epoch columns kept from Tune's result rows, in this order.
EPOCH_COLUMNS = ["training_iteration", "epoch", "loss", "accuracy", "train_loss", "diverged", "restored_from",
                 "world_size", "train_time_s", "eval_time_s", "images_per_s", "bf16", "rss_mb", "peak_rss_mb",
                 "cuda_max_allocated_mb", "cuda_reserved_mb", "memory_growing", "time_this_iter_s",
                 "time_total_s", "timestamp", "node_ip", "node_id", "pid", "rank_pids"]


def _curve(rows: list[dict]) -> list[dict]:
    """One row per training_iteration, the last one reported. A trial resumed after a crash can
    have reported an iteration again (its result logged, its checkpoint not yet recorded); the
    repeat is the run that went on, and recomputed_epochs still counts it."""
    last = {r.get("training_iteration"): r for r in rows}
    return [last[k] for k in sorted(last, key=lambda k: (k is None, k))]


ROWS_FILE = "results.jsonl"  # in a run's results dir: every result as it arrived, across resumes


def read_rows(path: Path, quiet: bool = False) -> dict[str, list[dict]]:
    """The rows of results.jsonl (every result, as tuning.backend logged it) by trial. A damaged
    line (cut short by a crash or a full disk; after a resume it sits in the middle) is skipped
    with a warning naming it (quiet: without, for the live report's reads every 30 s): what it held
    was either trained again after the resume or never reached Tune's saved experiment."""
    rows: dict[str, list[dict]] = {}
    for number, line in enumerate(path.read_text().splitlines() if path.exists() else [], start=1):
        try:
            row = json.loads(line)
            rows.setdefault(row["trial_id"], []).append(row)
        except (ValueError, KeyError, TypeError) as exc:
            if line.strip() and not quiet:
                log.warning("%s line %d is damaged (%s: %s): skipped; the tables are built from the other lines",
                            path, number, type(exc).__name__, exc)
    return rows


def epochs_table(records: list[dict], params: list[str]) -> pd.DataFrame:
    """Every reported row: the learning curves, one row per trial and epoch."""
    rows = []
    for rec in records:
        for r in _curve(rec["rows"]):
            row = {"trial_id": rec["trial_id"], **{p: rec["config"].get(p) for p in params}}
            row.update({c: r.get(c) for c in EPOCH_COLUMNS})
            rows.append(row)
    return pd.DataFrame(rows, columns=["trial_id", *params, *EPOCH_COLUMNS])


def trials_table(records: list[dict], params: list[str], *, strategy: str, max_epochs: int,
                 metric: str = "loss", mode: str = "min", cpus: float = 0, gpus: float = 0) -> pd.DataFrame:
    """One row per trial: its hyperparameters, final and best metrics, epochs, status, time, and
    device-hours (the trial's resources, `cpus` and `gpus`, times its running time)."""
    rows = []
    for rec in records:
        curve = [r for r in _curve(rec["rows"]) if r.get(metric) is not None]
        last = curve[-1] if curve else {}
        losses = [r["loss"] for r in curve if _finite(r.get("loss"))]
        accs = [r["accuracy"] for r in curve if _finite(r.get("accuracy"))]
        epochs = int(last.get("training_iteration", 0))
        finished = rec["status"] == "TERMINATED"
        resumed = sorted({int(r["restored_from"]) for r in rec["rows"] if r.get("restored_from")})
        rows.append({
            "trial_id": rec["trial_id"],
            "strategy": strategy,
            **{p: rec["config"].get(p) for p in params},
            "loss": last.get("loss"),
            "accuracy": last.get("accuracy"),
            "best_loss": min(losses) if losses else None,
            "best_accuracy": max(accs) if accs else None,
            "epochs": epochs,
            "world_size": last.get("world_size", 1),
            "status": rec["status"],
            # Terminated before the full budget: the scheduler (ASHA) stopped it.
            "stopped_early": finished and epochs < max_epochs,
            # Epochs after which the trial was paused and later resumed from its checkpoint
            # (Hyperband rungs under BOHB), e.g. "1;3".
            "resumed_at": ";".join(map(str, resumed)),
            # Its metric turned NaN/inf: it stopped and reported the space's worst-case value.
            "diverged": any(bool(r.get("diverged")) for r in rec["rows"]),
            "recomputed_epochs": _recomputed(rec["rows"]),
            "node_ip": last.get("node_ip"),  # where it ran (on a cluster, which node)
            "node_id": last.get("node_id"),  # Ray's node id: tells apart nodes sharing an IP
            "wall_time_s": last.get("time_total_s"),
            # Every epoch it ran, recomputed ones too: they held the devices as much as the others.
            **device_hours(rec["rows"], cpus, gpus),
            "peak_rss_mb": _max(curve, "peak_rss_mb"),
            "cuda_max_allocated_mb": _max(curve, "cuda_max_allocated_mb"),
            "cuda_reserved_mb": _max(curve, "cuda_reserved_mb"),
            # Memory grew epoch after epoch (the trial logged the likely causes).
            "memory_growing": any(bool(r.get("memory_growing")) for r in rec["rows"]),
            "failures": rec.get("failures", 0),  # retries after the training raised
            "error": rec.get("error"),
        })
    df = pd.DataFrame(rows)
    if not df.empty:
        df = df.sort_values(metric, ascending=(mode == "min"), na_position="last", kind="stable")
    return df.reset_index(drop=True)


def device_hours(rows: list[dict], cpus: float, gpus: float) -> dict[str, float]:
    """CPU-hours and GPU-hours of a trial's rows: its resources times the time its iterations took."""
    seconds = sum(r["time_this_iter_s"] for r in rows if _finite(r.get("time_this_iter_s")))
    return {"cpu_hours": cpus * seconds / 3600, "gpu_hours": gpus * seconds / 3600}


def _max(rows: list[dict], key: str):
    values = [r[key] for r in rows if _finite(r.get(key))]
    return max(values) if values else None


def _recomputed(rows: list[dict]) -> int:
    """Epochs trained more than once: a trial that restarted from scratch instead of its
    checkpoint reports an epoch number it had already reported."""
    done, again = set(), 0
    for r in rows:
        e = r.get("epoch")
        if e is None:
            continue
        again += e in done
        done.add(e)
    return again


def best_trial(trials: pd.DataFrame, metric: str = "loss", mode: str = "min") -> dict | None:
    """The best trial by its final metric among those that reported one."""
    done = trials[trials[metric].notna()]
    if done.empty:
        return None
    row = done.loc[done[metric].idxmin() if mode == "min" else done[metric].idxmax()]
    return {k: _plain(v) for k, v in row.items()}


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v)


def _plain(v):
    if hasattr(v, "item"):
        v = v.item()
    if isinstance(v, float) and math.isnan(v):
        return None
    return v


# ---------------------------------------------------------------- files

class WriteError(Exception):
    """A results file cannot be written (a full disk, a path made unwritable): one line naming it."""

    def __init__(self, path: Path, exc: OSError):
        super().__init__(f"cannot write {path} ({exc.strerror or exc})")
        self.path = path


def write_atomic(path: Path, write) -> None:
    """write(tmp) writes the content, which then replaces `path` whole (tuning.atomic); a file that
    cannot be written raises WriteError, naming it."""
    try:
        atomic.write_atomically(path, write)
    except OSError as exc:
        raise WriteError(path, exc) from None


def write_text(path: Path, text: str) -> None:
    write_atomic(path, lambda p: p.write_text(text, encoding="utf-8"))


def write_bytes(path: Path, data: bytes) -> None:
    write_atomic(path, lambda p: p.write_bytes(data))


def write_json(path: Path, obj) -> None:
    write_atomic(path, lambda p: p.write_text(json.dumps(obj, indent=2, default=str) + "\n"))


def write_tables(results_dir: Path, trials: pd.DataFrame, epochs: pd.DataFrame) -> None:
    for name, df in (("trials", trials), ("epochs", epochs)):
        write_atomic(results_dir / f"{name}.csv", lambda p, df=df: df.to_csv(p, index=False))
        write_atomic(results_dir / f"{name}.parquet", lambda p, df=df: df.to_parquet(p, index=False))


def versions() -> dict:
    out = {"python": platform.python_version(), "platform": platform.platform()}
    for dist in ("torch", "torchvision", "ray", "hpbandster", "ConfigSpace", "pandas", "numpy"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    return out


def machine() -> dict:
    """What a measurement ran on: CPU model and count, GPUs, date, software versions."""
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    try:
        import torch

        gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    except ImportError:
        gpus = []
    return {"cpu": cpu, "cpus": os.cpu_count(), "gpus": gpus, "date": time.strftime("%Y-%m-%d"), **versions()}


def git_commit() -> str | None:
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5)
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=here, capture_output=True, text=True,
                               timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return out.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
