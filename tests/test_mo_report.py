"""The report and MLflow of a run of several objectives (issue 41, items 4 and 6): real random
searches over tests/user_trainers.py's `tradeoff` (loss against latency_ms, peak_mem_gb bounded)
on a local Ray, tracked in the SQLite MLflow store of their results folder. The report draws the
front and the hypervolume, whose values are moocore's on pareto.csv and on what had arrived; the
importances come once per objective; the live report shows the same; a one-metric report has none
of it. MLflow holds every objective as each child's metric, pareto.csv as an artifact, and the
pareto tag on the front's children only."""

import json
import logging
import re
import shutil

import moocore
import numpy as np
import optuna
import pandas as pd
import pytest

import tuning
from tuning import Space, Uniform, objectives, results
from tuning.report import fanova, front, runreport
from tuning.report import hypervolume as hv

TWO = {"loss": "min", "latency_ms": "min"}
THREE = {"loss": "min", "latency_ms": "min", "peak_mem_gb": "min"}
PARAMS = {"x": Uniform(0.0, 1.0), "y": Uniform(0.0, 1.0)}
MO_SECTIONS = ("## Pareto front", "## Hypervolume", "## Hyperparameter importance, per objective")


def _search(folder, seed, mlflow=None, **kw):
    settings = dict(params=PARAMS, trainer="user_trainers:tradeoff", strategy="random", num_samples=12,
                    max_epochs=2, gpus_per_trial=0)
    space = Space(**{**settings, **kw})
    result = tuning.search(None, space, seed=seed, results_dir=folder, mlflow=mlflow)
    assert result.status == "finished"
    return result


@pytest.fixture(scope="module")
def two(ray_here, tmp_path_factory):
    pytest.importorskip("mlflow", reason="make test installs the mlflow extra")
    return _search(tmp_path_factory.mktemp("mo") / "two", 3, True, objectives=TWO,
                   constraints={"peak_mem_gb": ("<=", 4)})


def _stated(md: str) -> tuple[float, list[float]]:
    """(the hypervolume, the reference point) as report.md states them."""
    m = re.search(r"Hypervolume of the front now: (\S+), against the reference point (.+?) \(", md)
    return float(m[1]), [float(v) for v in re.findall(r" (\S+?)(?:,|$)", " " + m[2])]


def _ref_by_definition(trials: pd.DataFrame, ways: dict, max_epochs: int) -> list[float]:
    """The documented default: each objective's worst value among the feasible full-budget results,
    10 % of their range further."""
    feasible = trials["feasible"].astype(bool) if "feasible" in trials else True
    ok = trials[(trials["epochs"] >= max_epochs) & feasible & ~trials["diverged"].astype(bool)]
    out = []
    for k, way in ways.items():
        worst, best = (ok[k].max(), ok[k].min()) if way == "min" else (ok[k].min(), ok[k].max())
        out.append(worst + 0.1 * (worst - best))
    return out


def test_two_objectives_report_the_front_the_hypervolume_and_importances_per_objective(two):
    folder = two.results_dir
    md = (folder / "report.md").read_text()
    assert all(s in md for s in MO_SECTIONS)
    assert md.index("## Best configuration") < md.index("## Pareto front") < md.index("## Hypervolume")
    assert (folder / "report-front.png").stat().st_size > 10_000
    assert (folder / "report-hypervolume.png").stat().st_size > 10_000
    pareto = pd.read_csv(folder / "pareto.csv", dtype={"trial_id": str})
    table = md.split("## Pareto front")[1].split("## Hypervolume")[0]
    assert re.findall(r"^\| (\w+_\d+) \|", table, re.M) == list(pareto["trial_id"])  # the front's rows
    trials = pd.read_csv(folder / "trials.csv")
    assert len(trials) - len(pareto) >= 2 and (~trials["feasible"]).any(), "the run must hold more than its front"
    section = md.split("## Hyperparameter importance, per objective")[1].split("## Trials")[0]
    for k in TWO:  # one fANOVA per objective, over that objective's final values
        assert f"\n{k}: fANOVA" in section and f"variance of the final {k} each parameter" in section
    imps = runreport.regenerate(folder)["importances"]
    assert list(imps) == list(TWO) and all(table is not None for table, _ in imps.values())
    assert not imps["loss"][0].equals(imps["latency_ms"][0])


