"""Several objectives and constraints on reported metrics: their declaration, checked, and the one
ranking every reader of a run shares (trials.csv's order, the Pareto front, the incumbent).

    Space(params=..., objectives={"loss": "min", "latency_ms": "min"},
          constraints={"peak_mem_gb": ("<=", 4)})

A space with one metric (metric=, mode=) has no objectives here and behaves as it always did;
objectives={"loss": "min"} without constraints is that same space. With several objectives, or any
constraint, a run ranks trials by Deb's rules (Deb, 2000), as Optuna's samplers do: a feasible
trial before an infeasible one; feasible ones by non-domination rank, then by the first objective;
infeasible ones by their total violation. The front is computed with moocore (non-dominated
sorting), not by hand. Plain data: no Ray, no spaces import (spaces imports this module).
"""

from __future__ import annotations

import math
import numbers
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pandas where a table is ranked: `import tuning` stays light
    import pandas as pd

DIRECTIONS = ("min", "max")
OPERATORS = ("<=", ">=")
# What runs a space with several objectives or a constraint: ASHA, Hyperband, BOHB and adaptive
# promote at their rungs by Deb's rules and non-dominated sorting (tuning/backend/mo.py). The median
# rule compares one metric's running mean with the others' median, and a vector has no median
# that orders trials, so it refuses.
STRATEGIES = ("grid", "random", "tpe", "asha", "hyperband", "bohb", "adaptive")
NOT_YET = "the median stopping rule compares one metric with the median of the others' running means, and "
WHY_NOT = {"several objectives": "several objectives have no median that orders trials",
           "a constraint": "a median of one metric cannot put feasible trials before infeasible ones"}
# A constraint declared ("<=", bound, GROWS) is on a metric that can only grow (peak memory,
# elapsed time): a trial past its bound can never come back under it, so it is stopped there.
GROWS = "grows"
# trials.csv's columns for such a run, after the others.
FEASIBLE, VIOLATION, RANK = "feasible", "violation", "pareto_rank"
# The trials table's own columns beside parameters and metrics (results.trials_table, annotate): no
# metric of a space may take one's name (tuning.spaces), and another metric is renamed (results.kept_as).
TABLE_COLUMNS = {"trial_id", "strategy", "epochs", "status", "stopped_early", "ended_itself", "resumed_at",
                 "recomputed_epochs",
                 "wall_time_s", "cpu_hours", "gpu_hours", "failures", "error", "error_file", FEASIBLE, VIOLATION,
                 RANK}


# Keys of a result that Ray Tune acts on or fills in itself ("done": True ended a trial after its
# first epoch; a 0-based training_iteration cut every trial short), and those tuning adds to each:
# a trainer's metric of such a name is renamed <name>_reported, as a table column's is.
RESERVED_KEYS = {"done", "training_iteration", "time_total_s", "time_this_iter_s", "timestamp", "date", "pid",
                 "hostname", "node_ip", "config", "should_checkpoint", "iterations_since_restore",
                 "time_since_restore", "timesteps_total", "timesteps_since_restore", "episodes_total",
                 "checkpoint_dir_name", "experiment_id", "experiment_tag",
                 "returned", "restored_from", "node_id", "ended_at", "metric_error"}


def _example(names) -> str:
    return "{" + ", ".join(f"{n!r}: 'min'" for n in names) + "}"


