"""``python -m tuning.report DIR``: the report of a strategy comparison.

Reads what ``python -m tuning.compare`` wrote to DIR (runs.parquet or runs.csv, experiment.json,
provenance.json) and writes report.md, a self-contained report.html (plots inlined as base64 PNG,
no external files) and the plot PNGs. Every number and figure is computed from those three files,
so deleting the report and running this again gives the same report.
"""

from __future__ import annotations

import base64
import html
import json
import logging
import math
import os
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from tuning import cli

log = logging.getLogger(__name__)

REGRET_FLOOR = 1e-6  # a log axis cannot show 0: regrets below this are drawn at it
GRID_POINTS = 200  # points of the common budget / time grid the seeds are averaged on
ALPHA = 0.05  # significance level the verdict sentences use
REQUIRED = ["strategy", "seed", "run_id", "trial_id", "training_iteration", "full_fidelity",
            "consumed_budget", "wall_s", "epoch"]
FIGURES = {"anytime": "report-anytime.png", "scatter": "report-lr-batch_size.png"}


class ReportError(Exception):
    """DIR cannot be reported on: exit 2 with this one-line message."""


# ---------------------------------------------------------------- input

def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ReportError(f"cannot read {path}: {exc}") from None


def load(out_dir: Path) -> tuple[pd.DataFrame, dict, dict]:
    """(runs, experiment, provenance) of a comparison folder, checked against the input contract."""
    out_dir = Path(out_dir)
    parquet, csv = out_dir / "runs.parquet", out_dir / "runs.csv"
    if not out_dir.is_dir():
        raise ReportError(f"{out_dir} is not a folder: pass the folder python -m tuning.compare wrote")
    if not parquet.exists() and not csv.exists():
        raise ReportError(f"{out_dir} holds no runs.csv or runs.parquet: "
                          "pass the folder python -m tuning.compare wrote")
    exp = _read_json(out_dir / "experiment.json")
    prov = _read_json(out_dir / "provenance.json") if (out_dir / "provenance.json").exists() else None
    try:
        runs = pd.read_parquet(parquet) if parquet.exists() else pd.read_csv(csv)
    except Exception as exc:  # pyarrow and the CSV parser raise many types; any of them means unreadable
        raise ReportError(f"cannot read the runs table in {out_dir}: {exc}") from None
    metric = exp.get("metric", "loss")
    missing = [c for c in [*REQUIRED, metric] if c not in runs.columns]
    if missing:
        raise ReportError(f"runs table in {out_dir} lacks columns {missing}")
    if runs.empty:
        raise ReportError(f"runs table in {out_dir} has no rows")
    for key in ("budget", "max_t"):
        if not isinstance(exp.get(key), (int, float)):
            raise ReportError(f"experiment.json has no numeric {key!r}")
    runs = runs.copy()
    for col in ("strategy", "run_id", "trial_id"):
        runs[col] = runs[col].astype(str)
    # CSV gives "True"/"False" strings or bools depending on the reader; parquet gives bools.
    runs["full_fidelity"] = runs["full_fidelity"].astype(str).str.lower().isin(["true", "1", "1.0"])
    runs["value"] = _regret(exp)(runs[metric].astype(float))
    return runs, exp, prov


def _regret(exp: dict):
    """loss -> the plotted quantity: regret where the optimum is known, else the metric itself."""
    kind = exp.get("regret")
    if kind is None:
        return lambda v: v
    if kind == "normalized_counting_ones":  # Falkner et al. 2018: loss -dims is the optimum, regret 0
        if not exp.get("dims"):
            raise ReportError("experiment.json: regret normalized_counting_ones needs 'dims'")
        return lambda v: v / exp["dims"] + 1
    if kind == "difference":
        if exp.get("optimum") is None:
            raise ReportError("experiment.json: regret difference needs 'optimum'")
        flip = 1 if exp.get("mode", "min") == "min" else -1
        return lambda v: (v - exp["optimum"]) * flip
    raise ReportError(f"experiment.json: unknown regret {kind!r}")


