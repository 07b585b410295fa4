"""Searches that grow, as plain data: a time budget's duration, earlier runs read back for a warm
start (checked against the space), their best configurations, and what an extension records.
tuning.backend turns these into Tune objects; no Ray here.
"""

from __future__ import annotations

import math
import re
import time
from pathlib import Path

from tuning import record as records
from tuning import objectives, results, spacejson, spaces
from tuning.cli import UsageError

_UNITS = {"s": 1, "m": 60, "h": 3600}


def parse_duration(text: str) -> float:
    """'90s', '30m', '2h' (or plain seconds) as seconds; anything else is bad input."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", text or "")
    if not m or float(m[1]) <= 0:
        raise UsageError(f"--time-budget {text!r}: give a positive duration such as 90s, 30m or 2h")
    return float(m[1]) * _UNITS[m[2] or "s"]


def _mismatch(space: spaces.Space, rec: records.RunRecord, rows: dict[str, list[dict]]) -> str | None:
    """The first parameter in which an earlier run differs from the space, said in words."""
    theirs = records.declarations(rec)
    try:
        parsed = spacejson.from_declarations(theirs)
    except spaces.SpaceError as exc:
        return f"its run.json's parameter declarations cannot be read ({exc})"
    for name in sorted(set(space.params) | set(theirs)):
        if name not in theirs:
            return f"parameter {name!r} is not in it"
        if name not in space.params:
            return f"it searched parameter {name!r}, which the space does not declare"
        if parsed[name] != space.params[name]:
            return f"parameter {name!r} was declared {theirs[name]}, not as the space declares it now"
    for trial_rows in rows.values():
        for row in trial_rows[:1]:
            config = row.get("config", {})
            on = spaces.active(space, config)
            for name, p in space.params.items():
                if name in on and not spaces.contains(p, config.get(name)):
                    return f"parameter {name!r} has value {config.get(name)!r} outside the declaration"
                if name not in on and name in config:
                    return f"parameter {name!r} is set where its conditions make it inactive"
    return None


Run = tuple[records.RunRecord, dict[str, list[dict]]]


def earlier_runs(dirs: list[str], space: spaces.Space) -> list[Run]:
    """(record, rows by trial) of each earlier run, refused in one line when it is not a run of
    this space, its parameters differ from the declaration, or it has no results."""
    out = []
    for d in dirs:
        folder = Path(d).absolute()
        try:
            rec = records.read(folder, "--warm-start")
        except records.RecordError as exc:  # it names the flag, the folder and why
            raise UsageError(str(exc)) from None
        if space.name and rec.space and rec.space != space.name:
            raise UsageError(f"--warm-start {folder}: a run of space {rec.space!r}, not {space.name!r}; "
                             "warm-start from runs of the same space")
        rows = results.read_rows(folder / results.ROWS_FILE)
        problem = _mismatch(space, rec, rows)
        if problem:
            raise UsageError(f"--warm-start {folder}: {problem}; warm-start from runs of this declaration")
        if not rows:
            raise UsageError(f"--warm-start {folder}: it holds no results")
        out.append((rec, rows))
    return out


def best_configs(runs: list[Run], space: spaces.Space, k: int) -> list[dict]:
    """The k best earlier configurations, ranked as the incumbent is (results.rank_key): the
    furthest budget first (a loss after 1 of 16 epochs is not the configuration's result), then
    the last value. A diverged trial's stand-in value never counts. With several objectives or
    constraints, in the order tuning.objectives ranks trials: the front first."""
    if objectives.multi(space):
        return _front_first(runs, space, k)
    ranked = []
    for rec, rows in runs:
        for trial_rows in rows.values():
            last = max(trial_rows, key=lambda r: r.get("training_iteration", 0))
            value = last.get(space.metric)
            if isinstance(value, (int, float)) and math.isfinite(value) and not last.get("diverged"):
                key = results.rank_key(last.get("training_iteration", 0), value, rec.max_epochs, space.mode)
                ranked.append((key, {p: v for p, v in last["config"].items() if p in space.params}))
    ranked.sort(key=lambda t: t[0])
    out = []
    for _, config in ranked:
        if config not in out:
            out.append(config)
    return out[:k]


def _front_first(runs: list[Run], space: spaces.Space, k: int) -> list[dict]:
    """best_configs over several objectives or constraints: each earlier trial's last result, its
    budget as the fraction of its run's, ranked as objectives.annotate ranks a trials table (Deb's
    rules); diverged trials and those without the first objective left out."""
    import pandas as pd

    rows, configs = [], {}
    for i, (rec, by_trial) in enumerate(runs):
        for trial_id, trial_rows in by_trial.items():
            last = max(trial_rows, key=lambda r: r.get("training_iteration", 0))
            if last.get("diverged") or not results.is_number(last.get(space.metric)):
                continue
            key = f"{i}/{trial_id}"
            configs[key] = {p: v for p, v in last["config"].items() if p in space.params}
            rows.append({"trial_id": key, "epochs": min(last.get("training_iteration", 0) / rec.max_epochs, 1.0),
                         "diverged": False, **{m: last.get(m) for m in objectives.required(space)}})
    if not rows:
        return []
    out = []
    for key in objectives.annotate(pd.DataFrame(rows), space, max_epochs=1)["trial_id"]:
        if configs[key] not in out:
            out.append(configs[key])
    return out[:k]


def all_rows(runs: list[Run]) -> list[dict]:
    return [row for _, rows in runs for trial_rows in rows.values() for row in trial_rows]


def record_extension(rec: records.RunRecord, samples: int) -> int:
    """Note an extension in the run's record; returns its number in the run's seed lineage."""
    rec.extensions.append({"at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "samples": samples})
    rec.num_samples += samples
    return len(rec.extensions)
