"""A finished tuning.run as a benchmark: the trainer ``replay:DIR`` serves its recorded learning curves.

Retraining to compare strategies costs what training costs (experiments/cifar_strategies: about 71
hours on the 2-core development machine, docs/comparisons.md). The field compares them on recorded curves instead
(HPOBench, NAS-Bench-201, LCBench, YAHPO Gym), and Syne Tune's simulator replays tabulated curves
with their recorded times so that asynchronous schedulers see results in the order real training
delivered them. Any results dir of tuning.run (run.json, epochs.csv) is such a table:

- the parameters and their ranges are the recorded run's declaration (run.json), and so are the
  metric, its mode and the scheduler settings;
- epoch e of a trial returns the metrics recorded at epoch e by the nearest recorded configuration
  that reached epoch e. Nearest is measured on each parameter's declared scale: log for LogUniform,
  linear for Uniform and IntUniform, each divided by its range so that no parameter outweighs
  another; a Choice must match (where no recorded configuration has the value: fewest mismatches);
- the epoch waits its recorded time_this_iter_s times a scale (TIME_SCALE, or the space's fixed
  "time_scale") and reports the recorded time as its own, so Tune's clocks and the tables say what
  training took; each row carries the recorded trial it replays and that epoch's recorded
  device-hours (under "replayed"), which tuning.results.device_hours charges.

What a replay cannot do: it knows only the recorded points (a continuous parameter is replayed on
the values that were recorded), and with one recorded run per configuration it has no training
noise: seeds differ only in what the strategies sample. Plain data, no Ray: the Tune trainable is
tuning/backend/replay.py. The end of this module sums up a replayed comparison for its report.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from tuning import record as records
from tuning import params as param_types
from tuning import conditions, results, spacejson, spaces
from tuning.cli import TuningError
from tuning.report.render import number

log = logging.getLogger(__name__)

PREFIX = "replay:"
# A recorded 142 s epoch waits 0.142 s, long beside Tune's own time per result, so results still
# arrive in the recorded order; one replayed 16 x 16 grid took 22 to 63 s on the 2-core machine.
TIME_SCALE = 1e-3
FIXED = ("time_scale",)  # the only fixed argument a replay takes


class ReplayError(TuningError):
    """A folder that cannot be replayed, or a replay asked for what was not recorded."""


def is_replay(trainer) -> bool:
    return isinstance(trainer, str) and trainer.startswith(PREFIX)


def folder_of(trainer: str) -> str:
    return trainer[len(PREFIX):]


@dataclass(frozen=True)
class Recorded:
    """A recorded run's learning curves, as a replay serves them."""

    folder: str  # as given: a report shows it, so a relative path stays relative
    params: dict  # name -> its recorded declaration (a spaces.Param)
    metric: str
    mode: str
    metrics: tuple  # every metric its trainer reported (columns of epochs.csv)
    trial_ids: tuple
    configs: tuple  # per recorded trial: {param: value}
    curves: tuple  # per recorded trial: {epoch: {"metrics": {...}, "seconds": s, "diverged": bool}}
    cpus: float  # per trial, as recorded: what its epochs are charged
    gpus: float
    parallelism: int | None  # trials that trained at once; None where the rows cannot tell
    declaration: dict  # the recorded space (spacejson.to_json): the replay's scheduler settings

    @property
    def max_epochs(self) -> int:
        return max(max(c) for c in self.curves)


# ---------------------------------------------------------------- reading a recorded run

