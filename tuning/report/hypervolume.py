"""The numbers of a multi-objective run's report: which results count, the reference point, and
the hypervolume of the front as the run went, against wall time and against epochs consumed.

Hypervolume (Zitzler and Thiele, 1998) is the size of the region of objective space that the
front dominates and that dominates the reference point: one number that grows when a new result
joins the front or pushes it further. It is computed with moocore (López-Ibáñez et al.), a kept
library, never by hand. The results it counts are those tuning.objectives ranks: feasible, not
diverged, trained the full budget with every objective measured; so the run's last value is the
hypervolume of pareto.csv. Plain tables in, plain tables out: no figures here (tuning.report.front)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from tuning import objectives
from tuning.report.analysis import ReportError

# The default reference point lies this share of each objective's range beyond its worst counted
# value, so the extreme members of the front add a sliver each instead of nothing (Ishibuchi et al.,
# "How to specify a reference point in hypervolume calculation", 2018, pad the nadir the same way).
PAD = 0.1


@dataclass(frozen=True)
class Goals:
    """What a run ranks its trials by, as run.json keeps it: the objectives in order (name ->
    "min"/"max") and the constraints (name -> (operator, bound)). It reads as a space does where
    tuning.objectives asks one (objectives, constraints, metric, mode)."""

    objectives: dict
    constraints: dict
    metric: str
    mode: str

    @property
    def several(self) -> bool:
        return len(self.objectives) > 1


def goals(declaration: dict, metric: str, mode: str) -> Goals | None:
    """A run's objectives and constraints from its record's declaration; None for a run of one
    metric with no constraint (whose report stays as it always was)."""
    ways = declaration.get("objectives")
    if not ways:
        return None
    bounds = {k: objectives.bound(k, c) for k, c in (declaration.get("constraints") or {}).items()}
    return Goals(dict(ways), bounds, metric, mode)


def counted(trials: pd.DataFrame) -> pd.DataFrame:
    """The results the front and the hypervolume are made of: the trials tuning.objectives ranked
    (annotate gives them a pareto_rank)."""
    if objectives.RANK not in trials:
        return trials.iloc[0:0]
    return trials[pd.to_numeric(trials[objectives.RANK], errors="coerce").notna()]


def ends(values: pd.Series, way: str) -> tuple[float, float]:
    """(worst, best) of an objective's values under its direction."""
    v = pd.to_numeric(values).astype(float)
    return (v.max(), v.min()) if way == "min" else (v.min(), v.max())


def _maximise(g: Goals) -> list[bool]:
    return [way == "max" for way in g.objectives.values()]


@dataclass(frozen=True)
class Reference:
    """The reference point, in each objective's own units, and how it was chosen (said on the plot)."""

    point: dict
    how: str

    def text(self) -> str:
        return ", ".join(f"{k} {v:.6g}" for k, v in self.point.items())


def reference(trials: pd.DataFrame, g: Goals, declared=None) -> Reference | None:
    """The declared reference point (a dict by objective, or a list in their order), else the
    default: each objective's worst counted value, moved PAD of the counted values' range further
    (PAD of the value itself where they are all equal, 1 where that is 0). None with nothing counted."""
    names = list(g.objectives)
    if declared is not None:
        values = [declared.get(k) for k in names] if isinstance(declared, dict) else list(declared)
        if len(values) != len(names) or not all(isinstance(v, (int, float)) for v in values):
            raise ReportError(f"reference point {declared!r}: give one number per objective, for {', '.join(names)}")
        return Reference(dict(zip(names, map(float, values))), "declared by the space")
    rows = counted(trials)
    if rows.empty:
        return None
    point = {}
    for k, way in g.objectives.items():
        worst, best = ends(rows[k], way)
        span = abs(worst - best) or abs(worst) or 1.0
        point[k] = float(worst + (PAD * span if way == "min" else -PAD * span))
    return Reference(point, f"the worst value of each objective among the {len(rows)} counted results, "
                            f"{PAD:.0%} of their range further")


def hypervolume(rows: pd.DataFrame, g: Goals, ref: Reference) -> float:
    """moocore's hypervolume of the rows' objective values against the reference point; points that
    do not dominate it add nothing, and an empty set is 0."""
    if rows.empty:
        return 0.0
    import moocore

    points = rows[list(g.objectives)].to_numpy(dtype=float)
    return float(moocore.hypervolume(points, ref=list(ref.point.values()), maximise=_maximise(g)))


def anytime(trials: pd.DataFrame, epochs: pd.DataFrame, g: Goals, ref: Reference, *, max_epochs: int,
            started: float | None) -> pd.DataFrame:
    """The hypervolume after each counted result arrived: one row per such result, in arrival order,
    with its trial_id, when it arrived (time_s, seconds since the run started) and the epochs all
    trials had consumed by then (epochs, counted as the report's best-so-far figure counts them).
    A result arrives with its trial's full-budget epoch; its values are the trial's final ones."""
    import moocore

    rows = counted(trials)
    cols = ["trial_id", "time_s", "epochs", "hypervolume"]
    if rows.empty or epochs.empty:
        return pd.DataFrame(columns=cols)
    when = epochs.assign(_at=epochs["ended_at"].fillna(epochs["timestamp"]) if "ended_at" in epochs
                         else epochs["timestamp"])
    when = when.sort_values(["_at", "time_total_s"], kind="stable").reset_index(drop=True)
    when["_consumed"] = np.arange(1, len(when) + 1)
    t0 = started if started is not None else float((when["_at"] - when["time_total_s"]).min())
    full = when[pd.to_numeric(when["training_iteration"]) >= max_epochs].drop_duplicates("trial_id")
    arrived = full.set_index("trial_id").reindex(rows["trial_id"])
    order = rows.assign(_at=arrived["_at"].to_numpy(dtype=float), _consumed=arrived["_consumed"].to_numpy(dtype=float))
    order = order.sort_values(["_at", "_consumed"], na_position="last", kind="stable")
    points = order[list(g.objectives)].to_numpy(dtype=float)
    signs = np.array([-1.0 if m else 1.0 for m in _maximise(g)])
    r, front, out = list(ref.point.values()), np.empty((0, len(signs))), []
    for p in points:
        # Only the front so far matters: a dominated result adds nothing, so the set stays small.
        front = moocore.filter_dominated(np.vstack([front, p * signs]))
        out.append(float(moocore.hypervolume(front * signs, ref=r, maximise=_maximise(g))))
    return pd.DataFrame({"trial_id": order["trial_id"].to_numpy(), "time_s": order["_at"].to_numpy() - t0,
                         "epochs": order["_consumed"].astype("Int64").to_numpy(), "hypervolume": out}, columns=cols)
