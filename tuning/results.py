"""Result tables (pandas) from the trials' records; the files of a results folder: tuning.resultfiles.

Input is a TrialRecord per trial, as ``tuning.backend`` hands them back; nothing here knows about Ray.
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from tuning import objectives
from tuning import params as param_types
from tuning.resultfiles import (ID_COLUMNS, ReadError, WriteError, plain_json, read_json, read_table,  # noqa: F401
                               write_atomic, write_bytes, write_json, write_tables, write_text)

log = logging.getLogger(__name__)

# Per-epoch columns besides the trainer's metrics, in this order: the diagnostics a trial adds
# (memory, where it ran, whether it diverged or was restored) and Tune's clock and place.
DIAGNOSTICS = ["diverged", "restored_from", "world_size", "train_time_s", "eval_time_s", "images_per_s", "bf16",
               "rss_mb", "peak_rss_mb", "cuda_max_allocated_mb", "cuda_reserved_mb", "memory_growing",
               "time_this_iter_s", "time_total_s", "timestamp", "ended_at", "node_ip", "node_id", "pid", "rank_pids", "trainer_pid"]
# Tune's own keys in every result (ray.tune.result's AUTO_RESULT_KEYS and the rest it adds; a test
# checks this against Ray's): never a trainer's metric.
TUNE_KEYS = {"training_iteration", "time_this_iter_s", "time_total_s", "timestamp", "date", "hostname",
             "node_ip", "pid", "time_since_restore", "iterations_since_restore", "timesteps_total",
             "episodes_total", "timesteps_since_restore", "done", "trial_id", "experiment_tag", "config",
             "checkpoint_dir_name", "should_checkpoint", "experiment_id", "episode_reward_mean",
             "warmup_time", "wall_s"}
# Words that say which way a metric improves, for the best_<metric> columns of metrics other than
# the space's own (whose mode decides). A metric named otherwise gets its final value only.
_LOWER_IS_BETTER = ("loss", "error", "regret", "mse", "mae", "rmse", "nll", "perplexity")
_HIGHER_IS_BETTER = ("acc", "auc", "f1", "precision", "recall", "r2", "score")


def is_number(v) -> bool:
    """A result's value that is a number (a bool is not one, though Python says so)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool)


@dataclass
class TrialRecord:
    """One trial: what tuning.backend knows of it at the end of a segment or at a live report
    (tune_parts.trial_record), or what a killed run's results.jsonl still holds (tuning.report).
    Its rows stay dicts: their keys are the trainer's own metrics, beside Tune's."""
    trial_id: str
    status: str  # Tune's (PENDING, RUNNING, PAUSED, TERMINATED, ERROR), or the report's "STOPPED"
    config: dict  # plain values (tuning.params.plain), an inactive conditional parameter absent
    rows: list[dict] = field(default_factory=list)  # every result, as it arrived (results.jsonl)
    error: str | None = None  # a failed trial's last traceback line
    error_file: str | None = None  # its whole traceback: relative to the results dir where one was given
    failures: int = 0  # retries after the trainer raised
    checkpoint: str | None = None  # its last checkpoint: a path, or a URI on shared storage
    path: str | None = None  # its folder in Tune's experiment; None before it was scheduled


def truthy(v) -> bool:
    """A boolean cell as read back from CSV ("True", "1", "1.0") or kept in memory (a bool)."""
    return str(v).lower() in ("true", "1", "1.0")


TABLE_COLUMNS = objectives.TABLE_COLUMNS


def kept_as(name: str, taken) -> str:
    """The name a trainer's metric is kept under: its own, unless a parameter (`taken`: the trial's
    searched and fixed ones) or a column of the tables has it, as a trainer that reports its
    current `lr` does; then `<name>_reported`. One column, one meaning."""
    return f"{name}_reported" if name in taken or name in TABLE_COLUMNS or name in objectives.RESERVED_KEYS else name


def is_metric(name: str) -> bool:
    """Whether a result's key can be a trainer's metric: neither Tune's own, a diagnostic, nor the epoch."""
    return name not in TUNE_KEYS and name not in DIAGNOSTICS and name != "epoch"


def metric_keys(records: list[TrialRecord], metric: str) -> list[str]:
    """The metrics the trainers reported, the space's first: every numeric key of their rows that is
    neither Tune's nor a diagnostic, in the order they first appear."""
    keys = {metric: None}
    for rec in records:
        for row in rec.rows:
            for k, v in row.items():
                if is_number(v) and is_metric(k):
                    keys.setdefault(k, None)
    return list(keys)