def _record(folder: str, what: str) -> tuple[records.RunRecord, dict, pd.DataFrame]:
    """(record, parameters, epochs table) of the run in `folder`; what it lacks is one line."""
    rec = records.read(Path(folder), what)
    try:
        epochs = results.read_table(Path(folder), "epochs")
    except results.ReadError as exc:
        raise ReplayError(str(exc)) from None
    if epochs is None:
        raise ReplayError(f"{what}: {folder} has no epochs.csv (the run is {rec.status!r}); a run writes its tables "
                          f"when it ends: replay a finished run, or finish this one with python -m tuning.run "
                          f"--resume {folder}")
    several = {k: v for k, v in ((k, rec.declaration.get(k)) for k in ("objectives", "constraints"))
               if v and (k == "constraints" or len(v) > 1)}
    if several:  # its curves replayed by one metric would rank trials the run itself did not (infeasible ones first)
        raise ReplayError(f"{what}: the run in {folder} has {' and '.join(several)} "
                          f"({'; '.join(f'{k} {v}' for k, v in several.items())}): a replay compares strategies by "
                          "one metric without constraints, so it cannot replay this run")
    decls = records.declarations(rec)
    if not decls:
        raise ReplayError(f"{what}: {folder}/run.json declares no parameters: it was written before runs "
                          "recorded their declaration, so the replay cannot know the ranges")
    try:
        return rec, spacejson.from_declarations(decls), epochs
    except spaces.SpaceError as exc:
        raise ReplayError(f"{what}: {folder}/run.json: {exc}") from None


def read(folder: str, what: str = "") -> Recorded:
    """The curves recorded in `folder` (a tuning.run results dir: run.json, its epochs table). What it
    lacks is one line, opened by `what` (a flag, a trainer)."""
    what = what or f"trainer {PREFIX}{folder}"
    rec, params, epochs = _record(folder, what)
    missing = [c for c in ["trial_id", "training_iteration", *params, rec.metric] if c not in epochs.columns]
    if missing:
        raise ReplayError(f"{what}: the epochs table in {folder} lacks the columns {missing}: not the epochs of "
                          "this run.json")
    epochs = epochs[epochs[rec.metric].notna() & epochs["training_iteration"].notna()]
    if epochs.empty:
        raise ReplayError(f"{what}: the epochs table in {folder} holds no epoch with a {rec.metric}: there is "
                          "nothing to replay")
    names = [c for c in epochs.columns if c not in params and results.is_metric(c)]
    ids, configs, curves = [], [], []
    for trial_id, rows in epochs.groupby("trial_id", sort=False):
        first = rows.iloc[0]
        ids.append(trial_id)
        # A choice of lists or dicts is JSON text in the table (params.config_cells): its value again.
        config = {k: params[k].from_cell(first[k]) if _json_choice(params[k]) else spaces.plain(first[k])
                  for k in params}
        configs.append(conditions.drop_inactive(params, config))  # an inactive parameter's empty cell is no value
        curves.append({int(r["training_iteration"]): _epoch(r, names) for _, r in rows.iterrows()})
    if rec.status != "finished":
        log.warning("%s: the run in %s is %r: replaying the epochs it recorded, up to %d", what, folder, rec.status,
                    int(epochs["training_iteration"].max()))
    resources = rec.resources_per_trial
    return Recorded(folder=str(folder), params=params, metric=rec.metric, mode=rec.mode, metrics=tuple(names),
                    trial_ids=tuple(ids), configs=tuple(configs), curves=tuple(curves),
                    cpus=float(resources.cpu), gpus=float(resources.gpu),
                    parallelism=_parallelism(epochs), declaration={"strategy": rec.strategy, **(rec.declaration or {})})


def _epoch(row: pd.Series, names: list[str]) -> dict:
    seconds = row.get("time_this_iter_s")
    return {"metrics": {m: spaces.plain(row[m]) for m in names if pd.notna(row[m])},
            "seconds": float(seconds) if pd.notna(seconds) else 0.0,
            "diverged": results.truthy(row.get("diverged"))}


def _parallelism(epochs: pd.DataFrame) -> int | None:
    """How many trials trained at once: the most epochs in progress at the middle of any epoch (each
    ends at Tune's timestamp, in whole seconds, and lasted its time_this_iter_s)."""
    if not {"timestamp", "time_this_iter_s"} <= set(epochs.columns):
        return None
    rows = epochs[["timestamp", "time_this_iter_s"]].dropna().astype(float)
    if rows.empty:
        return None
    end = rows["timestamp"].to_numpy()
    start = end - rows["time_this_iter_s"].to_numpy()
    middle = (start + end) / 2
    running = np.searchsorted(np.sort(start), middle, "left") - np.searchsorted(np.sort(end), middle, "right")
    return max(1, int(running.max()))


