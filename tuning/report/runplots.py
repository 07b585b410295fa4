"""The figures of one tuning.run's report (tuning.report.runreport): learning curves, best so far,
each hyperparameter against the final metric, and parallel coordinates.

Input is the trials and epochs tables of tuning.results plus the space's parameter declarations;
each function returns a bare matplotlib Figure (no pyplot state, no backend to pick), or None when
there is nothing to draw yet; png() turns one into the bytes of a PNG.
"""

from __future__ import annotations

import io
import math
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    from matplotlib.figure import Figure

from tuning import objectives, params, results, spaces

# How a trial ended, as (line style, end marker, legend text). A trial gets one of these; being
# paused and resumed is drawn on top as a circle at each epoch it resumed from.
FATES = {
    "full": ("-", "", "reached the full budget"),
    "early": ("--", "x", "stopped early by the scheduler"),
    "ended": ("-", "|", "ended by its trainer before the full budget"),
    "diverged": ("-.", "v", "diverged (metric turned NaN/inf after its last point)"),
    "failed": (":", "X", "failed (training raised)"),
    "running": ("-", ">", "still running or waiting to start or resume"),
    "stopped": ("--", "s", "short of its budget when the run stopped (stopped early, or cut off)"),
}
# The status of such a trial in a report rebuilt from results.jsonl: without Tune's state, which
# trials the scheduler stopped early is not known.
STOPPED = "STOPPED"
RESUMED = ("o", "paused, then resumed from its checkpoint at this epoch")


def fate(row) -> str:
    """Which of FATES a row of the trials table is."""
    if row["status"] == "ERROR":
        return "failed"
    if bool(row.get("diverged")):
        return "diverged"
    if row["status"] == STOPPED:
        return "stopped"
    if row["status"] != "TERMINATED":
        return "running"
    if row.get("epochs") == 0:  # ended without a result: the run stopped first (a trainer's unusable metric)
        return "stopped"
    if bool(row.get("stopped_early")):
        return "early"
    # A trials table written before ended_itself was a column reads as "full" there, as it did then.
    return "ended" if results.truthy(row.get("ended_itself")) else "full"


def resumed_epochs(value) -> list[int]:
    """The trials table's resumed_at ("1;3", or empty / NaN when read back from CSV) as epochs."""
    text = "" if value is None or (isinstance(value, float) and math.isnan(value)) else str(value)
    return [int(float(e)) for e in text.split(";") if e.strip()]


def absent(values: pd.Series) -> pd.Series:
    """Which cells hold no value: a conditional parameter its trial did not set (tuning.conditions).
    CSV gives NaN, parquet and records None; a table read with keep_default_na=False, ""."""
    return values.isna() | values.map(lambda v: isinstance(v, str) and not v.strip())


def condition(decl) -> str:
    """A declaration's `when` as words: "optimizer = sgd", "a in {1, 2} and b = x"; "" if it has none."""
    return " and ".join(f"{k} = {v[0]}" if len(v) == 1 else f"{k} in {{{', '.join(map(str, v))}}}"
                        for k, v in (getattr(decl, "when", None) or {}).items())


def plotted(trials: pd.DataFrame, metric: str) -> pd.DataFrame:
    """The trials the parameter figures draw: those with a final value, neither diverged nor failed."""
    if trials.empty:
        return trials
    return trials[trials[metric].notna() & ~trials.apply(fate, axis=1).isin(["diverged", "failed"])]


# At most this many learning curves are drawn: beyond a few hundred lines the figure is a solid
# block and takes longer to draw than the run's tables (10,000 trials, docs/performance.md).
MAX_CURVES = 400


def drawn(trials: pd.DataFrame, metric: str, mode: str, limit: int = MAX_CURVES) -> tuple[pd.DataFrame, str]:
    """The trials a learning-curve figure draws, and how they were chosen ("" for all of them):
    past `limit`, the limit // 4 best by final value and a seeded random draw of the others."""
    if len(trials) <= limit:
        return trials, ""
    ok = trials[metric].notna() & (trials.apply(fate, axis=1) != "diverged")
    best = trials[ok].sort_values(metric, ascending=mode == "min", kind="stable").head(limit // 4)
    rest = trials.drop(best.index)
    rest = rest.sample(n=limit - len(best), random_state=0)
    return (pd.concat([best, rest]),
            f"the {len(best)} best and {len(rest)} drawn at random of {len(trials):,}")


def png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    return buf.getvalue()


def _colours(values: pd.Series, mode: str):
    """Colours by final metric (a ScalarMappable), the best trial at viridis' bright end either way."""
    from matplotlib import cm, colors

    lo, hi = (float(values.min()), float(values.max())) if values.notna().any() else (0.0, 1.0)
    lo, hi = (lo, hi) if hi > lo else (lo - 0.5, hi + 0.5)
    return cm.ScalarMappable(colors.Normalize(lo, hi), "viridis_r" if mode == "min" else "viridis")


def _legend(fig, fates: pd.Series, resumed: int) -> None:
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color="grey", ls=ls, marker=m, label=f"{text} ({(fates == k).sum()})")
               for k, (ls, m, text) in FATES.items() if (fates == k).any()]
    if resumed:
        handles.append(Line2D([], [], color="grey", ls="", marker=RESUMED[0], mfc="none",
                              label=f"{RESUMED[1]} ({resumed} trial{'s' * (resumed != 1)})"))
    fig.legend(handles=handles, loc="outside lower center", ncols=min(3, len(handles)))


