"""A multi-objective run's report sections (tuning.report.runreport calls them where a run has two
objectives or more): the Pareto front drawn, the hypervolume as the run went, and the parameter
importances once per objective. The numbers come from tuning.report.hypervolume; each figure is
a bare matplotlib Figure, as runplots' are."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import metadata
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from tuning import objectives
from tuning.report import fanova, runplots
from tuning.report import hypervolume as hv
from tuning.report.hypervolume import Goals, Reference, counted
from tuning.report.render import number

if TYPE_CHECKING:
    from matplotlib.figure import Figure

FIGURES = {"front": "report-front.png", "hypervolume": "report-hypervolume.png"}


@dataclass(frozen=True)
class Measured:
    """A run of several objectives, measured for its report: what it ranks by, the reference point
    (None while no feasible result reached the full budget) and hv.anytime's curve."""

    goals: Goals
    reference: Reference | None
    curve: pd.DataFrame


def measure(trials: pd.DataFrame, epochs: pd.DataFrame, g: Goals, declared=None, *, max_epochs: int,
            started: float | None) -> Measured:
    """trials ranked by tuning.objectives.annotate."""
    ref = hv.reference(trials, g, declared)
    curve = (hv.anytime(trials, epochs, g, ref, max_epochs=max_epochs, started=started) if ref is not None
             else pd.DataFrame(columns=["trial_id", "time_s", "epochs", "hypervolume"]))
    return Measured(g, ref, curve)


def full_budget(trials: pd.DataFrame, g: Goals) -> pd.DataFrame:
    """Every result at the full budget with every objective measured, feasible or not: what the
    front figure draws."""
    if trials.empty:
        return trials
    ok = trials.apply(runplots.fate, axis=1) == "full"
    return trials[ok & trials[list(g.objectives)].notna().all(axis=1)]


def _on_front(rows: pd.DataFrame) -> pd.Series:
    # pareto_rank is nullable (Int64): an unranked row's <NA> == 1 is <NA>, no mask; as float it is NaN, False
    return pd.to_numeric(rows[objectives.RANK], errors="coerce").astype(float) == 1 if objectives.RANK in rows else \
        pd.Series(False, index=rows.index)


def _label(name: str, way: str) -> str:
    return f"{name} ({'lower' if way == 'min' else 'higher'} is better)"


def front_scatter(trials: pd.DataFrame, g: Goals, ref: Reference | None) -> Figure | None:
    """Two objectives: every full-budget result as a point, the front as a step line (the boundary
    of what it dominates, shaded up to the reference point), infeasible results as crosses."""
    from matplotlib.figure import Figure

    rows = full_budget(trials, g)
    if rows.empty:
        return None
    (x, wx), (y, wy) = list(g.objectives.items())[:2]
    ok = rows.index.isin(counted(rows).index)
    top = _on_front(rows)
    fig = Figure(figsize=(7.5, 5.5), layout="constrained")
    ax = fig.subplots()
    for sel, kw in ((ok & ~top, dict(marker="o", color="C0", alpha=0.6, label=f"feasible, dominated ({(ok & ~top).sum()})")),
                    (~ok, dict(marker="x", color="tab:red", label=f"infeasible: breaks a constraint ({(~ok).sum()})")),
                    (top, dict(marker="o", color="C3", edgecolors="k", s=60, zorder=3,
                               label=f"on the Pareto front ({top.sum()})"))):
        if sel.any():
            ax.scatter(rows.loc[sel, x], rows.loc[sel, y], **kw)
    pts = rows[top].assign(_s=rows.loc[top, x] * (1 if wx == "min" else -1)).sort_values("_s")
    if len(pts) and ref is not None:
        rx, ry = ref.point[x], ref.point[y]
        xs = np.r_[pts[x].iloc[0], pts[x].to_numpy(), rx]
        ys = np.r_[ry, pts[y].to_numpy(), pts[y].iloc[-1]]
        ax.plot(xs, ys, drawstyle="steps-post", color="C3", lw=1.5)
        ax.fill_between(xs, ys, ry, step="post", color="C3", alpha=0.12, label="hypervolume (dominated region)")
        ax.plot([rx], [ry], marker="+", color="k", ms=12, mew=2, ls="", label=f"reference point ({ref.text()})")
    ax.set_xlabel(_label(x, wx))
    ax.set_ylabel(_label(y, wy))
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    fig.suptitle(f"Pareto front: {top.sum()} of {len(rows)} full-budget results")
    return fig