def space(recorded: Recorded) -> spaces.Space:
    """The space a replay searches: the recorded declaration, metric and scheduler settings, with
    as many epochs as were recorded. A trial uses one CPU and no GPU: it only waits."""
    d = recorded.declaration
    keep = {k: d[k] for k in ("strategy", "num_samples", "grid_repeats", "grace_period", "reduction_factor",
                              "diverged_value", "seed") if k in d}
    return spaces.Space(params=dict(recorded.params), trainer=PREFIX + recorded.folder, metric=recorded.metric,
                        mode=recorded.mode, max_epochs=recorded.max_epochs, cpus_per_trial=1, gpus_per_trial=0,
                        name=f"replay-{Path(recorded.folder).resolve().name}", **keep)


def check(recorded: Recorded, space: spaces.Space, max_epochs: int, what: str = "") -> None:
    """Refuse, before a trial starts, a replay that asks for what was not recorded."""
    what = what or f"trainer {PREFIX}{recorded.folder}"
    if max_epochs > recorded.max_epochs:
        raise ReplayError(f"{what}: {max_epochs} epochs asked for, but {recorded.folder} recorded at most "
                          f"{recorded.max_epochs}: ask for {recorded.max_epochs} or fewer")
    if set(space.params) != set(recorded.params):
        raise ReplayError(f"{what}: the space searches {sorted(space.params)}, the recorded run "
                          f"{sorted(recorded.params)}: a replay searches the recorded parameters")
    for k, p in space.params.items():
        if type(p) is not type(recorded.params[k]):
            raise ReplayError(f"{what}: {k} is a {type(p).__name__} here and a {type(recorded.params[k]).__name__} "
                              "in the recorded run: declare it as recorded (replay.space gives the recorded space)")
    other = sorted(set(space.fixed) - set(FIXED))
    if other:
        raise ReplayError(f"{what}: a replay trains nothing, so it takes no fixed {other}; its only fixed "
                          f"setting is time_scale (default {TIME_SCALE:g})")


def _json_choice(p) -> bool:
    return isinstance(p, spaces.Choice) and param_types.json_cells(p.values)


# ---------------------------------------------------------------- the nearest recorded configuration

def _position(p: spaces.Param, value):
    """Where `value` sits on its parameter's declared scale, one unit being the whole range."""
    if isinstance(p, spaces.Choice):
        return value
    if isinstance(p, spaces.LogUniform):
        return math.log(value) / math.log(p.high / p.low)
    return value / (p.high - p.low)


def order(recorded: Recorded, config: dict) -> list[int]:
    """The recorded trials, nearest to `config` first: fewest mismatches (a Choice's value, or a
    parameter active in one of the two configurations only: another branch of a conditional space),
    then the distance over the other parameters both have, on their declared scales, then the
    recorded order. `config` holds its active parameters only, as the strategies propose it."""
    mine = {k: _position(p, config[k]) for k, p in recorded.params.items() if k in config}

    def key(i: int) -> tuple:
        theirs = recorded.configs[i]
        mismatches = sum((k in theirs) != (k in config) or (k in config and isinstance(p, spaces.Choice)
                                                             and theirs[k] != config[k])
                         for k, p in recorded.params.items())
        distance = math.fsum((mine[k] - _position(p, theirs[k])) ** 2 for k, p in recorded.params.items()
                             if not isinstance(p, spaces.Choice) and k in mine and k in theirs)
        return mismatches, distance, i

    return sorted(range(len(recorded.trial_ids)), key=key)


