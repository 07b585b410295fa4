"""``python -m tuning.report DIR``: the report of a strategy comparison, or of one tuning.run.

For a comparison, reads what ``python -m tuning.compare`` wrote to DIR (runs.parquet or runs.csv,
experiment.json, provenance.json) and writes report.md, a self-contained report.html (plots inlined
as base64 PNG, no external files) and the plot PNGs. Every number and figure is computed from those
three files, so deleting the report and running this again gives the same report. For a tuning.run
results dir (run.json, trials.csv), tuning.report.runreport writes the run's report.
"""

from __future__ import annotations

import logging
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from tuning import cli, fidelity, results
from tuning.compare import peers as peer_runs, recorded as replay
from tuning.report.analysis import (ALPHA, ReportError, anytime_curves, best_configs, label, load, make_grid,
                             rank_agreement, stopped_early, summarize)
from tuning.report.render import flatten, number, render_html, render_markdown

log = logging.getLogger(__name__)

REGRET_FLOOR = 1e-6  # a log axis cannot show 0: regrets below this are drawn at it
FIGURES = {"anytime": "report-anytime.png", "scatter": "report-lr-batch_size.png"}


# ---------------------------------------------------------------- figures

def plot_anytime(runs: pd.DataFrame, exp: dict, strategies: list[str], sign: int, ylabel: str,
                 path: Path) -> Path:
    from matplotlib.figure import Figure  # a bare Figure: no pyplot state, no backend to choose

    log_y, color = exp.get("regret") is not None, {s: f"C{i}" for i, s in enumerate(strategies)}
    ff = runs[runs["full_fidelity"]]
    panels = [("consumed_budget", f"consumed budget (full evaluations; {exp['max_t']} iterations each)",
               "against budget"),
              ("wall_s", "wall-clock time since the run started (s)", "against wall-clock time")]
    if "device_hours" in runs.columns and runs["device_hours"].notna().all():  # runs before it lack it
        panels.append(("device_hours", "device-hours the run's trials used (CPU-hours; GPU-hours on GPUs)",
                       "against device-hours"))
    fig = Figure(figsize=(6.5 * len(panels), 5), layout="constrained")
    axes = fig.subplots(1, len(panels), sharey=True)
    lowest = math.inf  # smallest drawn positive value: where a log y axis starts
    for ax, (x, xlabel, title) in zip(axes, panels):
        ax.set_title(title)
        grid, log_x = make_grid(ff[x], float(runs[x].max()))
        for s, c in anytime_curves(runs, strategies, grid, x, sign).items():
            mean, sem = c["mean"], np.nan_to_num(c["sem"])
            lo, hi = mean - sem, mean + sem
            if log_y:  # regret 0 (the optimum found) and mean - SE < 0 cannot be drawn on a log axis
                lowest = min([lowest, *(v[v > REGRET_FLOOR].min() for v in (mean, lo) if (v > REGRET_FLOOR).any())])
                mean, lo, hi = (np.maximum(v, REGRET_FLOOR) for v in (mean, lo, hi))
            peer = s in (exp.get("peers") or [])  # dashed: run in process by Optuna, not by the service
            ax.plot(grid, mean, color=color[s], drawstyle="steps-post", lw=2, ls="--" if peer else "-",
                    label=f"{label(s, exp.get('peers') or [])} (n={c['n']})")
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

def _name(ref: str) -> str:
    """How the text names the reference strategy: random search, or the strategy's own name."""
    return "random search" if ref == "random" else ref


def _verdicts(summary: dict, unit: str) -> list[str]:
    """One sentence per strategy, derived from the numbers; nothing here is written in advance."""
    out, t = [], summary["table"].set_index("strategy")
    ref, name = summary["reference"], _name(summary["reference"])
    for _, r in summary["tests"].iterrows():
        s, d = r["strategy"], r["delta_median"]
        shown = label(s, summary["peers"])
        nums = f"median {number(r['median'])} vs {number(r['median_reference'])}, p={r['p']:.2g}"
        if r["p"] < ALPHA:
            better = summary["sign"] * d < 0
            text = (f"{shown}: final {unit} {'lower' if d < 0 else 'higher'} than {name}'s ({nums}), "
                    f"so {'better' if better else 'worse'} than {ref} at this budget.")
        else:
            text = f"{shown}: no significant difference from {name} ({nums})."
            if r["min_p"] >= ALPHA:
                text += (f" With {r['n']} and {r['n_reference']} seeds the test cannot give p below "
                         f"{r['min_p']:.2g}, so more seeds are needed to show any difference.")
        if math.isfinite(t.loc[s, "speedup"]):
            text += (f" It reached {ref}'s median final {unit} in {t.loc[s, 'reached']} of {t.loc[s, 'runs']} "
                     f"runs, {t.loc[s, 'speedup']:.2g}x as fast as {ref} by consumed budget.")
        out.append(text)
    return out