def declare(metric, mode, objectives, constraints) -> tuple[str, str, dict | None, dict]:
    """(metric, mode, objectives, constraints) as a Space keeps them, or ValueError saying what to
    change. metric and mode become the first objective and its direction, so every single-metric
    reader (the progress table, a diverged trial's stand-in value) goes on working on it;
    objectives is None where there is one objective and no constraint (that space is a plain one).
    Ray's and Optuna's spelling, metric=[...] with mode=[...], is taken as objectives."""
    if isinstance(metric, (list, tuple)):
        if objectives is not None:
            raise ValueError(f"metric={list(metric)!r} and objectives= both name objectives: declare them once, "
                             f"objectives={_example(metric)}")
        if not isinstance(mode, (list, tuple)):
            raise ValueError(f"metric={list(metric)!r} names {len(metric)} objectives: give each its direction, "
                             f"objectives={_example(metric)} (or mode=[...] with one 'min' or 'max' per metric)")
        if len(mode) != len(metric):
            raise ValueError(f"metric={list(metric)!r} names {len(metric)} objectives but mode={list(mode)!r} has "
                             f"{len(mode)}: give one 'min' or 'max' per metric")
        if any(not isinstance(m, str) for m in metric):
            raise ValueError(f"metric={list(metric)!r}: each objective is a metric's name, a string")
        if len(set(metric)) != len(metric):
            raise ValueError(f"metric={list(metric)!r} names a metric twice: name each objective once")
        objectives, metric, mode = dict(zip(metric, mode)), None, None
    elif isinstance(mode, (list, tuple)):
        if objectives is not None:  # metric is then the default 'loss', which the user never wrote
            raise ValueError(f"mode={list(mode)!r} and objectives= both give directions: objectives= says each "
                             "objective's, so drop mode=")
        raise ValueError(f"mode={list(mode)!r} gives several directions but metric={metric!r} names one metric: "
                         "declare objectives={'loss': 'min', 'latency_ms': 'min'} for several")
    elif not isinstance(metric, str) or not metric:
        raise ValueError(f"metric must be a metric's name, got {metric!r}")
    constraints = _constraints(constraints)
    if objectives is None:
        if mode not in DIRECTIONS:
            raise ValueError(f"mode must be 'min' or 'max', got {mode!r}")
        return metric, mode, ({metric: mode} if constraints else None), constraints
    objectives = _objectives(objectives)
    first, way = next(iter(objectives.items()))
    if metric is not None and metric not in (first, "loss"):  # "loss" is metric='s default: not a choice made
        raise ValueError(f"metric={metric!r} but objectives= starts with {first!r}: the first objective is the "
                         f"space's metric; drop metric= or put {metric!r} first")
    if mode is not None and mode not in (way, "min"):  # "min" is mode='s default
        raise ValueError(f"mode={mode!r} but objectives= says {first!r}: {way!r}: each objective's direction is "
                         "in objectives=; drop mode=")
    if len(objectives) == 1 and not constraints:
        return first, way, None, {}
    return first, way, objectives, constraints


def _objectives(objectives) -> dict:
    if not isinstance(objectives, dict) or not objectives:
        raise ValueError(f"objectives= takes a dict of metric names and directions, e.g. "
                         f"objectives={{'loss': 'min', 'latency_ms': 'min'}}, got {objectives!r}")
    for name, way in objectives.items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"objectives=: {name!r} is not a metric's name: use the name the trainer reports")
        if way not in DIRECTIONS:
            raise ValueError(f"objective {name!r} has direction {way!r}: use 'min' or 'max'")
    return dict(objectives)


def _constraints(constraints) -> dict:
    if constraints is None:
        return {}
    if not isinstance(constraints, dict):
        raise ValueError("constraints= takes a dict of metric names and bounds, e.g. "
                         f"constraints={{'peak_mem_gb': ('<=', 4)}}, got {constraints!r}")
    return {name: bound(name, c) for name, c in constraints.items()}