def _sign(exp: dict) -> int:
    """+1 where lower values are better. Values are multiplied by it so one min covers both modes;
    a regret is always lower-is-better."""
    return 1 if exp.get("mode", "min") == "min" or exp.get("regret") else -1


# ---------------------------------------------------------------- numbers

def incumbent_on_grid(run: pd.DataFrame, grid, x: str = "consumed_budget", value: str = "value",
                      sign: int = 1) -> np.ndarray:
    """A run's incumbent at each grid point: the best `value` over its full-fidelity rows with
    `x` <= the point; NaN before its first full-fidelity result. Lower-fidelity rows never count
    (the BOHB paper's rule): a loss after 1 of 9 epochs is not a result of its configuration."""
    ff = run[run["full_fidelity"] & run[value].notna()].sort_values(x, kind="stable")
    best = sign * np.minimum.accumulate(sign * ff[value].to_numpy(float))
    idx = np.searchsorted(ff[x].to_numpy(float), np.asarray(grid, float), side="right") - 1
    out = np.full(len(idx), np.nan)
    out[idx >= 0] = best[idx[idx >= 0]]
    return out


def _order(runs: pd.DataFrame, exp: dict) -> list[str]:
    have = list(dict.fromkeys(runs["strategy"]))
    return [s for s in exp.get("strategies", []) if s in have] + [s for s in have if s not in exp.get("strategies", [])]


def make_grid(values: pd.Series, hi: float) -> tuple[np.ndarray, bool]:
    """(grid, log): log-spaced from the first full-fidelity result, linear if that is at 0."""
    lo = float(values.min()) if len(values) else 0.0
    if lo > 0 and hi > lo:
        return np.geomspace(lo, hi, GRID_POINTS), True
    return np.linspace(lo, max(hi, lo + 1e-9), GRID_POINTS), False


def anytime_curves(runs: pd.DataFrame, strategies: list[str], grid, x: str, sign: int) -> dict:
    """Per strategy: mean and standard error over its runs of the incumbent on `grid`. A point is
    kept only where every run already has an incumbent, so the mean is always over all n seeds."""
    out = {}
    for s in strategies:
        inc = np.array([incumbent_on_grid(r, grid, x, "value", sign)
                        for _, r in runs[runs["strategy"] == s].groupby("run_id", sort=False)])
        n, full = len(inc), ~np.isnan(inc).any(axis=0)
        mean, sem = np.full(len(grid), np.nan), np.full(len(grid), np.nan)
        mean[full] = inc[:, full].mean(axis=0)
        if n > 1:
            sem[full] = inc[:, full].std(axis=0, ddof=1) / math.sqrt(n)
        out[s] = {"x": np.asarray(grid), "mean": mean, "sem": sem, "n": n}
    return out


def per_run(runs: pd.DataFrame, sign: int, metric: str = "loss") -> pd.DataFrame:
    """One row per run: final incumbent (plotted value and metric), budget and time used, trials,
    recomputed epochs."""
    rows = []
    for run_id, r in runs.groupby("run_id", sort=False):
        ff = r[r["full_fidelity"] & r["value"].notna()]
        best = ff.loc[(sign * ff["value"]).idxmin()] if len(ff) else {"value": np.nan, metric: np.nan}
        rows.append({
            "run_id": run_id, "strategy": r["strategy"].iloc[0], "seed": r["seed"].iloc[0],
            "final": float(best["value"]), "final_metric": float(best[metric]),
            "budget_used": float(r["consumed_budget"].max()), "wall_s": float(r["wall_s"].max()),
            "trials": r["trial_id"].nunique(),
            "recomputed": len(r) - len(r.drop_duplicates(["trial_id", "epoch"])),
        })
    return pd.DataFrame(rows)


