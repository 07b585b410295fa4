"""The report of a comparison over several objectives (issue 41): hypervolume instead of regret.

A run's quality is the hypervolume of its feasible full-budget results against the reference point
the experiment declares, computed by moocore (López-Ibáñez et al.; `moocore.hypervolume`, which
takes each objective's direction), never by hand. Per run: the final hypervolume (and, where the
benchmark's true front is known, the hypervolume regret: the true front's hypervolume less the
run's), and the anytime curve: the hypervolume of what the run had found by each consumed budget.
Per strategy: mean ± standard error over seeds, and a Mann-Whitney U test (scipy, two-sided) of its
final hypervolumes against the reference strategy's, as the single-objective report tests regret.
Written by tuning.report.comparison.write_report when experiment.json declares objectives.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from tuning import objectives, results
from tuning.compare import peers as peer_runs
from tuning.report.analysis import ALPHA, GRID_POINTS, _order, label
from tuning.report.render import flatten, number, render_html, render_markdown

log = logging.getLogger(__name__)

FIGURES = {"anytime": "report-hypervolume.png", "front": "report-fronts.png"}


def check_reference(point, ways: dict, what: str) -> tuple[float, ...]:
    """The reference point as a tuple of floats, one per objective (tuning.objectives.reference_point
    checks it); ValueError saying what to declare where it is missing or wrong."""
    names = ", ".join(f"{k} ({w})" for k, w in ways.items())
    if point is None:
        raise ValueError(f"{what}: several objectives need a reference point for the hypervolume: declare "
                         f"reference_point=(...) with one value per objective ({names})")
    if len(ways) == 1:  # one objective under constraints (objectives.reference_point takes two or more)
        values = list(point.values()) if isinstance(point, dict) else point
        if (isinstance(values, (list, tuple)) and len(values) == 1 and isinstance(values[0], (int, float))
                and not isinstance(values[0], bool) and math.isfinite(values[0])):
            return (float(values[0]),)
        raise ValueError(f"{what}: reference point {point!r}: give one finite number, for {names}")
    try:
        return tuple(objectives.reference_point(point, ways).values())
    except ValueError as exc:
        raise ValueError(f"{what}: {exc}") from None


# ---------------------------------------------------------------- numbers

def _points(rows: pd.DataFrame, exp: dict) -> pd.DataFrame:
    """The rows that count: full-budget, every objective a finite number, feasible."""
    ways = exp["objectives"]
    ff = rows[rows["full_fidelity"]]
    values = ff[list(ways)].apply(pd.to_numeric, errors="coerce")
    ok = np.isfinite(values.to_numpy(dtype=float)).all(axis=1)
    if exp.get("constraints"):
        cons = {k: tuple(v) for k, v in exp["constraints"].items()}
        ok &= np.array([objectives.violation(r, cons) == 0 for r in ff.to_dict("records")], dtype=bool)
    return ff[ok]


def hypervolume(points: np.ndarray, exp: dict) -> float:
    """moocore's hypervolume of `points` (rows in the objectives' order) against the reference point;
    0 for none. moocore leaves out points that do not strictly dominate the reference point."""
    if len(points) == 0:
        return 0.0
    import moocore

    maximise = [w == "max" for w in exp["objectives"].values()]
    return float(moocore.hypervolume(np.asarray(points, dtype=float), ref=exp["reference_point"], maximise=maximise))


def run_curve(run: pd.DataFrame, exp: dict) -> pd.DataFrame:
    """One run's anytime hypervolume: consumed_budget -> the hypervolume of its counted rows so far."""
    pts = _points(run.sort_values("consumed_budget", kind="stable"), exp)
    values = pts[list(exp["objectives"])].to_numpy(dtype=float)
    return pd.DataFrame({"consumed_budget": pts["consumed_budget"].to_numpy(),
                         "hypervolume": [hypervolume(values[:i + 1], exp) for i in range(len(values))]})