def learning_curves(trials: pd.DataFrame, epochs: pd.DataFrame, *, metric: str, mode: str,
                    label: str) -> Figure | None:
    """Validation loss (and accuracy, where reported) against epoch, one line per trial."""
    from matplotlib.figure import Figure

    if epochs.empty or trials.empty:
        return None
    panels = [c for c in dict.fromkeys([metric, "loss", "accuracy"]) if c in epochs and epochs[c].notna().any()]
    everyone, (trials, which) = trials, drawn(trials, metric, mode)
    epochs = epochs[epochs["trial_id"].isin(trials["trial_id"])] if which else epochs
    info = trials.set_index("trial_id")
    fates = everyone.apply(fate, axis=1).set_axis(everyone["trial_id"])  # the legend counts every trial
    final = info[metric].where(fates.reindex(info.index) != "diverged")  # a diverged trial's value is a stand-in
    sm = _colours(final, mode)
    fig = Figure(figsize=(6.5 * len(panels) + 1, 5), layout="constrained")
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    resumed = 0
    for tid, curve in epochs.sort_values("training_iteration").groupby("trial_id", sort=False):
        kind = fates.get(tid, "running")
        ls, end, _ = FATES[kind]
        colour = "tab:red" if kind == "failed" else (sm.to_rgba(final[tid]) if pd.notna(final.get(tid)) else "grey")
        ok = curve[~curve["diverged"].fillna(False).astype(bool)]
        back = resumed_epochs(info["resumed_at"].get(tid)) if "resumed_at" in info else []
        resumed += bool(back)
        for ax, col in zip(axes, panels):
            pts = ok[["training_iteration", col]].dropna()
            if pts.empty:
                continue
            x, y = pts["training_iteration"].to_numpy(), pts[col].to_numpy()
            ax.plot(x, y, ls=ls, color=colour, lw=1.3, alpha=0.85)
            if end:  # "x" is all edge: in the trial's colour; filled markers get a black rim
                ax.plot(x[-1:], y[-1:], ls="", marker=end, color=colour, ms=8,
                        mec=colour if end == "x" else "k", mew=1.5 if end == "x" else 0.6)
            hits = np.isin(x, back)
            if hits.any():
                ax.plot(x[hits], y[hits], ls="", marker=RESUMED[0], ms=8, mfc="none", mec=colour, mew=1.5)
    for ax, col in zip(axes, panels):
        ax.set_xlabel("epoch (training iteration)")
        ax.set_ylabel(label if col == metric else f"validation {col}")
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.grid(True, alpha=0.3)
    _legend(fig, fates, resumed)
    fig.colorbar(sm, ax=list(axes), label=f"final {label} (bright: best)")
    fig.suptitle(f"Learning curves of {len(everyone):,} trials" + (f" ({len(trials)} drawn: {which})" if which else ""))
    return fig