def _budget_to_target(run: pd.DataFrame, target: float, sign: int) -> float:
    """First consumed budget at which the run's incumbent reaches `target`; inf if never."""
    ff = run[run["full_fidelity"] & run["value"].notna()].sort_values("consumed_budget", kind="stable")
    hit = np.flatnonzero(sign * ff["value"].to_numpy(float) <= sign * target)
    return float(ff["consumed_budget"].iloc[hit[0]]) if len(hit) else math.inf


def summarize(runs: pd.DataFrame, exp: dict) -> dict:
    """The numbers of the report: per-run rows, the final table and the tests against random."""
    sign, strategies = _sign(exp), _order(runs, exp)
    pr = per_run(runs, sign, exp.get("metric", "loss"))
    rand = pr.loc[pr["strategy"] == "random", "final"].dropna()
    target = float(rand.median()) if len(rand) else math.nan
    b2t = {}  # strategy -> median budget to target over its runs, never-reached counting as inf
    table, tests = [], []
    for s in strategies:
        p = pr[pr["strategy"] == s]
        f = p["final"].dropna()
        row = {"strategy": s, "n": len(f), "runs": len(p), "final_mean": f.mean(),
               "final_std": f.std(ddof=1) if len(f) > 1 else math.nan, "final_median": f.median(),
               "final_metric_mean": p["final_metric"].mean(), "final_metric_std": p["final_metric"].std(ddof=1),
               "reached": 0, "budget_to_target": math.nan, "speedup": math.nan,
               "trials_per_run": p["trials"].mean(), "recomputed_epochs": int(p["recomputed"].sum()),
               "wall_s_per_run": p["wall_s"].mean()}
        if len(rand):
            b = np.array([_budget_to_target(r, target, sign)
                          for _, r in runs[runs["strategy"] == s].groupby("run_id", sort=False)])
            # Lower median for an even count: the budget by which at least half the runs got there.
            row["budget_to_target"] = b2t[s] = float(np.quantile(b, 0.5, method="lower"))
            row["reached"] = int(np.isfinite(b).sum())
        table.append(row)
        if s != "random" and len(rand) >= 2 and len(f) >= 2:
            tests.append({"strategy": s, "n": len(f), "n_random": len(rand), "median": f.median(),
                          "median_random": rand.median(), "delta_median": f.median() - rand.median(),
                          "p": float(stats.mannwhitneyu(f, rand, alternative="two-sided").pvalue),
                          # Exact two-sided U test without ties: no p below 2 / C(n1+n2, n1).
                          "min_p": min(1.0, 2 / math.comb(len(f) + len(rand), len(f)))})
    table = pd.DataFrame(table)
    if "random" in b2t:
        table["speedup"] = [b2t["random"] / b2t[s] if math.isfinite(b2t[s]) and math.isfinite(b2t["random"])
                            else math.nan for s in table["strategy"]]
    return {"per_run": pr, "table": table, "tests": pd.DataFrame(tests), "target": target,
            "strategies": strategies, "sign": sign}


def stopped_early(pr: pd.DataFrame, exp: dict, strategies: list[str]) -> list[str]:
    """A sentence per strategy whose runs ended more than one full evaluation below the budget."""
    out, budget = [], float(exp["budget"])
    for s in strategies:
        p = pr[pr["strategy"] == s]
        short = p[p["budget_used"] < budget - 1]
        if short.empty:
            continue
        lo, hi = short["budget_used"].min(), short["budget_used"].max()
        used = f"{lo:.3g}" if math.isclose(lo, hi) else f"{lo:.3g}-{hi:.3g}"
        what = "grid exhausted" if s == "grid" else f"{s} stopped early (its search ended)"
        out.append(f"{what} after {used} of {budget:g} full evaluations in {len(short)} of {len(p)} runs")
    return out