def epoch(recorded: Recorded, nearest: list[int], t: int) -> dict:
    """The result of a trial's epoch t: what the first of `nearest` (order()) that reached epoch t
    recorded there, with its recorded time and device-hours. A recorded epoch that diverged ends
    the trial, as it ended the recorded one."""
    i = next(i for i in nearest if t in recorded.curves[i])  # check() refused epochs never recorded
    row = recorded.curves[i][t]
    hours = row["seconds"] / 3600
    return {**row["metrics"], "epoch": t, "time_this_iter_s": row["seconds"], "diverged": row["diverged"],
            **({"done": True} if row["diverged"] else {}),
            "replayed": {"trial_id": recorded.trial_ids[i], "cpu_hours": recorded.cpus * hours,
                         "gpu_hours": recorded.gpus * hours}}


# ---------------------------------------------------------------- a replayed comparison, summed up

def describe(recorded: Recorded, max_t: int) -> dict:
    """What a comparison's experiment.json keeps of the recorded run, so that its report needs no
    other file: the declarations, every recorded configuration with its metrics at max_t (none
    where it stopped before), best first, and the best of them."""
    trials = []
    for tid, cfg, curve in zip(recorded.trial_ids, recorded.configs, recorded.curves):
        at = curve.get(max_t)
        trials.append({"trial_id": tid, **cfg, "recorded_epochs": max(curve),
                       **(at["metrics"] if at and not at["diverged"] else {})})
    sign = 1 if recorded.mode == "min" else -1
    trials.sort(key=lambda r: (recorded.metric not in r, sign * r.get(recorded.metric, 0)))
    if recorded.metric not in trials[0]:
        raise ReplayError(f"{recorded.folder}: no recorded configuration reached epoch {max_t} without diverging")
    return {"dir": recorded.folder, "recorded_trials": len(trials), "max_epochs": recorded.max_epochs,
            "declarations": spacejson.declarations(recorded.params), "parallelism": recorded.parallelism,
            "resources_per_trial": {"cpu": recorded.cpus, "gpu": recorded.gpus}, "time_scale": TIME_SCALE,
            "best": trials[0]["trial_id"], "optimum": trials[0][recorded.metric], "trials": trials}


def outcomes(runs: pd.DataFrame, exp: dict) -> pd.DataFrame:
    """One row per run: the recorded configuration its final incumbent replays, whether that is the
    best recorded one, and the budget and device-hours at which its incumbent first was the best
    one (NaN where it never was). `runs` as analysis.load gives it (value: regret, lower is better)."""
    best, rows = exp["replay"]["best"], []
    for run_id, r in runs.groupby("run_id", sort=False):
        full = r[r["full_fidelity"] & r["value"].notna()]
        final = full.loc[full["value"].idxmin()] if len(full) else None
        hit = full[full["recorded_trial"] == best]
        rows.append({"run_id": run_id, "strategy": r["strategy"].iloc[0], "seed": r["seed"].iloc[0],
                     "final_recorded_trial": None if final is None else final["recorded_trial"],
                     "ended_on_best": final is not None and final["recorded_trial"] == best,
                     "budget_to_best": hit["consumed_budget"].iloc[0] if len(hit) else math.nan,
                     "device_hours_to_best": hit["device_hours"].iloc[0] if len(hit) else math.nan})
    return pd.DataFrame(rows)