def bound(name, c) -> tuple:
    """One constraint as (operator, bound), or (operator, bound, "grows") for a metric that can only
    grow: ("<=", 4), ["<=", 4] (as JSON keeps it), "<= 4", ("<=", 4, "grows") or "<= 4 grows"."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"constraints=: {name!r} is not a metric's name: use the name the trainer reports")
    if isinstance(c, str):  # the bound may not start with an operator's character: '<=' alone has none
        m = re.fullmatch(r"\s*([<>=!]=?)\s*([^<>=!\s]\S*)\s*(\S+)?\s*", c)
        if not m:
            raise ValueError(f"constraint on {name!r} is {c!r}: give the operator and the bound, "
                             f"{{{name!r}: '<= 4'}} or {{{name!r}: ('>=', 0.9)}}")
        c = (m[1], _number(m[2]), *([m[3]] if m[3] else []))
    if not isinstance(c, (list, tuple)) or len(c) not in (2, 3):
        raise ValueError(f"constraint on {name!r} is {c!r}: give it as ('<=', bound) or ('>=', bound), "
                         "or ('<=', bound, 'grows') for a metric that only grows")
    op, value, *grows = c
    if op not in OPERATORS:
        raise ValueError(f"constraint on {name!r} uses {op!r}: use '<=' or '>=' (a value at the bound meets it)")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"constraint {name!r} {op} {value!r}: the bound must be a finite number")
    if grows and (grows[0] != GROWS or op != "<="):
        raise ValueError(f"constraint on {name!r} is {c!r}: the third item can only be 'grows', on a '<=' bound "
                         "(a metric that only grows can only come to exceed an upper bound)")
    return (op, float(value), GROWS) if grows else (op, float(value))


def _number(text: str):
    try:
        return float(text)
    except ValueError:
        return text


# ---------------------------------------------------------------- the command line

def parse_objective(text: str) -> tuple[str, str]:
    """--objective NAME:min|max."""
    name, _, way = text.rpartition(":")
    if not name or way not in DIRECTIONS:
        raise ValueError(f"--objective {text}: give NAME:min or NAME:max, e.g. --objective latency_ms:min")
    return name, way


def parse_constraint(text: str) -> tuple[str, tuple[str, float]]:
    """--constraint 'NAME<=BOUND' or 'NAME>=BOUND'; 'NAME<=BOUND grows' for a metric that only grows."""
    m = re.fullmatch(r"\s*([^<>=!\s]+)\s*([<>=!]=?)\s*([^<>=!\s]\S*?)(?:\s+(\S+))?\s*", text)
    if not m:
        raise ValueError(f"--constraint {text}: give NAME<=BOUND or NAME>=BOUND, e.g. --constraint 'peak_mem_gb<=4' "
                         "('peak_mem_gb<=4 grows' for a metric that only grows)")
    try:
        return m[1], bound(m[1], (m[2], _number(m[3]), *([m[4]] if m[4] else [])))
    except ValueError as exc:
        raise ValueError(f"--constraint {text}: {exc}") from None


# ---------------------------------------------------------------- a space's objectives

def of(space) -> dict[str, str]:
    """The space's objectives in order, name -> direction: its one metric where it declares none."""
    return dict(space.objectives) if space.objectives else {space.metric: space.mode}


def reference_point(point, objectives: dict | None) -> dict | None:
    """A declared reference point for hypervolume, as {objective: value} in the objectives' order,
    or ValueError saying what to change. Taken as a dict by objective or a list in their order."""
    if point is None:
        return None
    names = list(objectives or {})
    if len(names) < 2:
        raise ValueError(f"reference_point={point!r} is for several objectives; this space has one"
                         + (f" ({names[0]})" if names else "") + ": declare more objectives=, or drop reference_point")
    if isinstance(point, dict):
        if set(point) != set(names):
            raise ValueError(f"reference_point={point!r}: give one value for each objective, {', '.join(names)}")
        values = [point[k] for k in names]
    elif isinstance(point, (list, tuple)):
        values = list(point)
    else:
        raise ValueError(f"reference_point={point!r}: a dict by objective or a list in their order, "
                         f"e.g. {dict.fromkeys(names, 1.0)}")
    if len(values) != len(names):
        raise ValueError(f"reference_point={point!r} has {len(values)} values for {len(names)} objectives "
                         f"({', '.join(names)}): give one finite number per objective")
    bad = [f"{k}={v!r}" for k, v in zip(names, values)
           if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v)]
    if bad:
        raise ValueError(f"reference_point={point!r}: {', '.join(bad)} is not a finite number: give one finite "
                         "number per objective, worse than any result you care about")
    return dict(zip(names, map(float, values)))