def per_run(runs: pd.DataFrame, exp: dict) -> pd.DataFrame:
    """One row per run: final hypervolume, its regret where the true front is known, front size."""
    true = exp.get("true_hypervolume")
    out = []
    for run_id, run in runs.groupby("run_id", sort=False):
        pts = _points(run, exp)
        values = pts[list(exp["objectives"])].to_numpy(dtype=float)
        hv = hypervolume(values, exp)
        front = 0
        if len(values):
            import moocore

            signed = values * np.array([1 if w == "min" else -1 for w in exp["objectives"].values()])
            front = int(moocore.is_nondominated(signed).sum())
        out.append({"run_id": run_id, "strategy": run["strategy"].iloc[0], "seed": int(run["seed"].iloc[0]),
                    "hypervolume": hv, "hv_regret": (true - hv) if true is not None else math.nan,
                    "counted": len(values), "front_size": front, "trials": run["trial_id"].nunique(),
                    "budget_used": float(run["consumed_budget"].max()), "wall_s": float(run["wall_s"].max())})
    return pd.DataFrame(out)


def anytime(runs: pd.DataFrame, exp: dict, strategies: list[str]) -> tuple[np.ndarray, dict]:
    """(the budget grid, strategy -> {mean, sem, n}) of the runs' hypervolume curves."""
    grid = np.linspace(0, float(exp["budget"]), GRID_POINTS)
    out = {}
    for s in strategies:
        curves = []
        for _, run in runs[runs["strategy"] == s].groupby("run_id", sort=False):
            c = run_curve(run, exp)
            idx = np.searchsorted(c["consumed_budget"].to_numpy(), grid, side="right") - 1
            curves.append(np.where(idx >= 0, c["hypervolume"].to_numpy()[np.maximum(idx, 0)] if len(c) else 0, 0.0))
        m = np.array(curves)
        out[s] = {"mean": m.mean(axis=0), "n": len(m),
                  "sem": m.std(axis=0, ddof=1) / math.sqrt(len(m)) if len(m) > 1 else np.zeros(len(grid))}
    return grid, out


def summarize(runs: pd.DataFrame, exp: dict) -> dict:
    strategies, ref = _order(runs, exp), exp.get("reference", "random")
    pr = per_run(runs, exp)
    table, tests = [], []
    base = pr.loc[pr["strategy"] == ref, "hypervolume"]
    for s in strategies:
        d = pr[pr["strategy"] == s]
        hv = d["hypervolume"]
        table.append({"strategy": s, "n": len(d), "hv_mean": hv.mean(), "hv_sem": hv.sem() if len(d) > 1 else math.nan,
                      "regret_mean": d["hv_regret"].mean(), "regret_sem": d["hv_regret"].sem() if len(d) > 1 else math.nan,
                      "front_size": d["front_size"].mean(), "trials_per_run": d["trials"].mean(),
                      "wall_s_per_run": d["wall_s"].mean()})
        if s != ref and len(hv) >= 2 and len(base) >= 2:
            tests.append({"strategy": s, "n": len(hv), "n_reference": len(base), "median": hv.median(),
                          "median_reference": base.median(), "delta_median": hv.median() - base.median(),
                          "p": float(stats.mannwhitneyu(hv, base, alternative="two-sided").pvalue),
                          "min_p": min(1.0, 2 / math.comb(len(hv) + len(base), len(hv)))})
    # sign -1: a higher hypervolume is better; no target, so no speed-up
    return {"per_run": pr, "table": pd.DataFrame(table).assign(speedup=math.nan), "tests": pd.DataFrame(tests),
            "strategies": strategies, "reference": ref, "peers": exp.get("peers") or [], "sign": -1}


# ---------------------------------------------------------------- figures