def metric_columns(trials: pd.DataFrame, params: list[str]) -> list[str]:
    """The final-value metric columns of a trials table (trials_table puts them after the
    parameters, the space's metric first), read back from a table alone."""
    cols = list(trials.columns)
    if "epochs" not in cols:
        return []
    start = max([cols.index(p) + 1 for p in params if p in cols] + [cols.index("strategy") + 1 if "strategy" in cols else 0])
    return [c for c in cols[start:cols.index("epochs")] if not c.startswith("best_")]


def direction(name: str, metric: str, mode: str) -> str | None:
    """"min" or "max": which way `name` improves; None where its name does not say."""
    if name == metric:
        return mode
    low = name.lower()
    if any(w in low for w in _LOWER_IS_BETTER):
        return "min"
    if any(w in low for w in _HIGHER_IS_BETTER):
        return "max"
    return None


def _curve(rows: list[dict]) -> list[dict]:
    """One row per training_iteration, the last one reported. A trial resumed after a crash can
    have reported an iteration again (its result logged, its checkpoint not yet recorded); the
    repeat is the run that went on, and recomputed_epochs still counts it."""
    last = {r.get("training_iteration"): r for r in rows}
    return [last[k] for k in sorted(last, key=lambda k: (k is None, k))]


# In a result: why the trainer's metrics cannot be used (the space's metric missing or not a number);
# the run stops at it (tuning.backend's stopper) and tuning.session says it in one line.
METRIC_ERROR = "metric_error"
METRIC_LACKING = "metric_lacking"  # beside it, the metric that was not usable (the space's, or another objective)

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


def epochs_table(records: list[TrialRecord], params: list[str], metric: str = "loss") -> pd.DataFrame:
    """Every reported row: the learning curves, one row per trial and epoch, with a column for every
    metric the trainers reported."""
    columns = ["training_iteration", "epoch", *metric_keys(records, metric), *DIAGNOSTICS]
    cells = param_types.config_cells(records, params)
    rows = []
    for rec in records:
        for r in _curve(rec.rows):
            row = {"trial_id": rec.trial_id, **cells(rec)}
            row.update({c: r.get(c) for c in columns})
            rows.append(row)
    return param_types.whole_numbers(pd.DataFrame(rows, columns=["trial_id", *params, *columns]), records, params)


# The strategies whose brackets pause every trial at a rung until the rung fills (tuning/backend/hyperband.py).
SYNCHRONOUS = ("hyperband", "bohb", "adaptive")


def trials_table(records: list[TrialRecord], params: list[str], *, strategy: str, max_epochs: int,
                 metric: str = "loss", mode: str = "min", cpus: float = 0, gpus: float = 0,
                 constraints: dict | None = None) -> pd.DataFrame:
    """One row per trial: its hyperparameters, every metric's final value and, where its direction
    is known (direction), its best one, epochs, status, time, and device-hours (the trial's
    resources, `cpus` and `gpus`, times its running time). `constraints`: the space's, for the
    trials stopped past a bound on a metric that only grows."""
    keys = metric_keys(records, metric)
    ways = {k: direction(k, metric, mode) for k in keys}
    cells = param_types.config_cells(records, params)
    rows = []
    for rec in records:
        curve = [r for r in _curve(rec.rows) if r.get(metric) is not None]
        real = [r for r in curve if not r.get("diverged")]  # a diverged epoch's value is a stand-in
        last = curve[-1] if curve else {}
        epochs = int(last.get("training_iteration", 0))
        finished = rec.status == "TERMINATED"
        resumed = sorted({int(r["restored_from"]) for r in rec.rows if r.get("restored_from")})
        diverged = any(bool(r.get("diverged")) for r in rec.rows)
        short = finished and epochs < max_epochs and not diverged
        # Terminated before the full budget by the run, not by itself nor by diverging: past the
        # bound of a metric that only grows, under any strategy; or by the scheduler, whose STOP
        # Tune marks on the result (done) where a trainer's own return leaves it unmarked. A
        # synchronous bracket stops its losers while they wait paused, unmarked: there every
        # trial short of the budget counts.
        stopped = short and (objectives.grown_past(last, constraints or {}) is not None or strategy in SYNCHRONOUS
                             or (strategy not in ("grid", "random") and truthy(last.get("done"))))
        rows.append({
            "trial_id": rec.trial_id,
            "strategy": strategy,
            **cells(rec),
            **{k: last.get(k) for k in keys},
            **{f"best_{k}": _best(real, k, way) for k, way in ways.items() if way},
            "epochs": epochs,
            "world_size": last.get("world_size", 1),
            "status": rec.status,
            "stopped_early": stopped,
            # Its trainer returned before the full budget by itself (its own early stopping): no STOP
            # marked its last result (a comparison's budget marks one too, under grid and random).
            # A trial with no result did not end itself: the run stopped before its first (a stopped run).
            "ended_itself": short and epochs > 0 and not stopped and not truthy(last.get("done")),
            # Epochs after which the trial was paused and later resumed from its checkpoint
            # (Hyperband rungs under BOHB), e.g. "1;3".
            "resumed_at": ";".join(map(str, resumed)),
            # Its metric turned NaN/inf: it stopped and reported the space's worst-case value.
            "diverged": diverged,
            "recomputed_epochs": _recomputed(rec.rows),
            "node_ip": last.get("node_ip"),  # where it ran (on a cluster, which node)
            "node_id": last.get("node_id"),  # Ray's node id: tells apart nodes sharing an IP
            "wall_time_s": last.get("time_total_s"),
            # Every epoch it ran, recomputed ones too: they held the devices as much as the others.
            **device_hours(rec.rows, cpus, gpus),
            "peak_rss_mb": _max(curve, "peak_rss_mb"),
            "cuda_max_allocated_mb": _max(curve, "cuda_max_allocated_mb"),
            "cuda_reserved_mb": _max(curve, "cuda_reserved_mb"),
            # Memory grew epoch after epoch (the trial logged the likely causes).
            "memory_growing": any(bool(r.get("memory_growing")) for r in rec.rows),
            "failures": rec.failures,  # retries after the training raised
            "error": rec.error,
            "error_file": rec.error_file,  # the trainer's traceback, where it raised
        })
    df = param_types.whole_numbers(pd.DataFrame(rows), records, params)
    if not df.empty:
        df = df.sort_values(metric, ascending=(mode == "min"), na_position="last", kind="stable")
    return df.reset_index(drop=True)