def multi(space) -> bool:
    """Whether trials are ranked by more than one metric: several objectives, or a constraint."""
    return bool(space.objectives)


def required(space) -> list[str]:
    """Every metric a trial must report: the objectives, then the constrained metrics."""
    return list(dict.fromkeys([*of(space), *space.constraints]))


def describe(space) -> str:
    """'loss (min), latency_ms (min); subject to peak_mem_gb <= 4'."""
    text = ", ".join(f"{k} ({v})" for k, v in of(space).items())
    if space.constraints:
        text += "; subject to " + ", ".join(f"{k} {c[0]} {c[1]:g}" + (" (grows)" if c[2:] else "")
                                            for k, c in space.constraints.items())
    return text


def growing(constraints: dict) -> dict[str, float]:
    """The '<=' bounds on metrics declared to only grow: name -> bound."""
    return {k: c[1] for k, c in constraints.items() if tuple(c[2:]) == (GROWS,)}


def grown_past(values: dict, constraints: dict) -> str | None:
    """The first metric declared to only grow that is already past its bound in `values` (it can
    never come back under it), or None. A missing value is not past: only a measured one stops."""
    for name, b in growing(constraints).items():
        v = values.get(name)
        if isinstance(v, numbers.Real) and not isinstance(v, bool) and v > b:
            return name
    return None


def strategy_refusal(space, strategy: str) -> str | None:
    """Why `strategy` cannot search the space yet, or None."""
    if not multi(space) or strategy in STRATEGIES:
        return None
    what = "several objectives" if len(of(space)) > 1 else "a constraint"
    return (f"strategy {strategy} with {what} ({describe(space)}): {NOT_YET}{WHY_NOT[what]}; use --strategy asha "
            "(MO-ASHA) instead")


def amounts(values: dict, constraints: dict) -> dict[str, float]:
    """Each constraint's amount, Optuna's convention: above 0 violated by that much, 0 or below met.
    A metric missing or not a number violates its constraint infinitely."""
    out = {}
    for name, (op, b, *_) in constraints.items():
        v = values.get(name)
        ok = isinstance(v, numbers.Real) and not isinstance(v, bool) and not math.isnan(v)  # numpy's too
        out[name] = (v - b if op == "<=" else b - v) if ok else math.inf
    return out


def violation(values: dict, constraints: dict) -> float:
    """The total violation, as Deb's rules and Optuna's TPE rank infeasible trials by: the sum of the
    amounts above 0 (0 for a feasible trial)."""
    return math.fsum(a for a in amounts(values, constraints).values() if a > 0) if constraints else 0.0


# ---------------------------------------------------------------- a trials table

def _signed(trials: pd.DataFrame, objectives: dict) -> pd.DataFrame:
    """The objectives' columns as numbers to minimise."""
    import pandas as pd

    return pd.DataFrame({k: pd.to_numeric(trials[k], errors="coerce") * (1 if way == "min" else -1)
                         for k, way in objectives.items()}, index=trials.index)


def _diverged(trials: pd.DataFrame) -> pd.Series:
    import pandas as pd

    if "diverged" not in trials:
        return pd.Series(False, index=trials.index)
    return trials["diverged"].map(lambda v: str(v).lower() in ("true", "1", "1.0")).astype(bool)