def plot_anytime(runs: pd.DataFrame, exp: dict, summary: dict, path: Path) -> Path:
    from matplotlib.figure import Figure

    grid, curves = anytime(runs, exp, summary["strategies"])
    fig = Figure(figsize=(7.5, 5), layout="constrained")
    ax = fig.subplots()
    for i, (s, c) in enumerate(curves.items()):
        peer = s in summary["peers"]
        ax.plot(grid, c["mean"], color=f"C{i}", drawstyle="steps-post", lw=2, ls="--" if peer else "-",
                label=f"{label(s, summary['peers'])} (n={c['n']})")
        if c["n"] > 1:
            ax.fill_between(grid, c["mean"] - c["sem"], c["mean"] + c["sem"], color=f"C{i}", alpha=0.2, step="post", lw=0)
    if exp.get("true_hypervolume") is not None:
        ax.axhline(exp["true_hypervolume"], color="k", lw=1, ls=":", label="true front")
    ax.set_xlabel(f"consumed budget (full evaluations; {exp['max_t']} iterations each)")
    ax.set_ylabel("hypervolume of the feasible full-budget results")
    ax.grid(True, alpha=0.3)
    fig.legend(*ax.get_legend_handles_labels(), loc="outside lower center", ncols=3, title="strategy (seeds)")
    fig.suptitle(f"{exp.get('benchmark', '')}: hypervolume against budget\nmean ± standard error over seeds")
    fig.savefig(path, dpi=100)
    return path


def plot_fronts(runs: pd.DataFrame, exp: dict, summary: dict, path: Path) -> Path | None:
    """Two objectives: every strategy's counted results over all seeds, its pooled front drawn."""
    names = list(exp["objectives"])
    if len(names) != 2:
        return None
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.5, 5.5), layout="constrained")
    ax = fig.subplots()
    for i, s in enumerate(summary["strategies"]):
        pts = _points(runs[runs["strategy"] == s], exp)[names].to_numpy(dtype=float)
        if not len(pts):
            continue
        import moocore

        signed = pts * np.array([1 if exp["objectives"][k] == "min" else -1 for k in names])
        front = pts[moocore.is_nondominated(signed)]
        front = front[np.argsort(front[:, 0])]
        ax.scatter(pts[:, 0], pts[:, 1], s=8, color=f"C{i}", alpha=0.25)
        ax.plot(front[:, 0], front[:, 1], color=f"C{i}", marker="o", ms=4, drawstyle="steps-post"
                if exp["objectives"][names[1]] == "min" else "steps-pre", label=label(s, summary["peers"]))
    ax.scatter(*exp["reference_point"], marker="x", color="k", s=60, label="reference point")
    ax.set_xlabel(f"{names[0]} ({exp['objectives'][names[0]]})")
    ax.set_ylabel(f"{names[1]} ({exp['objectives'][names[1]]})")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.suptitle("Every feasible full-budget result, all seeds pooled\nlines: each strategy's front over its seeds")
    fig.savefig(path, dpi=100)
    return path


# ---------------------------------------------------------------- text

