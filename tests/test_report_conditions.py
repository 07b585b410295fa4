"""The run report of a conditional space (tuning.report.runreport, tuning.report.runplots): from one real grid run
over tests/test_conditions.py's branch space, where momentum and nesterov exist under sgd only and
width is an IntLogUniform. The report is written, leaves absent values out or marks them, and says
what it did with them; the comparison report's best configurations print "—" for them."""

import re
import shutil

import numpy as np
import pandas as pd
import pytest

import tuning
from test_conditions import branch_space
from tuning.report import analysis, fanova, runplots, runreport

SAID = "momentum and nesterov are set in 8 of these 10 trials (only when optimizer = sgd)"


@pytest.fixture(scope="module")
def branch_run(ray_here, tmp_path_factory):
    """Grid over the branch space: 2 trials under adamw, 8 under sgd, every one its full 3 epochs."""
    out = tmp_path_factory.mktemp("branches") / "r"
    result = tuning.search(None, branch_space(), strategy="grid", results_dir=out)
    assert result.status == "finished" and result.succeeded == len(result.trials) == 10
    return result, out


def _section(md: str, title: str) -> str:
    start = md.index(f"## {title}")
    return md[start:md.index("\n## ", start + 3)]


def _assert_says_what_it_did(md: str):
    assert SAID + "; the other 2 are left out of their panels." in _section(md, "Each hyperparameter")
    assert SAID + '; the other 2 cross their axes at a separate mark, "absent"' in _section(md, "Parallel")
    imp = _section(md, "Hyperparameter importance")
    assert SAID + ", so they are not in that first fANOVA" in imp and "their own over those 8 trials alone" in imp
    assert "| parameter | importance | computed over |" in imp
    for p in ("optimizer", "lr", "width"):
        assert re.search(rf"\| {p} \| [0-9.]+ \| all 10 trials \|", imp), p
    for p in ("momentum", "nesterov"):
        assert re.search(rf"\| {p} \| [0-9.]+ \| the 8 trials that set it \|", imp), p
    assert "Log-scale parameters (width)" in imp  # IntLogUniform enters as log10, like LogUniform
    # The best configuration is under adamw (the trainer's optimum): its unset parameters say so.
    assert "| optimizer | adamw |" in md and "| momentum | — (not set: only when optimizer = sgd) |" in md
    assert not re.search(r"\bnan\b", md, re.I)


def test_the_run_writes_its_report_and_says_what_it_did_with_absent_values(branch_run):
    result, out = branch_run
    assert result.report == out / "report.html" and result.report.exists()
    _assert_says_what_it_did((out / "report.md").read_text())


def test_importance_of_a_conditional_parameter_is_over_the_trials_that_set_it(branch_run):
    trials, epochs, plan = runreport.load(branch_run[1])
    decls, metric, mode = runreport.searched(plan)
    table, _ = fanova.importance(trials, decls, metric=metric, mode=mode, max_epochs=3, epochs=epochs)
    first = table[table["computed over"] == "all 10 trials"]
    assert set(first["parameter"]) == {"optimizer", "lr", "width"}
    assert first["importance"].sum() == pytest.approx(1, abs=0.01)
    assert set(table["parameter"]) == set(decls)
    # Too few sgd trials for a fANOVA of their own: no importance for momentum and nesterov, and said.
    fewer = trials.drop(trials.index[trials["optimizer"] == "sgd"][:2])
    table, note = fanova.importance(fewer, decls, metric=metric, mode=mode, max_epochs=3)
    assert set(table["parameter"]) == {"optimizer", "lr", "width"}
    assert "momentum and nesterov are set in 6 of these 8 trials" in note and "too few" in note


def test_figures_leave_out_or_mark_absent_values(branch_run):
    trials, _, plan = runreport.load(branch_run[1])
    decls, metric, mode = runreport.searched(plan)
    fig = runplots.params_vs_metric(trials, decls, metric=metric, label="loss")
    momentum, width = (fig.axes[list(decls).index(p)] for p in ("momentum", "width"))
    assert sum(len(c.get_offsets()) for c in momentum.collections) == 8
    assert momentum.get_title() == "set in 8 of 10 trials (optimizer = sgd)"
    lo, hi = width.get_xlim()
    shown = [t.get_text() for t in width.get_xticklabels() if lo <= t.get_position()[0] <= hi]
    assert width.get_xscale() == "log" and shown == ["4", "8", "16", "32"]  # an IntLogUniform: plain integers
    ax = runplots.parallel_coordinates(trials, decls, metric=metric, mode=mode, label="loss").axes[0]
    assert [t.get_text() for t in ax.texts].count("absent (2)") == 2  # at momentum's and nesterov's axes
    lines = [seg[:, 1] for c in ax.collections for seg in c.get_segments() if len(seg) == len(decls) + 1]
    k = list(decls).index("momentum")
    assert len(lines) == 10 and sum(np.isclose(y[k], runplots.ABSENT) for y in lines) == 2


def test_regenerated_from_csv_and_from_results_jsonl_it_says_the_same(branch_run, tmp_path):
    d = tmp_path / "run"
    shutil.copytree(branch_run[1], d, ignore=shutil.ignore_patterns("report*", "tune", "*.parquet"))
    for drop in ([], ["trials.csv", "epochs.csv"]):  # CSV's NaN, then the records' None
        for name in drop:
            (d / name).unlink()
        runreport.regenerate(d)
        _assert_says_what_it_did((d / "report.md").read_text())


def test_comparison_best_configurations_print_a_dash_for_an_unset_parameter():
    runs = pd.DataFrame({"strategy": ["random", "tpe"], "run_id": ["a", "b"], "trial_id": ["1", "2"],
                         "full_fidelity": [True, True], "value": [0.3, 0.2], "loss": [0.3, 0.2],
                         "optimizer": ["sgd", "adamw"], "momentum": [0.9, np.nan]})
    best = analysis.best_configs(runs, {"params": ["optimizer", "momentum"]}, ["random", "tpe"], 1)
    assert best["momentum"].tolist() == [0.9, "—"]


def test_a_chosen_none_is_told_apart_from_an_inactive_parameter(ray_here, tmp_path):
    """Choice([None, "cosine"]) under a condition: a chosen None was an empty cell like an inactive
    parameter's, the best configuration's table said "not set" for it, and its count of the trials
    that set it left out the ones that chose None."""
    params = {"arch": tuning.Choice(["shallow", "deep"]), "lr": tuning.Uniform(0.0, 0.1, grid=1),
              "sched": tuning.Choice([None, "cosine"], when={"arch": "deep"})}
    space = tuning.Space(params=params, trainer="user_trainers:scheduled", metric="loss", mode="min",
                         max_epochs=2, gpus_per_trial=0)
    result = tuning.search(None, space, strategy="grid", results_dir=tmp_path / "r")
    cells = pd.read_csv(tmp_path / "r" / "trials.csv", dtype=str, keep_default_na=False).set_index("arch")["sched"]
    assert cells["shallow"] == "" and sorted(cells["deep"]) == ['"cosine"', "null"]
    md = (tmp_path / "r" / "report.md").read_text()
    assert "sched is set in 2 of these 3 trials (only when arch = deep)" in md
    assert result.best.config == {"arch": "deep", "lr": 0.05, "sched": None}  # shallow: none given, 0.1 worse
    assert "| sched | null |" in _section(md, "Best configuration") and "not set" not in md