def best_configs(runs: pd.DataFrame, exp: dict, strategies: list[str], sign: int) -> pd.DataFrame:
    """Per strategy, the full-fidelity row with the best metric over all its seeds."""
    metric, rows = exp.get("metric", "loss"), []
    for s in strategies:
        ff = runs[(runs["strategy"] == s) & runs["full_fidelity"] & runs["value"].notna()]
        if ff.empty:
            continue
        r = ff.loc[(sign * ff["value"]).idxmin()]
        extra = ["accuracy"] if "accuracy" in runs.columns and pd.notna(r.get("accuracy")) else []
        rows.append({"strategy": s, "run": r["run_id"], "trial": r["trial_id"],
                     **({"regret": r["value"]} if exp.get("regret") else {}), metric: r[metric],
                     **{k: r[k] for k in extra + [p for p in exp.get("params", []) if p in runs.columns]}})
    return pd.DataFrame(rows)


# ---------------------------------------------------------------- figures

def plot_anytime(runs: pd.DataFrame, exp: dict, strategies: list[str], sign: int, ylabel: str,
                 path: Path) -> Path:
    from matplotlib.figure import Figure  # a bare Figure: no pyplot state, no backend to choose

    log_y, color = exp.get("regret") is not None, {s: f"C{i}" for i, s in enumerate(strategies)}
    ff = runs[runs["full_fidelity"]]
    fig = Figure(figsize=(13, 5), layout="constrained")
    axes = fig.subplots(1, 2, sharey=True)
    panels = [("consumed_budget", f"consumed budget (full evaluations; {exp['max_t']} iterations each)"),
              ("wall_s", "wall-clock time since the run started (s)")]
    lowest = math.inf  # smallest drawn positive value: where a log y axis starts
    for ax, (x, xlabel) in zip(axes, panels):
        grid, log_x = make_grid(ff[x], float(runs[x].max()))
        for s, c in anytime_curves(runs, strategies, grid, x, sign).items():
            mean, sem = c["mean"], np.nan_to_num(c["sem"])
            lo, hi = mean - sem, mean + sem
            if log_y:  # regret 0 (the optimum found) and mean - SE < 0 cannot be drawn on a log axis
                lowest = min([lowest, *(v[v > REGRET_FLOOR].min() for v in (mean, lo) if (v > REGRET_FLOOR).any())])
                mean, lo, hi = (np.maximum(v, REGRET_FLOOR) for v in (mean, lo, hi))
            ax.plot(grid, mean, color=color[s], drawstyle="steps-post", lw=2,
                    label=f"{s} (n={c['n']})")
            if c["n"] > 1:
                ax.fill_between(grid, lo, hi, color=color[s], alpha=0.2, step="post", lw=0)
        if log_x:
            _plain_log_ticks(ax, grid[0], grid[-1])
        ax.set_yscale("log" if log_y else "linear")
        ax.set_xlabel(xlabel + (", log scale" if log_x else ""))
        ax.grid(True, which="major", alpha=0.3)
    if log_y and math.isfinite(lowest):
        # Start the axis near the data, not at the floor: a line or band that leaves the bottom
        # edge went below it (regret 0, or mean - SE <= 0); the report text says so.
        axes[0].set_ylim(bottom=max(REGRET_FLOOR, lowest / 3))
    axes[0].set_ylabel(f"incumbent {ylabel}" + (" (log scale)" if log_y else ""))
    axes[0].set_title("against budget")
    axes[1].set_title("against wall-clock time")
    # Below the panels, so it never hides a line or band.
    fig.legend(*axes[0].get_legend_handles_labels(), loc="outside lower center", ncols=len(strategies),
               title="strategy (seeds)")
    fig.suptitle(f"{exp.get('benchmark', '')}: incumbent (full-fidelity results only), "
                 f"mean ± standard error over seeds")
    fig.savefig(path, dpi=100)
    return path