def test_the_stated_hypervolume_is_moocores_on_pareto_csv_against_the_stated_reference(two):
    folder = two.results_dir
    stated, ref = _stated((folder / "report.md").read_text())
    pareto = pd.read_csv(folder / "pareto.csv")
    trials = pd.read_csv(folder / "trials.csv")
    assert ref == pytest.approx(_ref_by_definition(trials, TWO, 2), rel=1e-5)
    assert stated == pytest.approx(moocore.hypervolume(pareto[list(TWO)].to_numpy(), ref=ref), rel=1e-5)
    # Exactly, where the report's numbers are read whole; and the anytime curve: at each counted
    # result's arrival, moocore's hypervolume of every counted result arrived so far.
    out = runreport.regenerate(folder)
    exact = list(out["reference"].point.values())
    curve = out["hypervolume"]
    assert curve["hypervolume"].iloc[-1] == moocore.hypervolume(pareto[list(TWO)].to_numpy(), ref=exact)
    epochs = pd.read_csv(folder / "epochs.csv", dtype={"trial_id": str})
    done = epochs[epochs["training_iteration"] == 2].set_index("trial_id")["ended_at"]
    counted = trials[trials["pareto_rank"].notna()].astype({"trial_id": str}).set_index("trial_id")
    arrived = done.loc[counted.index].sort_values().index
    assert list(curve["trial_id"]) == list(arrived)
    for k, tid in enumerate(arrived, start=1):
        so_far = counted.loc[arrived[:k], list(TWO)].to_numpy()
        assert curve["hypervolume"].iloc[k - 1] == pytest.approx(moocore.hypervolume(so_far, ref=exact), rel=1e-12)
    assert curve["hypervolume"].is_monotonic_increasing and curve["epochs"].is_monotonic_increasing


def test_a_declared_reference_point_is_the_one_used_and_stated(two, tmp_path):
    folder = tmp_path / "declared"
    shutil.copytree(two.results_dir, folder)
    record = json.loads((folder / "run.json").read_text())
    record["declaration"]["reference_point"] = {"latency_ms": 12.0, "loss": 2.0}  # by name, in any order
    (folder / "run.json").write_text(json.dumps(record))
    runreport.regenerate(folder)
    md = (folder / "report.md").read_text()
    stated, ref = _stated(md)
    assert ref == [2.0, 12.0] and "(declared by the space)" in md
    pareto = pd.read_csv(folder / "pareto.csv")
    assert stated == pytest.approx(moocore.hypervolume(pareto[list(TWO)].to_numpy(), ref=ref), rel=1e-5)
    record["declaration"]["reference_point"] = [2.0]
    (folder / "run.json").write_text(json.dumps(record))
    with pytest.raises(runreport.ReportError, match="give one number per objective, for loss, latency_ms"):
        runreport.regenerate(folder)


def test_the_live_report_shows_the_same(two, tmp_path):
    """The report a running run writes every 30 s, from its plain per-trial records (not yet ranked):
    the same front, hypervolume and importances as the final one."""
    live = tmp_path / "live"
    shutil.copytree(two.results_dir, live)
    for name in ("report.md", "report-front.png", "report-hypervolume.png", "trials.csv", "trials.parquet"):
        (live / name).unlink(missing_ok=True)
    records = runreport._records_from_rows(results.read_rows(live / results.ROWS_FILE), two.record)
    out = runreport.write_from_records(live, records, two.record, live=True)
    md = (live / "report.md").read_text()
    assert "LIVE: the run is going" in md and all(s in md for s in MO_SECTIONS)
    assert (live / "report-front.png").is_file() and (live / "report-hypervolume.png").is_file()
    assert _stated(md) == _stated((two.results_dir / "report.md").read_text())
    assert list(out["importances"]) == list(TWO)