def _best(rows: list[dict], key: str, way: str):
    values = [r[key] for r in rows if _finite(r.get(key))]
    return (min(values) if way == "min" else max(values)) if values else None


def device_hours(rows: list[dict], cpus: float, gpus: float) -> dict[str, float]:
    """CPU-hours and GPU-hours of a trial's rows: its resources times the time its iterations took.
    A replayed epoch (tuning.compare.recorded) is charged what its recorded epoch cost, on the recorded run's
    resources: what real training would have spent, not the milliseconds the replay took."""
    replayed = [r["replayed"] for r in rows if isinstance(r.get("replayed"), dict)]
    seconds = sum(r["time_this_iter_s"] for r in rows
                  if _finite(r.get("time_this_iter_s")) and not isinstance(r.get("replayed"), dict))
    return {"cpu_hours": cpus * seconds / 3600 + math.fsum(r["cpu_hours"] for r in replayed),
            "gpu_hours": gpus * seconds / 3600 + math.fsum(r["gpu_hours"] for r in replayed)}


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


def rank_key(epochs: int, value: float, max_epochs: int, mode: str) -> tuple:
    """Sorts results best first, as the BOHB paper counts an incumbent: the furthest budget first
    (the full budget above all), then the metric. One rule for best_config.json, the test
    evaluation, the summary, the report and warm start."""
    return (-min(epochs / max_epochs, 1.0), value if mode == "min" else -value)


def incumbent(trials: pd.DataFrame, metric: str = "loss", mode: str = "min",
              max_epochs: int | None = None) -> tuple[dict | None, str]:
    """(the best trial's row, a note): the best final metric among trials that trained the full
    budget; when none did, the best at the highest budget a trial reached, which the note says.
    Diverged trials (their metric is a stand-in) never count."""
    if trials.empty or metric not in trials:
        return None, ""
    ok = trials[trials[metric].notna() & ~_truthy(trials.get("diverged"), len(trials))]
    if ok.empty:
        return None, ""
    top = int(max(ok["epochs"])) if max_epochs is None else max_epochs
    keys = [rank_key(int(e), float(v), top, mode) for e, v in zip(ok["epochs"], ok[metric])]
    best = min(range(len(keys)), key=keys.__getitem__)
    row = {k: _plain(v) for k, v in ok.iloc[best].items()}
    reached = min(int(row["epochs"]), top)
    note = "" if reached >= top else (
        f"no trial trained the full budget of {top} epochs: this is the best at {reached}, the furthest any got")
    return row, note


def _truthy(column, n: int) -> pd.Series:
    """A boolean column as read back from CSV (strings) or kept in memory (bools); none: all False."""
    if column is None:
        return pd.Series([False] * n)
    return column.map(truthy).astype(bool)


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v)


def _plain(v):
    if hasattr(v, "item"):
        v = v.item()
    if isinstance(v, float) and math.isnan(v):
        return None
    return v