def _plain_log_ticks(ax, lo: float, hi: float) -> None:
    """Log x axis labelled 0.5, 1, 2, 5, 10 ... instead of matplotlib's 2x10^0 minor labels."""
    from matplotlib.ticker import NullFormatter

    decades = range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)
    steps = (1, 2, 5) if len(decades) <= 4 else (1,)  # many decades: powers of ten only
    ticks = [m * 10.0 ** k for k in decades for m in steps if lo <= m * 10.0 ** k <= hi]
    if len(ticks) < 2:  # a narrow range: label its ends
        ticks = [float(f"{lo:.2g}"), float(f"{hi:.2g}")]
    ax.set_xscale("log")
    ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
    ax.xaxis.set_minor_formatter(NullFormatter())


def plot_lr_batch(runs: pd.DataFrame, exp: dict, strategies: list[str], path: Path) -> Path | None:
    """lr against batch size, one point per trial at its full-fidelity (or, if stopped, last) row."""
    from matplotlib import cm, colors
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    metric = exp.get("metric", "loss")
    last = runs.groupby(["run_id", "trial_id"], sort=False).tail(1)  # rows are in report order
    ff_last = runs[runs["full_fidelity"]].groupby(["run_id", "trial_id"], sort=False).tail(1)
    pts = pd.concat([ff_last, last]).drop_duplicates(["run_id", "trial_id"])
    pts = pts.dropna(subset=[metric, "lr", "batch_size"])
    if pts.empty:
        return None
    norm = colors.Normalize(pts[metric].min(), pts[metric].max())
    sizes = sorted(pts["batch_size"].unique())
    # Batch sizes are a few discrete values: jitter them (seeded, so the figure is reproducible).
    jitter = 2 ** np.random.default_rng(0).uniform(-0.15, 0.15, len(pts))
    pts = pts.assign(y=pts["batch_size"].astype(float) * jitter)
    fig = Figure(figsize=(3.6 * len(strategies) + 1.5, 4.4), layout="constrained")
    axes = fig.subplots(1, len(strategies), sharex=True, sharey=True, squeeze=False)[0]
    for ax, s in zip(axes, strategies):
        d = pts[pts["strategy"] == s]
        for full, marker in ((True, "o"), (False, "X")):
            e = d[d["full_fidelity"] == full]
            ax.scatter(e["lr"], e["y"], c=e[metric], cmap="viridis", norm=norm, marker=marker, s=36,
                       edgecolors="k", linewidths=0.3)
        ax.set_xscale("log")
        ax.set_yscale("log", base=2)
        ax.set_yticks(sizes, [str(int(v)) for v in sizes])
        ax.minorticks_off()
        ax.set_title(f"{s} ({len(d)} trials)")
        ax.set_xlabel("learning rate (log scale)")
    axes[0].set_ylabel("batch size (images; log scale, jittered)")
    fig.legend(handles=[Line2D([], [], ls="", marker="o", color="grey", label="full fidelity"),
                        Line2D([], [], ls="", marker="X", color="grey", label="stopped early (loss at its last epoch)")],
               loc="outside lower center", ncols=2)  # outside the panels: it hides no point
    fig.colorbar(cm.ScalarMappable(norm, "viridis"), ax=list(axes), label=f"validation {metric} (lower is better)")
    fig.suptitle("What each strategy tried: one point per trial")
    fig.savefig(path, dpi=100)
    return path


# ---------------------------------------------------------------- text