def test_three_objectives_draw_parallel_coordinates_and_their_hypervolume(two, tmp_path):
    """The same run's files, its record declaring peak_mem_gb a third objective in place of a bound:
    the report ranks the trials again, as tuning.objectives does."""
    folder = tmp_path / "three"
    shutil.copytree(two.results_dir, folder)
    record = json.loads((folder / "run.json").read_text())
    record["declaration"].update(objectives=THREE, constraints={})
    (folder / "run.json").write_text(json.dumps(record))
    out = runreport.regenerate(folder)
    md = (folder / "report.md").read_text()
    assert all(s in md for s in MO_SECTIONS) and "bold lines, across parallel coordinates" in md
    assert list(out["importances"]) == list(THREE)
    stated, ref = _stated(md)
    assert len(ref) == 3 and "volume of objective space" in md
    trials = pd.read_csv(folder / "trials.csv")
    assert ref == pytest.approx(_ref_by_definition(trials.drop(columns="feasible"), THREE, 2), rel=1e-5)
    every = trials[trials["epochs"] >= 2][list(THREE)].to_numpy()  # moocore leaves the dominated ones out itself
    assert stated == pytest.approx(moocore.hypervolume(every, ref=ref), rel=1e-5)
    goals = hv.Goals(THREE, {}, "loss", "min")
    ranked = objectives.annotate(trials.drop(columns=["feasible", "violation", "pareto_rank"]), goals, 2)
    lines = front.front_parallel(ranked, goals).axes[0].collections
    assert len(lines) == 2  # the front, and the dominated ones: nothing is infeasible here
    assert len(lines[1].get_paths()) == (ranked["pareto_rank"] == 1).sum() < len(ranked)


def test_a_one_metric_report_has_no_multi_objective_sections(ray_here, tmp_path):
    result = _search(tmp_path / "one", 3, metric="loss", mode="min", num_samples=8)
    md = (result.results_dir / "report.md").read_text()
    heads = [line for line in md.splitlines() if line.startswith("## ")]
    assert heads == ["## Best configuration", "## Learning curves", "## Do low epochs rank like the last?",
                     "## Best so far", "## Each hyperparameter against the final metric",
                     "## Hyperparameter importance", "## Trials", "## Provenance"]
    assert not any((result.results_dir / f).exists() for f in front.FIGURES.values())
    assert "pareto_rank" not in md and "feasible" not in md and "several objectives" not in md


def test_fanova_leaves_optunas_logging_as_it_was():
    """Importances in a library call: Optuna's verbosity untouched, and no "A new study created"
    line, while a study of someone else's still says so."""
    seen = []
    handler = logging.Handler()
    handler.emit = seen.append
    optuna.logging.set_verbosity(optuna.logging.INFO)
    logging.getLogger("optuna").addHandler(handler)
    try:
        decls = {"x": tuning.Uniform(0.0, 1.0), "y": tuning.Uniform(0.0, 1.0)}
        rng = np.random.default_rng(0)
        rows = pd.DataFrame({"x": rng.uniform(size=12), "y": rng.uniform(size=12)}).assign(loss=lambda d: d.x ** 2)
        got = fanova._fanova(rows, decls, ["x", "y"], metric="loss", mode="min", seed=0)
        assert got["x"] > got["y"]
        assert optuna.logging.get_verbosity() == optuna.logging.INFO
        assert not any("A new study created" in r.getMessage() for r in seen)
        optuna.create_study(study_name="someone-else")
        assert any("someone-else" in r.getMessage() for r in seen)
    finally:
        logging.getLogger("optuna").removeHandler(handler)
        optuna.logging.set_verbosity(optuna.logging.INFO)


# ---------------------------------------------------------------- MLflow

def test_mlflow_logs_every_objective_the_front_and_tags_only_its_children(two):
    from mlflow.tracking import MlflowClient

    folder = two.results_dir
    client = MlflowClient(f"sqlite:///{folder / 'mlflow.db'}")
    exp = client.get_experiment_by_name(two.record.mlflow.experiment)
    runs = client.search_runs([exp.experiment_id], max_results=1000)
    parent = next(r for r in runs if "mlflow.parentRunId" not in r.data.tags)
    kids = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    trials = pd.read_csv(folder / "trials.csv", dtype={"trial_id": str}).set_index("trial_id")
    pareto = pd.read_csv(folder / "pareto.csv", dtype={"trial_id": str})
    assert sorted(k.data.tags["trial_id"] for k in kids) == sorted(trials.index)
    for kid in kids:
        tid = kid.data.tags["trial_id"]
        for k in [*TWO, "peak_mem_gb"]:  # every objective and the constrained metric, every epoch
            history = client.get_metric_history(kid.info.run_id, k)
            assert [m.step for m in history] == [1, 2]
            assert history[-1].value == pytest.approx(trials.loc[tid, k])
    tagged = {k.data.tags["trial_id"] for k in kids if k.data.tags.get("pareto") == "true"}
    assert tagged == set(pareto["trial_id"]) and 0 < len(tagged) < len(kids)
    assert not any("pareto" in k.data.tags for k in kids if k.data.tags["trial_id"] not in tagged)
    assert "pareto.csv" in [a.path for a in client.list_artifacts(parent.info.run_id)]
    local = client.download_artifacts(parent.info.run_id, "pareto.csv", str(folder / "downloaded"))
    pd.testing.assert_frame_equal(pd.read_csv(local, dtype={"trial_id": str}), pareto)
    stated, _ = _stated((folder / "report.md").read_text())
    assert parent.data.metrics["pareto_size"] == len(pareto)
    assert parent.data.metrics["hypervolume"] == pytest.approx(stated, rel=1e-5)
    assert parent.data.tags["hypervolume_reference"].startswith("loss ")