def _measured(runs, exp, prov, strategies) -> list[str]:
    """What was run, on what, and how to read the figure."""
    seeds = sorted(runs["seed"].unique())
    kind = {"normalized_counting_ones": f"regret = loss / {exp.get('dims')} + 1 (normalised as in "
                                        "Falkner et al., ICML 2018; 0 at the optimum)",
            "difference": f"regret = {exp.get('metric') or 'loss'} - optimum ({number(exp.get('optimum'), 6)})"
            if exp.get("mode", "min") == "min" else
            f"regret = optimum ({number(exp.get('optimum'), 6)}) - {exp.get('metric')}"}.get(exp.get("regret"))
    data = {k: v for k, v in flatten(prov or {}) if k.split(".")[-1] in ("kind", "data")}
    peers = [s for s in strategies if s in (exp.get("peers") or [])]  # run in process by Optuna
    own = [s for s in strategies if s not in peers]
    ran = " and ".join(f"{len(g)} {noun} ({', '.join(g)})" for g, noun in ((own, "strategies"), (peers, "peers")) if g)
    return [f"{ran} x {len(seeds)} seeds "
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
            *peer_runs.report_lines(exp),
            *([f"Data ({k}): {v}" for k, v in data.items()])]


def _finals(summary: dict, metric: str, unit: str) -> list[tuple]:
    """The final table and what its target columns mean."""
    stats, ref = summary["table"], summary["reference"]
    table = pd.DataFrame({
        "strategy": [label(s, summary["peers"]) for s in stats["strategy"]], "n": stats["n"],
        f"final {unit} mean ± std": [f"{number(m)} ± {number(s, 2)}"
                                     for m, s in zip(stats["final_mean"], stats["final_std"])],
        **({f"final {metric} mean ± std": [f"{number(m)} ± {number(s, 2)}" for m, s in
                                           zip(stats["final_metric_mean"], stats["final_metric_std"])]}
           if unit != metric else {}),
        "budget to target (median)": ["not reached" if math.isinf(v) else number(v)  # inf: the median run never did
                                      for v in stats["budget_to_target"]],
        "reached target": [f"{r} of {n}" for r, n in zip(stats["reached"], stats["runs"])],
        f"speed-up vs {ref}": [f"{v:.2g}x" if math.isfinite(v) else "n/a" for v in stats["speedup"]],
        "trials per run": [f"{v:.1f}" for v in stats["trials_per_run"]],
        "epochs recomputed": stats["recomputed_epochs"],
        "wall time per run (s)": [f"{v:.1f}" for v in stats["wall_s_per_run"]],
        "device-hours per run": [number(v) for v in stats["device_hours_per_run"]]})
    note = (f"n: seeds with a full-fidelity result. Target: {_name(ref)}'s median final {unit} "
            f"({number(summary['target'])}). Budget to target: the first consumed budget (full "
            "evaluations) at which a run's incumbent reached it, median over seeds (the lower "
            "middle value for an even count, i.e. the budget by which at least half the runs got "
            f"there); runs that never reached it count as not reached. Speed-up: {ref}'s budget "
            "to target divided by the strategy's.") if ref in summary["strategies"] else (
            f"Target, budget-to-target and speed-up columns are not available: no {_name(ref)} runs.")
    return [("h2", "Final results"), ("table", table), ("p", note)]


def _significance(summary: dict, unit: str) -> list[tuple]:
    """Mann-Whitney U tests of every strategy against the reference, and their verdicts."""
    ref, name = summary["reference"], _name(summary["reference"])
    blocks = [("h2", f"Significance against {name}"),
              ("p", "Mann-Whitney U test, two-sided, of each strategy's final incumbents (one per seed) "
                    f"against {name}'s. Effect: difference of medians, strategy minus {ref} "
                    f"(negative: lower final {unit}). Verdicts use p < {ALPHA:g}.")]
    tests = summary["tests"]
    if tests.empty:
        return blocks + [("p", "Not computed: " + (f"no {name} runs." if ref not in summary["strategies"] else
                                                   "fewer than 2 seeds with a result."))]
    return blocks + [("table", pd.DataFrame({
                         "strategy": [label(s, summary["peers"]) for s in tests["strategy"]], "n": tests["n"],
                         f"n {ref}": tests["n_reference"],
                         f"median final {unit}": [number(v) for v in tests["median"]],
                         f"{ref}'s median": [number(v) for v in tests["median_reference"]],
                         "difference of medians": [number(v) for v in tests["delta_median"]],
                         "p (Mann-Whitney U, two-sided)": [f"{v:.2g}" for v in tests["p"]]})),
                     ("ul", _verdicts(summary, unit))]