def _g(x, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    if isinstance(x, (float, np.floating)):
        return "not reached" if math.isinf(x) else f"{x:.{digits}g}"
    return str(x)


def _verdicts(summary: dict, unit: str) -> list[str]:
    """One sentence per strategy, derived from the numbers; nothing here is written in advance."""
    out, t = [], summary["table"].set_index("strategy")
    for _, r in summary["tests"].iterrows():
        s, d = r["strategy"], r["delta_median"]
        nums = f"median {_g(r['median'])} vs {_g(r['median_random'])}, p={r['p']:.2g}"
        if r["p"] < ALPHA:
            better = summary["sign"] * d < 0
            text = (f"{s}: final {unit} {'lower' if d < 0 else 'higher'} than random search's ({nums}), "
                    f"so {'better' if better else 'worse'} than random at this budget.")
        else:
            text = f"{s}: no significant difference from random search ({nums})."
            if r["min_p"] >= ALPHA:
                text += (f" With {r['n']} and {r['n_random']} seeds the test cannot give p below "
                         f"{r['min_p']:.2g}, so more seeds are needed to show any difference.")
        if math.isfinite(t.loc[s, "speedup"]):
            text += (f" It reached random's median final {unit} in {t.loc[s, 'reached']} of {t.loc[s, 'runs']} "
                     f"runs, {t.loc[s, 'speedup']:.2g}x as fast as random by consumed budget.")
        out.append(text)
    return out


def _blocks(runs, exp, prov, summary, figures: dict) -> list[tuple]:
    """The report as ("h1"|"h2"|"p"|"ul"|"table"|"img", content) blocks, rendered to md and html."""
    metric = exp.get("metric", "loss")
    unit = "regret" if exp.get("regret") else metric
    tb, strategies, seeds = summary["table"], summary["strategies"], sorted(runs["seed"].unique())
    has_random = "random" in strategies
    kind = {"normalized_counting_ones": f"regret = loss / {exp.get('dims')} + 1 (normalised as in "
                                        "Falkner et al., ICML 2018; 0 at the optimum)",
            "difference": f"regret = loss - optimum ({_g(exp.get('optimum'), 6)})"}.get(exp.get("regret"))
    data = {k: v for k, v in _flatten(prov or {}) if k.split(".")[-1] in ("kind", "data")}
    b = [("h1", f"Strategy comparison: {exp.get('name', '')} on {exp.get('benchmark', '')}"),
         ("p", exp.get("description", "")),
         ("h2", "What was measured"),
         ("ul", [f"{len(strategies)} strategies ({', '.join(strategies)}) x {len(seeds)} seeds "
                 f"({', '.join(map(str, seeds))}); {runs['run_id'].nunique()} runs, {len(runs)} reported "
                 f"evaluations. Each run was given {exp['budget']:g} full evaluations of budget "
                 f"(a full evaluation = {exp['max_t']} iterations).",
                 f"Metric: {exp.get('metric', 'loss')} ({exp.get('mode', 'min')}imised). "
                 + (f"Plotted as {kind}." if kind else "No known optimum: the metric itself is plotted."),
                 "The incumbent counts only full-fidelity results (as in the BOHB paper): at budget b a "
                 "run's incumbent is its best full-fidelity result with consumed budget <= b. A strategy's "
                 "line starts where every one of its seeds has a full-fidelity result; before that it is "
                 "not drawn. Shaded: mean ± one standard error over seeds.",
                 "Against wall-clock time, a run's incumbent is carried forward after the run ended.",
                 *([f"Regret is drawn on a log axis, clipped at {REGRET_FLOOR:g}: regret 0 (the optimum) "
                    "and a mean - SE below 0 are drawn at that floor, below the axis's lower edge, so a "
                    "line or band leaving the bottom edge went below what the axis shows."]
                   if exp.get("regret") else []),
                 *([f"Data ({k}): {v}" for k, v in data.items()])]),
         ("h2", "Anytime performance"), ("img", figures["anytime"], "incumbent against budget and time"),
         ("h2", "Final results"), ("table", pd.DataFrame({
             "strategy": tb["strategy"], "n": tb["n"],
             f"final {unit} mean ± std": [f"{_g(m)} ± {_g(s, 2)}" for m, s in zip(tb["final_mean"], tb["final_std"])],
             **({f"final {metric} mean ± std": [f"{_g(m)} ± {_g(s, 2)}" for m, s in
                                                zip(tb["final_metric_mean"], tb["final_metric_std"])]}
                if unit != metric else {}),
             "budget to target (median)": [_g(v) for v in tb["budget_to_target"]],
             "reached target": [f"{r} of {n}" for r, n in zip(tb["reached"], tb["runs"])],
             "speed-up vs random": [f"{v:.2g}x" if math.isfinite(v) else "n/a" for v in tb["speedup"]],
             "trials per run": [f"{v:.1f}" for v in tb["trials_per_run"]],
             "epochs recomputed": tb["recomputed_epochs"],
             "wall time per run (s)": [f"{v:.1f}" for v in tb["wall_s_per_run"]]}))]
    b.append(("p", (f"n: seeds with a full-fidelity result. Target: random search's median final {unit} "
                    f"({_g(summary['target'])}). Budget to target: the first consumed budget (full "
                    "evaluations) at which a run's incumbent reached it, median over seeds (the lower "
                    "middle value for an even count, i.e. the budget by which at least half the runs got "
                    "there); runs that never reached it count as not reached. Speed-up: random's budget "
                    "to target divided by the strategy's.") if has_random else
                   "Target, budget-to-target and speed-up columns are not available: no random search runs."))
    short = stopped_early(summary["per_run"], exp, strategies)
    b += [("h2", "Runs that ended before the budget"),
          ("ul", short) if short else ("p", "Every run used its budget (to within one full evaluation).")]
    b += [("h2", "Significance against random search"),
          ("p", "Mann-Whitney U test, two-sided, of each strategy's final incumbents (one per seed) "
                f"against random search's. Effect: difference of medians, strategy minus random "
                f"(negative: lower final {unit}). Verdicts use p < {ALPHA:g}.")]
    if summary["tests"].empty:
        b.append(("p", "Not computed: " + ("no random search runs." if not has_random else
                                           "fewer than 2 seeds with a result.")))
    else:
        tt = summary["tests"]
        b += [("table", pd.DataFrame({
                  "strategy": tt["strategy"], "n": tt["n"], "n random": tt["n_random"],
                  f"median final {unit}": [_g(v) for v in tt["median"]],
                  "random's median": [_g(v) for v in tt["median_random"]],
                  "difference of medians": [_g(v) for v in tt["delta_median"]],
                  "p (Mann-Whitney U, two-sided)": [f"{v:.2g}" for v in tt["p"]]})),
              ("ul", _verdicts(summary, unit))]
    best = best_configs(runs, exp, strategies, summary["sign"])
    b += [("h2", "What was found"), ("p", "Best full-fidelity result of each strategy over all its seeds."),
          ("table", best.apply(lambda col: col.map(_g)) if len(best) else pd.DataFrame())]
    if "scatter" in figures:
        b.append(("img", figures["scatter"], "learning rate against batch size, coloured by loss"))
    b += [("h2", "Provenance"), ("table", pd.DataFrame(list(_flatten(prov)), columns=["key", "value"]))
          if prov else ("p", "provenance.json is missing: where these numbers came from is not recorded.")]
    return b


def _flatten(d: dict, prefix: str = ""):
    for k, v in d.items():
        if isinstance(v, dict) and v:
            yield from _flatten(v, f"{prefix}{k}.")
        else:
            yield f"{prefix}{k}", v if isinstance(v, str) else json.dumps(v, default=str)


def render_markdown(blocks: list[tuple]) -> str:
    out = []
    for kind, *c in blocks:
        if kind in ("h1", "h2"):
            out.append(("# " if kind == "h1" else "## ") + c[0])
        elif kind == "p":
            out.append(c[0])
        elif kind == "ul":
            out.append("\n".join(f"- {item}" for item in c[0]))
        elif kind == "img":
            out.append(f"![{c[1]}]({Path(c[0]).name})")
        elif kind == "table" and len(c[0].columns):
            cell = lambda v: str(v).replace("|", "\\|").replace("\n", " ")  # noqa: E731
            rows = [" | ".join(map(cell, c[0].columns)), " | ".join("---" for _ in c[0].columns),
                    *(" | ".join(map(cell, r)) for r in c[0].itertuples(index=False))]
            out.append("\n".join(f"| {r} |" for r in rows))
    return "\n\n".join(out) + "\n"


CSS = ("body{font-family:system-ui,sans-serif;max-width:1300px;margin:2em auto;padding:0 1em;color:#222}"
       "table{border-collapse:collapse;margin:1em 0;font-variant-numeric:tabular-nums}"
       "th,td{border:1px solid #ccc;padding:4px 8px;text-align:left;vertical-align:top;"
       "max-width:48em;overflow-wrap:break-word}th{background:#f2f2f2}img{max-width:100%}li{margin:.3em 0}")


def render_html(blocks: list[tuple], title: str) -> str:
    e, out = html.escape, []
    for kind, *c in blocks:
        if kind in ("h1", "h2", "p"):
            out.append(f"<{kind}>{e(c[0])}</{kind}>")
        elif kind == "ul":
            out.append("<ul>" + "".join(f"<li>{e(i)}</li>" for i in c[0]) + "</ul>")
        elif kind == "img":
            data = base64.b64encode(Path(c[0]).read_bytes()).decode()
            out.append(f'<img src="data:image/png;base64,{data}" alt="{e(c[1])}">')
        elif kind == "table" and len(c[0].columns):
            head = "".join(f"<th>{e(str(h))}</th>" for h in c[0].columns)
            body = "".join("<tr>" + "".join(f"<td>{e(str(v))}</td>" for v in r) + "</tr>"
                           for r in c[0].itertuples(index=False))
            out.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
    return (f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>{e(title)}</title>'
            f"<style>{CSS}</style></head><body>\n" + "\n".join(out) + "\n</body></html>\n")


# ---------------------------------------------------------------- entry points

def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")  # a crash never leaves a half-written report
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def write_report(out_dir: Path) -> dict:
    """Write report.md, report.html and the figures into `out_dir`, from its runs table,
    experiment.json and provenance.json. Returns the paths and the numeric tables."""
    out_dir = Path(out_dir)
    runs, exp, prov = load(out_dir)
    summary = summarize(runs, exp)
    ylabel = "regret" if exp.get("regret") else exp.get("metric", "loss")
    figures = {"anytime": plot_anytime(runs, exp, summary["strategies"], summary["sign"], ylabel,
                                       out_dir / FIGURES["anytime"])}
    if {"lr", "batch_size"} <= set(exp.get("params", [])) & set(runs.columns):  # the CIFAR space
        figures["scatter"] = plot_lr_batch(runs, exp, summary["strategies"], out_dir / FIGURES["scatter"])
    figures = {k: v for k, v in figures.items() if v is not None}
    blocks = _blocks(runs, exp, prov, summary, figures)
    md, page = out_dir / "report.md", out_dir / "report.html"
    _atomic_write(md, render_markdown(blocks))
    _atomic_write(page, render_html(blocks, blocks[0][1]))
    log.info("report written: %s, %s", md, page)
    return {"markdown": md, "html": page, "figures": list(figures.values()),
            "table": summary["table"], "tests": summary["tests"]}


def main(argv: list[str] | None = None) -> int:
    parser = cli.Parser(prog="python -m tuning.report", description=__doc__.split("\n\n")[0])
    parser.add_argument("dir", help="folder written by python -m tuning.compare (runs.csv, experiment.json, ...)")
    try:
        args = parser.parse_args(argv)
        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
        paths = write_report(Path(args.dir))
    except (ReportError, cli.UsageError, OSError) as exc:  # OSError: the folder cannot be written
        print(f"tuning.report: error: {exc}", file=sys.stderr)
        return 2
    print(f"Report: {paths['html']} and {paths['markdown']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