def best_so_far(epochs: pd.DataFrame, *, metric: str, mode: str, label: str, started: float | None,
                max_epochs: int, constraints: dict | None = None) -> Figure | None:
    """The best value reported so far, against wall time and against epochs consumed; under
    constraints, of the results that met them (as every other "best" of a run)."""
    from matplotlib.figure import Figure

    if epochs.empty or not epochs[metric].notna().any():
        return None
    # Arrival order: Tune's timestamp has whole seconds, so ties go by the trial's own clock.
    rows = epochs.sort_values(["timestamp", "time_total_s"], kind="stable").reset_index(drop=True)
    ok = rows[metric].where(~rows["diverged"].fillna(False).astype(bool))
    if constraints:
        met = [objectives.violation(r, constraints) == 0 for r in rows.reindex(columns=list(constraints))
               .to_dict("records")]
        ok = ok.where(pd.Series(met, index=rows.index, dtype=bool))
    full = ok.where(rows["training_iteration"] >= max_epochs)
    best = (lambda s: s.cummin()) if mode == "min" else (lambda s: s.cummax())
    t0 = started if started is not None else float((rows["timestamp"] - rows["time_total_s"]).min())
    xs = [("wall-clock time since the run started (s)", (rows["timestamp"] - t0).to_numpy(dtype=float)),
          ("epochs consumed by all trials together", np.arange(1, len(rows) + 1))]
    fig = Figure(figsize=(13, 4.8), layout="constrained")
    axes = fig.subplots(1, 2, sharey=True)
    for ax, (xlabel, x) in zip(axes, xs):
        for series, text, style in ((ok, "any epoch", "-"), (full, f"full budget ({max_epochs} epochs)", "--")):
            y = best(series.ffill()) if series.notna().any() else None
            if y is not None:
                ax.plot(x, y.to_numpy(), drawstyle="steps-post", ls=style, lw=2, label=f"best at {text}")
        ax.plot(x, ok.to_numpy(), ls="", marker=".", color="grey", alpha=0.5, label="each reported epoch")
        ax.set_xlabel(xlabel)
        ax.grid(True, alpha=0.3)
    lo, hi = ok.quantile(0.0), ok.quantile(0.95)  # outliers (a blow-up) must not flatten the steps
    if pd.notna(lo) and hi > lo:
        axes[0].set_ylim(lo - 0.05 * (hi - lo), hi + 0.05 * (hi - lo))
    axes[0].set_ylabel(f"best {label} so far")
    axes[0].legend(loc="best")
    among = ", of the results that meet the constraints" if constraints else ""
    fig.suptitle(f"Best {label} so far{among} ({'lower' if mode == 'min' else 'higher'} is better)")
    return fig


LOG = (spaces.LogUniform, spaces.IntLogUniform)  # drawn on a log axis, as they are searched


def _or_nan(i: int | None) -> float:
    return np.nan if i is None else i


def _axis(ax, name: str, decl, values: pd.Series) -> pd.Series:
    """Set up the x axis for a parameter; returns the values as plotted (categories as positions)."""
    if isinstance(decl, spaces.Choice):
        order = [params.label(c) for c in decl.values]  # a list or dict as JSON text
        pos = values.map(lambda v: _or_nan(decl.cell_position(v)))
        ax.set_xticks(range(len(order)), order)
        ax.set_xlabel(name)
        jitter = np.random.default_rng(0).uniform(-0.12, 0.12, len(pos))  # seeded: reproducible
        return pos + jitter
    lo, hi = float(decl.low), float(decl.high)
    if isinstance(decl, LOG):
        ax.set_xscale("log")
        name += " (log scale)"
        pad = (hi / lo) ** 0.03
        ax.set_xlim(lo / pad, hi * pad)
        if isinstance(decl, spaces.IntLogUniform):  # widths, depths: 4, 8, 16, not 4x10^0
            from matplotlib import ticker

            ax.xaxis.set_major_locator(ticker.LogLocator(base=2))
            ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
            ax.xaxis.set_minor_locator(ticker.NullLocator())
    else:  # the declared range, a little wider: where the search did not look shows
        ax.set_xlim(lo - 0.03 * (hi - lo), hi + 0.03 * (hi - lo))
    ax.set_xlabel(name)
    return values.astype(float)


def params_vs_metric(trials: pd.DataFrame, declarations: dict, *, metric: str, label: str) -> Figure | None:
    """One panel per hyperparameter: its value against the trial's final metric."""
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    pts = plotted(trials, metric)
    if pts.empty:
        return None
    fates = trials.apply(fate, axis=1)
    names = list(declarations)
    cols = min(4, len(names))
    rows = math.ceil(len(names) / cols)
    height = 3.1 * rows + 1.2
    fig = Figure(figsize=(3.6 * cols + 0.8, height))  # room for a panel's "set in n of N" title: hspace
    # Margins by hand: constrained layout took half the time of a live report with 16 panels.
    fig.subplots_adjust(left=0.8 / (3.6 * cols + 0.8), right=0.98, top=1 - 0.5 / height, bottom=1.0 / height,
                        hspace=0.4, wspace=0.08)
    axes = fig.subplots(rows, cols, sharey=True, squeeze=False).ravel()
    early = fates.loc[pts.index] != "full"
    for ax, name in zip(axes, names):
        on = ~absent(pts[name])  # a conditional parameter's panel shows the trials that set it
        x = _axis(ax, name, declarations[name], pts.loc[on, name])
        for sel, marker, colour, size in ((on & ~early, "o", "C0", 30), (on & early, "X", "C1", 40)):
            ax.scatter(x[sel[on]], pts.loc[sel, metric], marker=marker, s=size, color=colour, edgecolors="k",
                       linewidths=0.3)
        if not on.all():
            when = condition(declarations[name])
            ax.set_title(f"set in {on.sum()} of {len(pts)} trials" + (f" ({when})" if when else ""), fontsize=8)
        ax.grid(True, alpha=0.3)
    for ax in axes[len(names):]:
        ax.set_visible(False)
    for ax in axes[::cols]:
        ax.set_ylabel(f"final {label}")
    handles = [Line2D([], [], ls="", marker="o", color="C0", label=f"full budget ({(~early).sum()})"),
               Line2D([], [], ls="", marker="X", color="C1",
                      label=f"stopped early or still running: value at its last epoch ({early.sum()})")]
    fig.legend(handles=[h for h, n in zip(handles, ((~early).sum(), early.sum())) if n],
               loc="lower center", ncols=2, frameon=False)
    fig.suptitle(f"Each hyperparameter against the final {label} ({len(pts)} trials)")
    return fig