def _blocks(runs, exp, prov, summary, figures: dict) -> list[tuple]:
    """The report as ("h1"|"h2"|"p"|"ul"|"table"|"img", content) blocks, rendered to md and html."""
    metric = exp.get("metric", "loss")
    unit = "regret" if exp.get("regret") else metric
    strategies = summary["strategies"]
    blocks = [("h1", f"Strategy comparison: {exp.get('name', '')} on {exp.get('benchmark', '')}"),
              ("p", exp.get("description", "")),
              ("h2", "What was measured"), ("ul", _measured(runs, exp, prov, strategies)),
              ("h2", "Anytime performance"), ("img", figures["anytime"], "incumbent against budget and time"),
              *_finals(summary, metric, unit)]
    short = stopped_early(summary["per_run"], exp, strategies)
    blocks += [("h2", "Runs that ended before the budget"),
               ("ul", short) if short else ("p", "Every run used its budget (to within one full evaluation).")]
    blocks += _significance(summary, unit)
    best = best_configs(runs, exp, strategies, summary["sign"])
    blocks += [("h2", "What was found"), ("p", "Best full-fidelity result of each strategy over all its seeds."),
               ("table", best.apply(lambda col: col.map(number)) if len(best) else pd.DataFrame())]
    if "scatter" in figures:
        blocks.append(("img", figures["scatter"], "learning rate against batch size, coloured by loss"))
    if exp.get("replay"):  # a replayed run (tuning/compare/recorded.py): which recorded configuration each strategy found
        blocks += replay.report_blocks(runs, exp, strategies)
    agreed, trials = rank_agreement(runs, exp)  # whether the benchmark's low fidelities mislead
    blocks += fidelity.report_blocks(agreed, trials=trials, metric=metric,
                                     pooled=" in any run (every strategy's and seed's trials pooled)")
    blocks += [("h2", "Provenance"), ("table", pd.DataFrame(list(flatten(prov)), columns=["key", "value"]))
               if prov else ("p", "provenance.json is missing: where these numbers came from is not recorded.")]
    return blocks


# ---------------------------------------------------------------- entry points

def write_report(out_dir: Path) -> dict:
    """Write report.md, report.html and the figures into `out_dir`, from its runs table,
    experiment.json and provenance.json. Returns the paths and the numeric tables."""
    out_dir = Path(out_dir)
    runs, exp, prov = load(out_dir)
    if exp.get("objectives"):  # several objectives, or constraints: hypervolume, not regret
        from tuning.report import mocompare

        return mocompare.write_report(out_dir, runs, exp, prov, _verdicts)
    summary = summarize(runs, exp)
    ylabel = "regret" if exp.get("regret") else exp.get("metric", "loss")
    figures = {"anytime": plot_anytime(runs, exp, summary["strategies"], summary["sign"], ylabel,
                                       out_dir / FIGURES["anytime"])}
    if {"lr", "batch_size"} <= set(exp.get("params", [])) & set(runs.columns):  # the CIFAR space
        figures["scatter"] = plot_lr_batch(runs, exp, summary["strategies"], out_dir / FIGURES["scatter"])
    figures = {k: v for k, v in figures.items() if v is not None}
    blocks = _blocks(runs, exp, prov, summary, figures)
    md, page = out_dir / "report.md", out_dir / "report.html"
    results.write_text(md, render_markdown(blocks))
    results.write_text(page, render_html(blocks, blocks[0][1]))
    # One row per run (final incumbent, budget, trials): small enough to commit beside the report.
    finals, per_run = out_dir / "finals.csv", summary["per_run"]
    if exp.get("replay"):  # which recorded configuration each run ended on, and when it first found the best
        per_run = per_run.merge(replay.outcomes(runs, exp).drop(columns=["strategy", "seed"]), on="run_id")
    results.write_text(finals, per_run.to_csv(index=False))
    log.info("report written: %s, %s, %s", md, page, finals)
    return {"markdown": md, "html": page, "finals": finals, "figures": list(figures.values()),
            "table": summary["table"], "tests": summary["tests"]}


def main(argv: list[str] | None = None) -> int:
    parser = cli.Parser(prog="python -m tuning.report", description=__doc__.split("\n\n")[0])
    parser.add_argument("dir", help="results dir of python -m tuning.run (run.json, trials.csv, ...) or folder "
                                    "written by python -m tuning.compare (runs.csv, experiment.json, ...)")
    try:
        args = parser.parse_args(argv)
        if not args.dir.strip():  # Path('') is the current folder: ". holds no runs.csv"
            raise cli.UsageError("the folder '' names none: give a results dir of tuning.run or tuning.compare")
        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
        from tuning.report import runreport  # a run's report: matplotlib and Optuna, only when asked for

        paths = (runreport.regenerate if runreport.is_run_dir(args.dir) else write_report)(Path(args.dir))
    except (ReportError, cli.UsageError, OSError) as exc:  # OSError: the folder cannot be written
        print(f"tuning.report: error: {exc}", file=sys.stderr)
        return 2
    print(f"Report: {paths['html']} and {paths['markdown']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