def _blocks(runs, exp, prov, summary, figures, verdicts) -> list[tuple]:
    ways, true = exp["objectives"], exp.get("true_hypervolume")
    seeds = sorted(runs["seed"].unique())
    t = summary["table"]
    peers = [s for s in summary["strategies"] if s in (exp.get("peers") or [])]
    noun = "strategies and peers" if peers else "strategies"
    measured = [
        f"{len(summary['strategies'])} {noun} ({', '.join(summary['strategies'])}) x {len(seeds)} seeds "
        f"({', '.join(map(str, seeds))}); {runs['run_id'].nunique()} runs. Each run was given {exp['budget']:g} full "
        f"evaluations of budget (a full evaluation = {exp['max_t']} iterations).",
        f"Objectives: {', '.join(f'{k} ({w})' for k, w in ways.items())}"
        + (f"; constraints: {', '.join(f'{k} {op} {b:g}' for k, (op, b) in exp['constraints'].items())}"
           if exp.get("constraints") else "") + f". Reference point: {tuple(exp['reference_point'])}.",
        "A run's hypervolume counts its full-budget results that meet every constraint, against the reference "
        "point, computed by moocore (a point that does not dominate the reference point adds nothing). At "
        "budget b it counts the results with consumed budget <= b. Shaded: mean ± one standard error over seeds.",
        (f"The true front's hypervolume is {number(true, 6)}; hypervolume regret = that less the run's."
         if true is not None else "The benchmark's true front is not known: no hypervolume regret."),
        *peer_runs.report_lines(exp)]
    table = pd.DataFrame({
        "strategy": [label(s, summary["peers"]) for s in t["strategy"]], "n": t["n"],
        "final hypervolume mean ± SE": [f"{number(m)} ± {number(s, 2)}" for m, s in zip(t["hv_mean"], t["hv_sem"])],
        **({"hypervolume regret mean ± SE": [f"{number(m)} ± {number(s, 2)}"
                                             for m, s in zip(t["regret_mean"], t["regret_sem"])]} if true is not None else {}),
        "front size per run": [f"{v:.1f}" for v in t["front_size"]],
        "trials per run": [f"{v:.1f}" for v in t["trials_per_run"]],
        "wall time per run (s)": [f"{v:.1f}" for v in t["wall_s_per_run"]]})
    ref, tests = summary["reference"], summary["tests"]
    blocks = [("h1", f"Strategy comparison: {exp.get('name', '')} on {exp.get('benchmark', '')}, several objectives"),
              ("p", exp.get("description", "")), ("h2", "What was measured"), ("ul", measured),
              ("h2", "Anytime hypervolume"), ("img", figures["anytime"], "hypervolume against budget"),
              ("h2", "Final hypervolume"), ("table", table),
              ("h2", f"Significance against {ref}"),
              ("p", "Mann-Whitney U test, two-sided, of each strategy's final hypervolumes (one per seed) against "
                    f"{ref}'s. Effect: difference of medians, strategy minus {ref} (positive: more hypervolume). "
                    f"Verdicts use p < {ALPHA:g}.")]
    if tests.empty:
        blocks.append(("p", "Not computed: " + (f"no {ref} runs." if ref not in summary["strategies"]
                                                else "fewer than 2 seeds with a result.")))
    else:
        blocks += [("table", pd.DataFrame({
            "strategy": [label(s, summary["peers"]) for s in tests["strategy"]], "n": tests["n"],
            f"n {ref}": tests["n_reference"], "median final hypervolume": [number(v) for v in tests["median"]],
            f"{ref}'s median": [number(v) for v in tests["median_reference"]],
            "difference of medians": [number(v) for v in tests["delta_median"]],
            "p (Mann-Whitney U, two-sided)": [f"{v:.2g}" for v in tests["p"]]})), ("ul", verdicts(summary, "hypervolume"))]
    if "front" in figures:
        blocks += [("h2", "The fronts found"), ("img", figures["front"], "fronts")]
    blocks += [("h2", "Provenance"), ("table", pd.DataFrame(list(flatten(prov)), columns=["key", "value"]))
               if prov else ("p", "provenance.json is missing: where these numbers came from is not recorded.")]
    return blocks


def write_report(out_dir: Path, runs: pd.DataFrame, exp: dict, prov: dict | None, verdicts) -> dict:
    """report.md, report.html, the figures and finals.csv (one row per run: its final hypervolume,
    and `final`, what the summary over tasks ranks by, lower better: the hypervolume regret where the
    true front is known, else minus the hypervolume). verdicts(summary, unit): the single-metric
    report's sentences of the tests (tuning.report.comparison), which read summary's sign (-1: higher
    is better) and its table's speed-ups (none here)."""
    summary = summarize(runs, exp)
    figures = {"anytime": plot_anytime(runs, exp, summary, out_dir / FIGURES["anytime"]),
               "front": plot_fronts(runs, exp, summary, out_dir / FIGURES["front"])}
    figures = {k: v for k, v in figures.items() if v is not None}
    blocks = _blocks(runs, exp, prov, summary, figures, verdicts)
    md, page = out_dir / "report.md", out_dir / "report.html"
    results.write_text(md, render_markdown(blocks))
    results.write_text(page, render_html(blocks, blocks[0][1]))
    pr = summary["per_run"]
    pr = pr.assign(final=pr["hv_regret"] if exp.get("true_hypervolume") is not None else -pr["hypervolume"])
    finals = out_dir / "finals.csv"
    results.write_text(finals, pr.to_csv(index=False))
    log.info("report written: %s, %s, %s", md, page, finals)
    return {"markdown": md, "html": page, "finals": finals, "figures": list(figures.values()),
            "table": summary["table"], "tests": summary["tests"]}
