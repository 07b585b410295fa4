"""The numbers of a strategy comparison, from what ``python -m tuning.compare`` wrote: the runs
table checked against its contract, regret, incumbents on a common budget / time grid, anytime
curves, per-run finals, budget to the reference's median (random search's unless the experiment names
another), and Mann-Whitney U tests against it.
``tuning.report`` turns them into figures and words."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from tuning import fidelity, results

GRID_POINTS = 200  # points of the common budget / time grid the seeds are averaged on
ALPHA = 0.05  # significance level the verdict sentences use
REQUIRED = ["strategy", "seed", "run_id", "trial_id", "training_iteration", "full_fidelity",
            "consumed_budget", "wall_s", "epoch"]


class ReportError(Exception):
    """DIR cannot be reported on: exit 2 with this one-line message."""


# ---------------------------------------------------------------- input

def load(out_dir: Path) -> tuple[pd.DataFrame, dict, dict]:
    """(runs, experiment, provenance) of a comparison folder, checked against the input contract."""
    out_dir = Path(out_dir)
    if not out_dir.is_dir():
        raise ReportError(f"{out_dir} is not a folder: pass a run's results dir (it holds run.json) or the folder "
                          "python -m tuning.compare wrote")
    if not (out_dir / "runs.parquet").exists() and not (out_dir / "runs.csv").exists():
        raise ReportError(f"{out_dir} holds no runs.csv or runs.parquet: "
                          "pass a run's results dir (it holds run.json) or the folder python -m tuning.compare wrote")
    try:
        exp = results.read_json(out_dir / "experiment.json")
        prov = results.read_json(out_dir / "provenance.json") if (out_dir / "provenance.json").exists() else None
    except results.ReadError as exc:
        raise ReportError(f"cannot read {exc.path}: {exc.reason}") from None
    try:
        runs = results.read_table(out_dir, "runs")
    except results.ReadError as exc:
        raise ReportError(f"cannot read the runs table in {out_dir}: {exc.reason}") from None
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
    runs["full_fidelity"] = runs["full_fidelity"].map(results.truthy).astype(bool)
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


def label(strategy: str, peers) -> str:
    """How tables and legends name a run's strategy: a peer (tuning/compare/peers.py, experiment.json's
    "peers") is marked, so it is never read as one of the service's own strategies."""
    return f"{strategy} (peer)" if strategy in peers else strategy


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
            "device_hours": float(r["device_hours"].max()) if "device_hours" in r else math.nan,
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
    """The numbers of the report: per-run rows, the final table and the tests against the
    reference strategy (experiment.json's "reference"; random search unless it names another)."""
    sign, strategies, ref = _sign(exp), _order(runs, exp), exp.get("reference", "random")
    pr = per_run(runs, sign, exp.get("metric", "loss"))
    base = pr.loc[pr["strategy"] == ref, "final"].dropna()
    target = float(base.median()) if len(base) else math.nan
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
               "wall_s_per_run": p["wall_s"].mean(), "device_hours_per_run": p["device_hours"].mean()}
        if len(base):
            b = np.array([_budget_to_target(r, target, sign)
                          for _, r in runs[runs["strategy"] == s].groupby("run_id", sort=False)])
            # Lower median for an even count: the budget by which at least half the runs got there.
            row["budget_to_target"] = b2t[s] = float(np.quantile(b, 0.5, method="lower"))
            row["reached"] = int(np.isfinite(b).sum())
        table.append(row)
        if s != ref and len(base) >= 2 and len(f) >= 2:
            tests.append({"strategy": s, "n": len(f), "n_reference": len(base), "median": f.median(),
                          "median_reference": base.median(), "delta_median": f.median() - base.median(),
                          "p": float(stats.mannwhitneyu(f, base, alternative="two-sided").pvalue),
                          # Exact two-sided U test without ties: no p below 2 / C(n1+n2, n1).
                          "min_p": min(1.0, 2 / math.comb(len(f) + len(base), len(f)))})
    table = pd.DataFrame(table)
    if ref in b2t:
        table["speedup"] = [b2t[ref] / b2t[s] if math.isfinite(b2t[s]) and math.isfinite(b2t[ref])
                            else math.nan for s in table["strategy"]]
    return {"per_run": pr, "table": table, "tests": pd.DataFrame(tests), "target": target,
            "strategies": strategies, "sign": sign, "reference": ref, "peers": list(exp.get("peers") or [])}


def stopped_early(pr: pd.DataFrame, exp: dict, strategies: list[str]) -> list[str]:
    """A sentence per strategy whose runs ended more than one full evaluation below the budget."""
    out, budget, peers = [], float(exp["budget"]), exp.get("peers") or []
    for s in strategies:
        p = pr[pr["strategy"] == s]
        short = p[p["budget_used"] < budget - 1]
        if short.empty:
            continue
        lo, hi = short["budget_used"].min(), short["budget_used"].max()
        used = f"{lo:.3g}" if math.isclose(lo, hi) else f"{lo:.3g}-{hi:.3g}"
        what = "grid exhausted" if s == "grid" else f"{label(s, peers)} stopped early (its search ended)"
        out.append(f"{what} after {used} of {budget:g} full evaluations in {len(short)} of {len(p)} runs")
    return out


def best_configs(runs: pd.DataFrame, exp: dict, strategies: list[str], sign: int) -> pd.DataFrame:
    """Per strategy, the full-fidelity row with the best metric over all its seeds. A parameter
    that configuration does not set (conditional, inactive) is "—"."""
    metric, rows = exp.get("metric", "loss"), []
    for s in strategies:
        ff = runs[(runs["strategy"] == s) & runs["full_fidelity"] & runs["value"].notna()]
        if ff.empty:
            continue
        r = ff.loc[(sign * ff["value"]).idxmin()]
        extra = ["accuracy"] if "accuracy" in runs.columns and pd.notna(r.get("accuracy")) else []
        params = [p for p in exp.get("params", []) if p in runs.columns]
        rows.append({"strategy": label(s, exp.get("peers") or []), "run": r["run_id"], "trial": r["trial_id"],
                     **({"regret": r["value"]} if exp.get("regret") else {}), metric: r[metric],
                     **{k: r[k] for k in extra},
                     **{k: "—" if pd.isna(r[k]) or r[k] == "" else r[k] for k in params}})
    return pd.DataFrame(rows)


def rank_agreement(runs: pd.DataFrame, exp: dict) -> tuple[list[fidelity.Agreement], int]:
    """(tuning.fidelity's agreements at the rungs a report shows, trials in all): every run's
    learning curves pooled, a trial keyed by (run_id, trial_id) since trial ids repeat across runs.
    Pooled, not per strategy: whether low epochs mislead is the trainer's property, not the
    strategy's, and pooling gives the most trials at the top epoch."""
    curves = fidelity.from_rows(runs, trial=["run_id", "trial_id"], value=exp.get("metric", "loss"))
    return fidelity.shown(curves), len(curves)