def front_parallel(trials: pd.DataFrame, g: Goals) -> Figure | None:
    """Three objectives or more: each full-budget result as a line across one axis per objective,
    each axis from its worst value (bottom) to its best (top); the front drawn bold, on top."""
    from matplotlib.collections import LineCollection
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    rows = full_budget(trials, g)
    if rows.empty:
        return None
    names = list(g.objectives)
    unit, ends = [], []
    for k, way in g.objectives.items():
        worst, best = hv.ends(rows[k], way)
        unit.append(((rows[k].astype(float) - worst) / ((best - worst) or 1.0)).to_numpy())
        ends.append((worst, best))
    grid = np.column_stack(unit)
    ok = rows.index.isin(counted(rows).index)
    top = _on_front(rows).to_numpy()
    fig = Figure(figsize=(max(7.0, 1.6 * len(names) + 2), 5), layout="constrained")
    ax = fig.subplots()
    xs = np.arange(len(names))
    for sel, colour, width, style in ((ok & ~top, "C0", 0.8, "-"), (~ok, "tab:red", 0.8, "--"), (top, "C3", 2.2, "-")):
        if sel.any():
            ax.add_collection(LineCollection([np.column_stack([xs, r]) for r in grid[sel]], colors=colour,
                                             linewidths=width, linestyles=style, alpha=0.9 if colour == "C3" else 0.45))
    for k, (worst, best) in enumerate(ends):
        ax.axvline(k, color="k", lw=0.8)
        ax.text(k, -0.04, f"{worst:.4g}", ha="center", va="top", fontsize=8)
        ax.text(k, 1.04, f"{best:.4g}", ha="center", va="bottom", fontsize=8)
    ax.set_xlim(-0.3, len(names) - 0.7)
    ax.set_ylim(-0.12, 1.12)
    ax.set_xticks(xs, [f"{k} ({w})" for k, w in g.objectives.items()])
    ax.set_yticks([])
    for side in ("left", "right", "top", "bottom"):
        ax.spines[side].set_visible(False)
    handles = [Line2D([], [], color="C3", lw=2.2, label=f"on the Pareto front ({top.sum()})"),
               Line2D([], [], color="C0", label=f"feasible, dominated ({(ok & ~top).sum()})"),
               Line2D([], [], color="tab:red", ls="--", label=f"infeasible: breaks a constraint ({(~ok).sum()})")]
    fig.legend(handles=[h for h, n in zip(handles, (top.sum(), (ok & ~top).sum(), (~ok).sum())) if n],
               loc="outside lower center", ncols=3)
    fig.suptitle(f"Pareto front: {top.sum()} of {len(rows)} full-budget results\n"
                 "(each axis from its worst value, at the bottom, to its best)", fontsize=11)
    return fig