ABSENT = -0.22  # where a parallel-coordinates line crosses the axis of a parameter its trial did not set


def _unit(decl, values: pd.Series) -> tuple[pd.Series, list[str]]:
    """Values mapped onto [0, 1] for a parallel-coordinates axis, and the axis' end labels; an
    absent value (a conditional parameter not set) at ABSENT, below the axis."""
    gone = absent(values)
    pos, ends = _scaled(decl, values.where(~gone))
    return pos.where(~gone, ABSENT), ends


def _scaled(decl, values: pd.Series) -> tuple[pd.Series, list[str]]:
    if isinstance(decl, spaces.Choice):
        order = [params.label(c) for c in decl.values]
        pos = values.map(lambda v: _or_nan(decl.cell_position(v)))
        return pos / max(1, len(order) - 1), [order[0], order[-1]]
    lo, hi = float(decl.low), float(decl.high)
    if isinstance(decl, LOG):
        return np.log(values.astype(float) / lo) / math.log(hi / lo), [f"{lo:g}", f"{hi:g} (log)"]
    return (values.astype(float) - lo) / (hi - lo), [f"{lo:g}", f"{hi:g}"]


def parallel_coordinates(trials: pd.DataFrame, declarations: dict, *, metric: str, mode: str,
                         label: str) -> Figure | None:
    """Every trial as a line through its hyperparameters and its final metric."""
    from matplotlib.collections import LineCollection
    from matplotlib.figure import Figure

    pts = plotted(trials, metric)
    if pts.empty:
        return None
    names = list(declarations)
    unit = [_unit(declarations[n], pts[n]) for n in names]
    gone = [int(absent(pts[n]).sum()) for n in names]
    m = pts[metric].astype(float)
    span = (m.max() - m.min()) or 1.0
    unit.append(((m - m.min()) / span, [f"{m.min():.4g}", f"{m.max():.4g}"]))
    grid = np.column_stack([u.to_numpy(dtype=float) for u, _ in unit])
    sm = _colours(m, mode)
    fig = Figure(figsize=(max(8.0, 1.1 * len(unit) + 2), 5), layout="constrained")
    ax = fig.subplots()
    order = np.argsort(m.to_numpy() * (-1 if mode == "min" else 1), kind="stable")  # the best drawn last, on top
    # One collection, not a line each: 10,000 trials draw in a second, every one of them.
    ax.add_collection(LineCollection([np.column_stack([np.arange(len(unit)), grid[i]]) for i in order],
                                     colors=sm.to_rgba(m.to_numpy()[order]), linewidths=1.2, alpha=0.8))
    ax.set_xlim(-0.3, len(unit) - 0.7)
    for k, (_, (low, high)) in enumerate(unit):
        ax.axvline(k, color="k", lw=0.8)
        ax.text(k, -0.04, low, ha="center", va="top", fontsize=8)
        ax.text(k, 1.04, high, ha="center", va="bottom", fontsize=8)
    for k, n in enumerate(gone):  # a conditional parameter's trials that did not set it: a mark of its own
        if n:
            ax.plot([k], [ABSENT], ls="", marker="o", ms=9, mfc="white", mec="k", zorder=3)
            ax.text(k + 0.08, ABSENT, f"absent ({n})", ha="left", va="center", fontsize=8)
    ax.set_xticks(range(len(unit)), [*names, f"final {metric}"], rotation=30, ha="right")
    ax.set_yticks([])
    ax.set_ylim(ABSENT - 0.08 if any(gone) else -0.12, 1.12)
    for side in ("left", "right", "top", "bottom"):
        ax.spines[side].set_visible(False)
    fig.colorbar(sm, ax=ax, label=f"final {label} (bright: best)")
    fig.suptitle(f"Parallel coordinates: {len(pts)} trials, each axis from its declared range")
    return fig