def annotate(trials: pd.DataFrame, space, max_epochs: int) -> pd.DataFrame:
    """trials.csv for a space with several objectives or constraints: with `feasible` and
    `violation` where it has constraints, and `pareto_rank` (1: on the front; 2: on the front once
    those are left out; ...) for the feasible, non-diverged trials that reached the full budget with
    every objective measured; ordered by Deb's rules: full budget first, then feasible, non-domination
    rank, the objectives in order; infeasible ones by violation."""
    if trials.empty or not multi(space):
        return trials
    import moocore
    import pandas as pd

    objectives = of(space)
    trials = trials.copy()
    for k in required(space):  # a metric no trial reported: every trial lacks it
        if k not in trials:
            trials[k] = math.nan
    if space.constraints:
        trials[VIOLATION] = [violation(row, space.constraints) for row in trials[list(space.constraints)]
                             .to_dict("records")]
        trials[FEASIBLE] = trials[VIOLATION] == 0
    signed = _signed(trials, objectives)
    feasible = trials[FEASIBLE] if space.constraints else pd.Series(True, index=trials.index)
    ranked = (feasible & ~_diverged(trials) & (pd.to_numeric(trials["epochs"]) >= max_epochs)
              & signed.notna().all(axis=1))
    ranks = pd.Series(math.nan, index=trials.index)
    if ranked.any():
        ranks[ranked] = moocore.pareto_rank(signed[ranked].to_numpy(dtype=float)) + 1  # moocore counts from 0
    trials[RANK] = ranks.astype("Int64")
    budget = -pd.to_numeric(trials["epochs"]).clip(upper=max_epochs)
    order = pd.concat([budget.rename("_budget"), (~feasible).rename("_infeasible"),
                       (trials[VIOLATION] if space.constraints else budget * 0).rename("_violation"),
                       ranks.fillna(math.inf).rename("_rank"), signed.add_prefix("_")], axis=1)
    order = order.sort_values(list(order.columns), na_position="last", kind="stable")
    return trials.loc[order.index].reset_index(drop=True)


def unmeasured(trials: pd.DataFrame, objectives: dict, max_epochs: int) -> dict[str, int]:
    """Per objective, the trials that reached the full budget without diverging yet left it
    missing or NaN (annotate ranks none of them); only objectives some trial lacks."""
    if trials.empty or "epochs" not in trials:
        return {}
    import pandas as pd

    full = trials[~_diverged(trials) & (pd.to_numeric(trials["epochs"]) >= max_epochs)]
    counts = {k: int(pd.to_numeric(full[k], errors="coerce").isna().sum()) if k in full else len(full)
              for k in objectives}
    return {k: n for k, n in counts.items() if n}


def front(trials: pd.DataFrame) -> pd.DataFrame:
    """The Pareto front of an annotated trials table: its rows of rank 1 (pareto.csv)."""
    if RANK not in trials:
        return trials.iloc[0:0]
    return trials[trials[RANK] == 1].reset_index(drop=True)


def incumbent(trials: pd.DataFrame, space, max_epochs: int) -> tuple[dict | None, str]:
    """(the best trial's row, a note) of an annotated table: the front member best on the first
    objective (the others break a tie), which is annotate's first row; where no trial is feasible
    at the full budget, the first row still (the furthest budget, then the least violation), which
    the note says. Diverged trials never count."""
    ok = trials[~_diverged(trials) & _signed(trials, of(space)).iloc[:, :1].notna().all(axis=1)] \
        if not trials.empty else trials
    if ok.empty:
        return None, ""
    row = {k: plain(v) for k, v in ok.iloc[0].items()}
    notes = []
    reached = min(int(row["epochs"]), max_epochs)
    if reached < max_epochs:
        notes.append(f"no trial trained the full budget of {max_epochs} epochs: this is the best at {reached}, "
                     "the furthest any got")
    if space.constraints and not row.get(FEASIBLE):
        notes.append(f"no trial met the constraints ({describe(space).partition('subject to ')[2]}): this is the "
                     f"one that violates them least ({row.get(VIOLATION):.4g} in all)")
    return row, "; ".join(notes)


def plain(v):
    """A table's cell as the JSON value it stands for (None for a missing one)."""
    import pandas as pd

    if v is pd.NA:
        return None
    if hasattr(v, "item"):
        v = v.item()
    if isinstance(v, float) and math.isnan(v):
        return None
    return v