def hypervolume_plot(curve: pd.DataFrame, ref: Reference, max_epochs: int) -> Figure | None:
    """The hypervolume of the front so far against wall time and against epochs consumed."""
    from matplotlib.figure import Figure

    if curve.empty:
        return None
    fig = Figure(figsize=(13, 4.8), layout="constrained")
    axes = fig.subplots(1, 2, sharey=True)
    for ax, col, xlabel in zip(axes, ("time_s", "epochs"), ("wall-clock time since the run started (s)",
                                                             "epochs consumed by all trials together")):
        ax.plot(curve[col], curve["hypervolume"], drawstyle="steps-post", lw=2, color="C3")
        ax.plot(curve[col], curve["hypervolume"], ls="", marker=".", color="grey",
                label=f"a feasible result at the full budget ({max_epochs} epochs) arrives")
        ax.set_xlabel(xlabel)
        ax.grid(True, alpha=0.3)
    axes[0].set_ylabel("hypervolume of the front so far")
    axes[0].legend(loc="lower right", fontsize=8)
    fig.suptitle(f"Hypervolume (higher is better) against the reference point {ref.text()}\n({ref.how})",
                 fontsize=11)
    return fig


def figures(trials: pd.DataFrame, m: Measured, max_epochs: int) -> dict:
    """The sections' figures, by FIGURES key (None where there is nothing to draw yet)."""
    g = m.goals
    return {"front": front_scatter(trials, g, m.reference) if len(g.objectives) == 2 else front_parallel(trials, g),
            "hypervolume": hypervolume_plot(m.curve, m.reference, max_epochs) if m.reference is not None else None}


def importances(trials: pd.DataFrame, g: Goals, decls: dict, **kw) -> dict:
    """fANOVA importances once per objective, each over the trials that ran the full budget with it
    measured (feasible or not: a constraint does not change what a parameter does to an objective)."""
    return {k: fanova.importance(trials, decls, metric=k, mode=way, **kw) for k, way in g.objectives.items()}


def sections(trials: pd.DataFrame, m: Measured, decls: dict, figs: dict) -> list[tuple]:
    """The front and the hypervolume, as report blocks."""
    g, ref, curve = m.goals, m.reference, m.curve
    rows, names = full_budget(trials, g), list(g.objectives)
    top = rows[_on_front(rows)] if len(rows) else rows
    kind = "step line" if len(names) == 2 else "bold lines, across parallel coordinates"
    b = [("h2", "Pareto front")]
    if "front" not in figs:
        return b + [("p", "No trial has trained the full budget with every objective measured yet.")]
    b += [("img", figs["front"], "the Pareto front"),
          ("p", f"Every result at the full budget with {' and '.join(names)} measured: {len(rows)}. The front "
                f"({kind}) holds the feasible ones no other feasible one beats on every objective at once: "
                f"{len(top)}, the rows of pareto.csv. {len(rows) - len(counted(rows))} break a constraint "
                "(feasible first: Deb's rules, docs/multi-objective.md). Non-dominated sorting by moocore.")]
    keep = ["trial_id", *decls, *dict.fromkeys([*names, *g.constraints])]
    b.append(("table", top[[c for c in keep if c in top]].apply(lambda c: c.map(lambda v: number(v, 4, "")))))
    b.append(("h2", "Hypervolume"))
    if ref is None or curve.empty or "hypervolume" not in figs:
        return b + [("p", "No feasible result at the full budget yet: no hypervolume.")]
    last = float(curve["hypervolume"].iloc[-1])
    b += [("img", figs["hypervolume"], "hypervolume against wall time and epochs consumed"),
          ("p", f"Hypervolume of the front now: {last:.6g}, against the reference point {ref.text()} ({ref.how}). "
                f"It is the {'area' if len(names) == 2 else 'volume'} of objective space that the front dominates "
                "and that dominates the reference point: it grows when a result joins the front or pushes it "
                "further, and a result worse than the reference point on any objective adds nothing. Computed with "
                f"moocore {metadata.version('moocore')} over the {len(counted(trials))} feasible results at the full "
                "budget, each counted when its last epoch arrived.")]
    return b


def importance_blocks(imps: dict) -> list[tuple]:
    b = [("h2", "Hyperparameter importance, per objective")]
    for name, (table, note) in imps.items():
        b.append(("p", f"{name}: {note}"))
        if table is not None:
            b.append(("table", table))
    return b