def fates(runs: pd.DataFrame, exp: dict, strategies: list[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per recorded configuration (best first) and strategy: how many trials ended on it (the
    configuration a trial replayed at its last epoch) and how many of those trained all max_t
    epochs; and, for the strategies that stop trials early, the epoch each of them ended at."""
    info, max_t = exp["replay"], int(exp["max_t"])
    last = runs.sort_values("training_iteration", kind="stable").groupby(["run_id", "trial_id"]).tail(1)
    recorded = pd.DataFrame(info["trials"])
    shown = [c for c in [*exp.get("params", []), exp.get("metric", "loss"), "accuracy"] if c in recorded.columns]
    counts = recorded[["trial_id", *shown]].copy()
    ends = counts[["trial_id", *(p for p in exp.get("params", []) if p in recorded.columns)]].copy()
    empty = pd.Series(dtype=float)
    for s in strategies:
        ended = last[last["strategy"] == s]
        by = {t: g["training_iteration"] for t, g in ended.groupby("recorded_trial")}
        counts[s] = [f"{len(e)} ({int((e >= max_t).sum())} full)" if len(e) else "0"
                     for e in (by.get(t, empty) for t in counts["trial_id"])]
        if (ended["training_iteration"] < max_t).any():
            ends[s] = [", ".join(f"{int(k)}: {v}" for k, v in sorted(e.value_counts().items()))
                       for e in (by.get(t, empty) for t in ends["trial_id"])]
    return counts, ends


def report_blocks(runs: pd.DataFrame, exp: dict, strategies: list[str]) -> list[tuple]:
    """The report's section on a replayed comparison (tuning.report renders the blocks)."""
    info, metric, max_t = exp["replay"], exp.get("metric", "loss"), int(exp["max_t"])
    out = outcomes(runs, exp)
    best = info["trials"][0]
    params = exp.get("params", [])
    described = ", ".join(f"{p} {number(best[p])}" for p in params if p in best)  # its active parameters
    extra = f", accuracy {number(best['accuracy'])}" if "accuracy" in best else ""
    table = pd.DataFrame([{
        "strategy": s, "runs": len(o),
        "ended on the best recorded configuration": f"{int(o['ended_on_best'].sum())} of {len(o)}",
        "found it at all": f"{int(o['device_hours_to_best'].notna().sum())} of {len(o)}",
        "budget until found (median)": number(o["budget_to_best"].median()),
        "device-hours until found (median)": number(o["device_hours_to_best"].median()),
        "device-hours until found (range)": (f"{number(o['device_hours_to_best'].min())}-"
                                             f"{number(o['device_hours_to_best'].max())}"
                                             if o["device_hours_to_best"].notna().any() else "n/a")}
        for s in strategies for o in [out[out["strategy"] == s]]])
    counts, ends = fates(runs, exp, strategies)
    fmt = lambda df: df.apply(lambda col: col.map(number))  # noqa: E731
    continuous = [f"{p} on {len({t[p] for t in info['trials'] if p in t})} values"
                  for p, d in info["declarations"].items()
                  if d["type"] in ("LogUniform", "Uniform")]
    return [
        ("h2", "Replayed: which recorded configuration each strategy found"),
        ("p", f"Every evaluation replays the learning curves recorded in {info['dir']} ({info['recorded_trials']} "
              f"configurations, up to {info['max_epochs']} epochs): epoch e of a trial returns what the nearest "
              f"recorded configuration reported at epoch e, after its recorded epoch time scaled down, and is "
              f"charged that epoch's recorded device-hours. The best recorded configuration at {max_t} epochs is "
              f"trial {info['best']} ({described}): {metric} {number(best[metric])}{extra}; regret is how far "
              f"a result's {metric} is from that, so a regret of 0 means the strategy found it."),
        ("table", table),
        ("p", "Ended on: the run's final incumbent (best full-fidelity result within the budget) replays the best "
              "recorded configuration. Found: its incumbent was that configuration at some point; budget (full "
              "evaluations) and device-hours until found are the run's totals when that first full-fidelity "
              "result arrived, median and range over the runs that found it."),
        ("h2", "What each strategy did with each recorded configuration"),
        ("p", f"Recorded configurations best first, with their recorded metrics at {max_t} epochs. A strategy's "
              f"cell: the trials, over all its seeds, whose last epoch replayed that configuration, and how many of "
              f"them trained all {max_t} epochs."),
        ("table", fmt(counts.drop(columns="trial_id"))),
        *([("p", "Where those trials ended (epoch: trials), for the strategies with trials that ended early. A trial "
                 "ended where its scheduler stopped (or paused it for good) or where the run's budget ran out "
                 "while it trained (at most the trials running at the end)."),
           ("table", fmt(ends.drop(columns="trial_id")))] if set(ends) - {"trial_id", *params} else []),
        ("p", "Limits: a replay knows only the recorded points" + (f" ({'; '.join(continuous)})" if continuous
                                                                  else "") +
              ", so a continuous parameter is replayed on the values that were recorded; and with one recorded "
              "run per configuration there is no training noise: the seeds differ only in what the strategies "
              "sample and in the order results arrive."),
    ]