@pytest.mark.slow  # a search and its extension: make test-all
def test_add_samples_moves_the_pareto_tag_to_the_new_front(ray_here, tmp_path):
    from mlflow.tracking import MlflowClient

    folder = tmp_path / "grow"
    first = _search(folder, 3, True, objectives=TWO, constraints={"peak_mem_gb": ("<=", 4)})
    before = set(first.pareto["trial_id"])
    more = tuning.resume(folder, add_samples=12)
    assert more.status == "finished" and len(more.trials) == 24
    after = set(more.pareto["trial_id"])
    assert before - after, "the new trials must push some of the first front off it"
    client = MlflowClient(f"sqlite:///{folder / 'mlflow.db'}")
    exp = client.get_experiment_by_name(first.record.mlflow.experiment)
    kids = [r for r in client.search_runs([exp.experiment_id], max_results=1000) if "mlflow.parentRunId" in r.data.tags]
    assert len(kids) == 24
    assert {k.data.tags["trial_id"] for k in kids if "pareto" in k.data.tags} == after
    parent = client.get_run(first.record.mlflow.parent_run_id)
    assert [m.value for m in client.get_metric_history(parent.info.run_id, "pareto_size")] == [len(before), len(after)]


def test_three_objectives_with_an_infeasible_full_budget_trial_draw_it_dashed(tmp_path):
    """An infeasible trial's pareto_rank is <NA>: comparing it with 1 made the front's mask
    ambiguous, so the run's final report was never written and tuning.report raised a TypeError."""
    rng = np.random.default_rng(0)
    trials = pd.DataFrame({"trial_id": [f"t{i}" for i in range(6)], "epochs": [2] * 6, "status": ["TERMINATED"] * 6,
                           "diverged": [False] * 6, "loss": rng.random(6), "latency_ms": rng.random(6),
                           "peak_mem_gb": rng.random(6), "gpu_mem": [1.0, 1.0, 9.0, 1.0, 1.0, 1.0]})
    goals = hv.Goals(THREE, {"gpu_mem": ("<=", 4.0)}, "loss", "min")
    ranked = objectives.annotate(trials, goals, 2)
    assert ranked["pareto_rank"].isna().sum() == 1  # the infeasible one
    lines = front.front_parallel(ranked, goals).axes[0].collections
    styles = [c.get_linestyle()[0][1] is not None for c in lines]  # dashed: a dash pattern
    assert len(lines) == 3 and styles.count(True) == 1 and len(lines[styles.index(True)].get_paths()) == 1


def test_the_best_so_far_figure_counts_only_results_that_meet_the_constraints():
    """It drew the best of every result: the summary said best loss 1.6 (feasible) while the figure
    went down to 0.97, a trial far over its memory bound."""
    from tuning.report import runplots

    epochs = pd.DataFrame({"trial_id": ["a", "a", "b", "b"], "training_iteration": [1, 2, 1, 2],
                           "timestamp": [1, 2, 3, 4], "time_total_s": [1.0, 2.0, 1.0, 2.0], "diverged": [False] * 4,
                           "loss": [2.0, 1.6, 1.2, 0.97], "peak_mem_gb": [1.0, 1.0, 3.5, 3.6]})
    kw = dict(metric="loss", mode="min", label="loss", started=0.0, max_epochs=2)
    for constraints, lowest in ((None, 0.97), ({"peak_mem_gb": ["<=", 3]}, 1.6)):
        fig = runplots.best_so_far(epochs, **kw, constraints=constraints)
        steps = [line for line in fig.axes[0].get_lines() if line.get_label().startswith("best at")]
        assert min(np.nanmin(line.get_ydata()) for line in steps) == pytest.approx(lowest)
    assert "of the results that meet the constraints" in fig._suptitle.get_text()
