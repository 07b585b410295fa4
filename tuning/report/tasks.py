"""The summary of a comparison over several tasks (an experiment with `tasks=`): each task's own
comparison stays in <out>/<task>/ with its full report; this writes <out>/summary.md and
summary.csv across them, as the YAHPO Gym paper (Pfisterer et al., AutoML-Conf 2022) reports:

- per task, each row's mean final regret over seeds (the incumbent at the full budget);
- the mean normalized regret over tasks: on each task every run's final regret scaled to [0, 1]
  by the best and worst final of any run of any row on that task (0: the best any run found, 1:
  the worst run's end), then averaged over seeds and tasks, so no task's scale dominates;
- the mean rank over tasks: on each task the rows ranked by mean final regret (1 is best, ties
  share the mean rank);
- where a reference peer ran (optuna_tpe: Optuna's TPE, every trial trained to the end), each
  row's worst ratio of its mean regret to that peer's over the tasks: "never far behind the
  obvious alternative" as a number.

Over several objectives (tuning/report/mocompare.py) each run's final is its hypervolume regret
where every task's true front is known (the peer: optuna_motpe), else its hypervolume, negated so
that lower is better as above; the table then shows the hypervolume itself, and no ratio.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pandas as pd

from tuning import results
from tuning.report.render import number, render_markdown

log = logging.getLogger(__name__)

PEER = "optuna_tpe"  # the alternative every row is held against (tuning/compare/peers.py)
MO_PEER = "optuna_motpe"  # the same, over several objectives


def _kind(folders: dict[str, Path]) -> str:
    """What the finals are: "regret", "hypervolume regret", or "hypervolume" (negated in finals.csv)."""
    exps = [json.loads((f / "experiment.json").read_text()) for f in folders.values()]
    if not any(e.get("objectives") for e in exps):
        return "regret"
    return "hypervolume regret" if all(e.get("true_hypervolume") is not None for e in exps) else "hypervolume"


def finals(folders: dict[str, Path]) -> pd.DataFrame:
    """Every run's final regret on every task: task, strategy, seed, final."""
    frames = []
    for task, folder in folders.items():
        df = pd.read_csv(folder / "finals.csv")
        frames.append(df.assign(task=task)[["task", "strategy", "seed", "final"]])
    return pd.concat(frames, ignore_index=True)


def summarize(runs: pd.DataFrame, peer: str | None = PEER) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(per task x strategy: mean, std, n of the final regret and the normalized regret; per
    strategy over tasks: mean normalized regret, mean rank, worst ratio to PEER)."""
    lo = runs.groupby("task")["final"].transform("min")
    hi = runs.groupby("task")["final"].transform("max")
    runs = runs.assign(normalized=np.where(hi > lo, (runs["final"] - lo) / (hi - lo).where(hi > lo, 1), 0.0))
    per_task = runs.groupby(["task", "strategy"]).agg(mean=("final", "mean"), std=("final", "std"),
                                                      n=("final", "size"), normalized=("normalized", "mean"))
    per_task = per_task.reset_index()
    per_task["rank"] = per_task.groupby("task")["mean"].rank(method="average")
    overall = per_task.groupby("strategy").agg(normalized=("normalized", "mean"), rank=("rank", "mean"),
                                               tasks=("task", "nunique")).reset_index()
    if peer in set(per_task["strategy"]):
        held = per_task[per_task["strategy"] == peer].set_index("task")["mean"]
        ratio = per_task.assign(ratio=per_task["mean"] / per_task["task"].map(held).clip(lower=1e-12))
        worst = ratio.groupby("strategy")["ratio"].max()
        overall["worst_ratio_to_peer"] = overall["strategy"].map(worst)
    return per_task, overall.sort_values("normalized").reset_index(drop=True)


def write_summary(out: Path, folders: dict[str, Path], *, description: str = "", command: str = "") -> dict:
    kind = _kind(folders)
    peer = {"regret": PEER, "hypervolume regret": MO_PEER}.get(kind)  # no ratio of hypervolumes negated
    per_task, overall = summarize(finals(folders), peer)
    results.write_text(out / "summary.csv", per_task.to_csv(index=False))
    tasks = list(folders)
    wide = per_task.pivot(index="strategy", columns="task", values="mean")[tasks]
    if kind == "hypervolume":
        wide = -wide  # finals.csv holds it negated, lower better
    order = list(overall["strategy"])
    header = ["strategy", *tasks, f"mean normalized {kind}", "mean rank"]
    has_peer = "worst_ratio_to_peer" in overall
    if has_peer:
        header.append(f"worst ratio to {peer}")
    rows = []
    for _, o in overall.iterrows():
        s = o["strategy"]
        cells = [s, *(number(wide.loc[s, t]) for t in tasks), number(o["normalized"]), number(o["rank"], 2)]
        if has_peer:
            cells.append(number(o["worst_ratio_to_peer"], 2))
        rows.append(cells)
    n = per_task.groupby("task")["n"].max()
    seeds = f"{int(n.min())}" if n.min() == n.max() else f"{int(n.min())} to {int(n.max())}"
    blocks = [
        ("h1", f"Summary over {len(tasks)} task{'s' * (len(tasks) != 1)}"),
        ("p", description),
        ("p", f"Mean final {kind} per task over {seeds} seed{'s' * (seeds != '1')} (each task's own report: "
              f"{', '.join(f'{t}/report.md' for t in tasks)}). Normalized {kind}: each run's final {kind} "
              "scaled on its task by the best and worst final of any run there (0 best, 1 worst), averaged "
              f"over seeds, then tasks. Rank: on each task by mean final {kind}, averaged over tasks."
              + (f" Worst ratio: the largest, over tasks, of a row's mean {kind} over {peer}'s." if has_peer else "")),
        ("table", pd.DataFrame(rows, columns=header)),
        ("p", f"Best mean normalized {kind}: {order[0]}; best mean rank: "
              f"{overall.sort_values('rank')['strategy'].iloc[0]}."),
    ]
    if command:
        blocks.append(("p", f"Made by `{command}`."))
    md = render_markdown([b for b in blocks if not (b[0] == "p" and not b[1])])
    results.write_text(out / "summary.md", md)
    results.write_text(out / "summary.json", json.dumps(
        {"tasks": tasks, "overall": overall.to_dict(orient="records")}, indent=1, default=float) + "\n")
    log.info("summary written: %s", out / "summary.md")
    return {"markdown": out / "summary.md", "csv": out / "summary.csv"}
