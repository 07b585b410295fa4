"""Several objectives and constraints (issue 41, first phase): declarations from Python and the
command line, refused at once when malformed; the ranking by Deb's rules and the Pareto front on
tables made by hand; and real runs (a local Ray, tests/user_trainers.py's `tradeoff`: loss against
latency, peak memory bounded) under random and tpe, whose pareto.csv must be exactly the feasible,
non-dominated full-budget trials of their trials.csv, carried through a resume."""

import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import tuning
from tuning import Space, SpaceError, Uniform, objectives, run, spacejson, spaces
from tuning.cli import TuningError

from cli_helpers import refused
from run_helpers import write_space

TWO = {"loss": "min", "latency_ms": "min"}
BOUND = {"peak_mem_gb": ("<=", 4)}
PARAMS = {"x": Uniform(0.0, 1.0), "y": Uniform(0.0, 1.0)}


def tradeoff_space(**kw) -> Space:
    settings = dict(params=PARAMS, trainer="user_trainers:tradeoff", objectives=TWO, constraints=BOUND,
                    strategy="random", num_samples=10, max_epochs=2, gpus_per_trial=0)
    return Space(**{**settings, **kw})


def dominates(a: list, b: list) -> bool:
    return all(u <= v for u, v in zip(a, b)) and any(u < v for u, v in zip(a, b))


def brute_front(trials: pd.DataFrame, ways: dict, constraints: dict, max_epochs: int) -> set:
    """The feasible, non-dominated full-budget trials, by the definition, pair by pair."""
    ok = trials[(trials["epochs"] >= max_epochs) & ~trials["diverged"].astype(bool)]
    ok = ok[[all((r[k] <= b if op == "<=" else r[k] >= b) for k, (op, b, *_) in constraints.items())
             for _, r in ok.iterrows()]]
    points = {r["trial_id"]: [r[k] * (1 if w == "min" else -1) for k, w in ways.items()] for _, r in ok.iterrows()
              if all(pd.notna(r[k]) for k in ways)}  # every objective measured
    return {t for t, p in points.items() if not any(dominates(q, p) for s, q in points.items() if s != t)}


# ---------------------------------------------------------------- declarations

def test_one_objective_is_the_plain_space_it_always_was():
    plain = Space(params=PARAMS, trainer="user_trainers:tradeoff", metric="latency_ms", mode="max")
    same = Space(params=PARAMS, trainer="user_trainers:tradeoff", objectives={"latency_ms": "max"})
    assert same == plain and same.objectives is None and same.constraints == {}
    assert spacejson.to_json(same) == spacejson.to_json(plain) and "objectives" not in spacejson.to_json(plain)
    assert not objectives.multi(plain) and objectives.strategy_refusal(plain, "asha") is None


def test_several_objectives_name_the_first_as_the_metric_and_survive_run_json():
    space = tradeoff_space(objectives={"latency_ms": "min", "loss": "min"})
    assert (space.metric, space.mode) == ("latency_ms", "min") and space.constraints == {"peak_mem_gb": ("<=", 4.0)}
    assert space.worst == 1e6  # a diverged trial's stand-in, on the first objective
    back = spacejson.from_json(json.loads(json.dumps(spacejson.to_json(space))))
    assert back == space and list(back.objectives) == ["latency_ms", "loss"]
    # Ray's and Optuna's spelling, and a constraint written as text, are the same declaration.
    ray_like = Space(params=PARAMS, trainer="user_trainers:tradeoff", metric=["latency_ms", "loss"],
                     mode=["min", "min"], constraints={"peak_mem_gb": "<= 4"}, strategy="random", num_samples=10,
                     max_epochs=2, gpus_per_trial=0)
    assert ray_like == space
    alone = Space(params=PARAMS, trainer="user_trainers:tradeoff", constraints=BOUND)  # one metric, bounded
    assert alone.objectives == {"loss": "min"} and objectives.multi(alone)


@pytest.mark.parametrize("kw, needle", [
    (dict(metric=["loss", "latency_ms"]), "give each its direction, objectives={'loss': 'min', 'latency_ms': 'min'}"),
    (dict(metric=["loss", "latency_ms"], mode=["min"]), "names 2 objectives but mode=['min'] has 1"),
    (dict(metric="loss", mode=["min", "min"]), "declare objectives="),
    (dict(objectives={"loss": "minimize", "latency_ms": "min"}), "direction 'minimize': use 'min' or 'max'"),
    (dict(objectives=["loss", "latency_ms"]), "objectives= takes a dict"),
    (dict(objectives={}), "objectives= takes a dict"),
    (dict(objectives=TWO, metric="accuracy"), "the first objective is the space's metric"),
    (dict(objectives=TWO, mode="max"), "each objective's direction is in objectives="),
    (dict(objectives=TWO, metric=["loss", "latency_ms"], mode=["min", "min"]), "declare them once"),
    # was "metric='loss' names one metric: declare objectives=", of a metric never given, objectives given
    (dict(objectives=TWO, mode=["min", "min"]), "mode=['min', 'min'] and objectives= both give directions"),
    (dict(constraints={"peak_mem_gb": ("<", 4)}), "use '<=' or '>='"),
    (dict(constraints={"peak_mem_gb": 4}), "give it as ('<=', bound)"),
    (dict(constraints={"peak_mem_gb": ("<=", "four")}), "the bound must be a finite number"),
    (dict(constraints={"peak_mem_gb": ("<=", math.inf)}), "the bound must be a finite number"),
    (dict(constraints=[("peak_mem_gb", "<=", 4)]), "constraints= takes a dict"),
    (dict(constraints={"peak_mem_gb": (">=", 4, "grows")}), "only be 'grows', on a '<=' bound"),
    (dict(constraints={"peak_mem_gb": ("<=", 4, "increasing")}), "only be 'grows', on a '<=' bound"),
    (dict(constraints={"peak_mem_gb": ("<=", 4, "grows", True)}), "('<=', bound, 'grows') for a metric that only"),
    (dict(objectives=TWO, reference_point=[2.0]), "has 1 values for 2 objectives (loss, latency_ms)"),
    (dict(objectives=TWO, reference_point={"loss": 2.0}), "give one value for each objective, loss, latency_ms"),
    (dict(objectives=TWO, reference_point=[2.0, math.nan]), "give one finite number per objective"),
    (dict(objectives=TWO, reference_point=2.0), "a dict by objective or a list in their order"),
    (dict(reference_point=[2.0]), "is for several objectives; this space has one: declare more objectives="),
    # was "declare objectives= first", to a space that had declared them
    (dict(objectives={"loss": "min"}, reference_point=[2.0]), "this space has one: declare more objectives="),
])
def test_a_bad_declaration_is_one_line_at_once(kw, needle):
    with pytest.raises(SpaceError) as err:
        Space(params=PARAMS, trainer="user_trainers:tradeoff", **kw)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_a_reference_point_is_kept_by_objective_and_survives_run_json():
    by_name = tradeoff_space(reference_point={"latency_ms": 12, "loss": 2})
    assert by_name.reference_point == {"loss": 2.0, "latency_ms": 12.0} == tradeoff_space(reference_point=[2, 12]).reference_point
    assert spacejson.from_json(json.loads(json.dumps(spacejson.to_json(by_name)))) == by_name
    assert "reference_point" not in spacejson.to_json(tradeoff_space())  # a run that declares none reads as before


@pytest.mark.parametrize("declared, says", [
    ({"constraints": {"peak_mem_gb": "<="}}, "constraint on 'peak_mem_gb' is '<=': give the operator and the bound"),
    ({"constraints": {"peak_mem_gb": "at most 4"}}, "is 'at most 4': give the operator and the bound"),
    ({"constraints": {"peak_mem_gb": "peak_mem_gb<=4"}}, "{'peak_mem_gb': '<= 4'}"),
    ({"reference_point": [2, float("nan")]}, "latency_ms=nan is not a finite number"),
    ({"reference_point": [2]}, "has 1 values for 2 objectives"),
])
def test_a_malformed_bound_or_reference_point_is_named_as_written(declared, says):
    """A constraint given as text that did not parse was reported as 'is None', and a reference
    point holding NaN as having the wrong count."""
    with pytest.raises(SpaceError, match=re.escape(says)):
        tradeoff_space(**declared)


def test_objectives_given_over_a_spaces_own_drop_the_reference_point_declared_for_those():
    """--objective latency_ms:max kept a point declared for latency_ms:min, under which every front
    had hypervolume 0; one --objective was refused, with no flag to drop the point."""
    from tuning import inputs

    space = tradeoff_space(reference_point=[2, 12])
    assert inputs.with_objectives(space, dict(TWO), None).reference_point == {"loss": 2.0, "latency_ms": 12.0}
    assert inputs.with_objectives(space, {"loss": "min", "latency_ms": "max"}, None).reference_point is None
    one = inputs.with_objectives(space, {"loss": "min"}, None)
    assert one.reference_point is None and one.objectives == {"loss": "min"}
    assert inputs.with_objectives(space, None, {"peak_mem_gb": "<= 2"}).reference_point == space.reference_point


def test_a_metric_that_only_grows_is_declared_by_a_third_item_and_survives_run_json():
    space = tradeoff_space(constraints={"peak_mem_gb": ("<=", 4, "grows"), "latency_ms": "<= 9"})
    assert space.constraints == {"peak_mem_gb": ("<=", 4.0, "grows"), "latency_ms": ("<=", 9.0)}
    assert objectives.growing(space.constraints) == {"peak_mem_gb": 4.0}
    as_text = tradeoff_space(constraints={"peak_mem_gb": "<= 4 grows"})
    assert as_text.constraints == {"peak_mem_gb": ("<=", 4.0, "grows")}
    assert objectives.parse_constraint("peak_mem_gb<=4 grows") == ("peak_mem_gb", ("<=", 4.0, "grows"))
    assert spacejson.from_json(json.loads(json.dumps(spacejson.to_json(space)))) == space
    assert "peak_mem_gb <= 4 (grows)" in objectives.describe(space)
    assert objectives.violation({"peak_mem_gb": 5, "latency_ms": 10}, space.constraints) == 2
    assert objectives.grown_past({"peak_mem_gb": 5, "latency_ms": 10}, space.constraints) == "peak_mem_gb"
    assert objectives.grown_past({"peak_mem_gb": 4, "latency_ms": 10}, space.constraints) is None  # not a grower


def test_a_metric_the_trainer_cannot_report_is_refused_where_its_metrics_are_known(tmp_path):
    # Declared without trainer=, a space may be meant for tuning.search(train, space): the CIFAR
    # trainer's metrics are checked once the run is known to train it, before anything starts.
    space = Space(params=PARAMS, objectives={"loss": "min", "energy_j": "min"})
    with pytest.raises(SpaceError, match="objective 'energy_j' is never reported by the cifar trainer"):
        tuning.search(None, space, results_dir=tmp_path / "r")
    assert not (tmp_path / "r").exists()
    assert space.replace(trainer=lambda **kw: None).objectives == {"loss": "min", "energy_j": "min"}
    with pytest.raises(SpaceError, match="constrained metric 'peak_mem_gb' is never reported by the counting"):
        Space(params=PARAMS, trainer="counting_ones", constraints=BOUND)


def test_the_median_rule_refuses_and_says_why(tmp_path):
    """asha, hyperband, bohb and adaptive search several objectives (tests/test_mo_strategies.py);
    the median stopping rule has no median of several objectives to compare with."""
    folder = tmp_path / "r"
    with pytest.raises(TuningError) as err:
        tuning.search(None, tradeoff_space(), strategy="median", results_dir=folder)
    assert "strategy median with several objectives" in str(err.value)
    assert "no median that orders trials" in str(err.value) and "use strategy asha" in str(err.value)
    assert not folder.exists()
    assert [s for s in spaces.STRATEGIES if objectives.strategy_refusal(tradeoff_space(), s)] == ["median"]
    one = objectives.strategy_refusal(tradeoff_space(objectives=None, metric="loss"), "median")
    assert "with a constraint" in one and "cannot put feasible trials before infeasible" in one and "several" not in one


def test_the_command_line_refuses_bad_objectives_and_writes_nothing(capsys, tmp_path):
    space = write_space(tmp_path, "SPACE = Space(params={'x': Uniform(0, 1), 'y': Uniform(0, 1)}, "
                                  "trainer='user_trainers:tradeoff', strategy='random')")
    folder = tmp_path / "r"
    base = ["--space", str(space), "--results-dir", str(folder)]
    refused(capsys, run.main, [*base, "--objective", "loss"], "--objective loss: give NAME:min or NAME:max")
    refused(capsys, run.main, [*base, "--objective", "loss:minimise"], "give NAME:min or NAME:max")
    refused(capsys, run.main, [*base, "--objective", "loss:min", "--objective", "loss:max"], "more than once")
    refused(capsys, run.main, [*base, "--constraint", "peak_mem_gb<4"], "use '<=' or '>='")
    refused(capsys, run.main, [*base, "--constraint", "peak_mem_gb"], "give NAME<=BOUND or NAME>=BOUND")
    for no_bound in ("peak_mem_gb<=", "peak_mem_gb=<4"):  # '<' with '=' for a bound was read before
        refused(capsys, run.main, [*base, "--constraint", no_bound], f"--constraint {no_bound}: give NAME<=BOUND")
    refused(capsys, run.main, [*base, "--constraint", "peak_mem_gb<=abc"], "the bound must be a finite number")
    refused(capsys, run.main, [*base, "--constraint", "m<=1", "--constraint", "m>=0"], "one bound per metric")
    refused(capsys, run.main, [*base, "--objective", "loss:min", "--objective", "latency_ms:min", "--strategy",
                               "median"], "no median that orders trials")
    refused(capsys, run.main, [*base, "--constraint", "peak_mem_gb>=4 grows"], "only be 'grows', on a '<=' bound")
    refused(capsys, run.main, ["--resume", str(folder), "--objective", "loss:min"], "keeps the objectives")
    assert not folder.exists()


# ---------------------------------------------------------------- ranking a table

def _table(rows: list[dict]) -> pd.DataFrame:
    return pd.DataFrame([{"trial_id": str(i), "epochs": 2, "diverged": False, **r} for i, r in enumerate(rows)])


def test_deb_rules_rank_feasible_before_infeasible_and_the_front_is_non_dominated():
    space = tradeoff_space(objectives={"loss": "min", "accuracy": "max"}, trainer="user_trainers:scored")
    trials = _table([
        {"loss": 0.5, "accuracy": 0.8, "peak_mem_gb": 3},   # 0: front
        {"loss": 0.4, "accuracy": 0.7, "peak_mem_gb": 4},   # 1: front (at the bound: feasible)
        {"loss": 0.6, "accuracy": 0.7, "peak_mem_gb": 1},   # 2: dominated by 0 and 1
        {"loss": 0.1, "accuracy": 0.99, "peak_mem_gb": 6},  # 3: would dominate all, infeasible by 2
        {"loss": 0.2, "accuracy": 0.9, "peak_mem_gb": 5},   # 4: infeasible by 1: before 3
        {"loss": 0.5, "accuracy": 0.8, "peak_mem_gb": 2},   # 5: 0's twin: on the front too
        {"loss": 0.05, "accuracy": 1.0, "peak_mem_gb": 1, "epochs": 1},  # 6: short of the full budget
        {"loss": 1e6, "accuracy": 0.0, "peak_mem_gb": 1, "diverged": True},  # 7: diverged
        {"loss": 0.3, "accuracy": math.nan, "peak_mem_gb": 1},  # 8: an objective missing
        {"loss": 0.45, "accuracy": 0.75, "peak_mem_gb": math.nan},  # 9: its constraint's metric missing
    ])
    ranked = objectives.annotate(trials, space, max_epochs=2)
    by_id = ranked.set_index("trial_id")
    assert list(by_id.loc[["0", "1", "2", "3", "4"], "feasible"]) == [True, True, True, False, False]
    assert by_id.loc["3", "violation"] == 2 and by_id.loc["4", "violation"] == 1
    assert by_id.loc["9", "violation"] == math.inf and not by_id.loc["9", "feasible"]
    assert set(objectives.front(ranked)["trial_id"]) == {"0", "1", "5"} == brute_front(
        trials, objectives.of(space), space.constraints, 2)
    assert by_id.loc["2", "pareto_rank"] == 2 and pd.isna(by_id.loc["3", "pareto_rank"])
    # Full budget first; then feasible (front, next rank, unranked), then infeasible by violation.
    assert list(ranked["trial_id"]) == ["1", "0", "5", "2", "8", "7", "4", "3", "9", "6"]
    row, note = objectives.incumbent(ranked, space, 2)
    assert row["trial_id"] == "1" and note == ""  # the front member with the least loss


def test_with_no_feasible_trial_the_best_is_the_least_violating_and_says_so():
    space = tradeoff_space()
    trials = _table([{"loss": 0.1, "latency_ms": 5, "peak_mem_gb": 7}, {"loss": 0.9, "latency_ms": 9, "peak_mem_gb": 5}])
    ranked = objectives.annotate(trials, space, max_epochs=2)
    assert objectives.front(ranked).empty
    row, note = objectives.incumbent(ranked, space, 2)
    assert row["trial_id"] == "1" and "no trial met the constraints (peak_mem_gb <= 4)" in note


def test_the_tpe_searcher_tells_optuna_every_objective_and_each_constraint():
    from tuning.backend import tpe

    searcher = tpe.multi_objective_searcher(tradeoff_space(strategy="tpe"), seed=0, max_t=2)
    sampler = searcher._ot_study.sampler  # a fifth at random, as with one objective (test_tpe_async.py)
    assert isinstance(sampler, tpe.Interleaved) and sampler.by_front
    for i, mem in enumerate((3.0, 6.0)):  # the second dominates the first, over the memory bound
        searcher.suggest(str(i))
        searcher.on_trial_complete(str(i), {"loss": 0.5, "latency_ms": 2.0 - i, "peak_mem_gb": mem,
                                            "training_iteration": 2})
    study = searcher._ot_study
    assert [d.name for d in study.directions] == ["MINIMIZE", "MINIMIZE"]
    assert [t.values for t in study.trials] == [[0.5, 2.0], [0.5, 1.0]]
    assert [t.constraints for t in study.trials] == [{"peak_mem_gb": -1.0}, {"peak_mem_gb": 2.0}]
    assert [t.number for t in study.best_trials] == [0]  # Optuna's own front: the feasible one
    # Stopped at a rung: pruned, without intermediate values (Optuna's pruned score reads
    # study.direction, which raises here), its point where it stopped kept for the order.
    searcher.suggest("2")
    searcher.on_trial_complete("2", {"loss": 0.4, "latency_ms": 3.0, "peak_mem_gb": 5.0, "training_iteration": 1})
    stopped = study.trials[2]
    assert stopped.state.name == "PRUNED" and stopped.values is None and stopped.intermediate_values == {}
    assert stopped.user_attrs["tuning_rung"] == {"step": 1, "values": [0.4, 3.0], "violation": 1.0}
    assert stopped.constraints == {"peak_mem_gb": 1.0}
    searcher.suggest("3")  # TPE proposes with a pruned trial among those it has seen


# ---------------------------------------------------------------- real runs

def check_front(folder: Path, space: Space, max_epochs: int) -> pd.DataFrame:
    """pareto.csv is exactly the feasible, non-dominated full-budget trials of trials.csv; trials.csv
    says each trial's feasibility; best_config.json lists the front and its best is the front
    member with the least first objective."""
    trials = pd.read_csv(folder / "trials.csv", dtype={"trial_id": str})
    front = pd.read_csv(folder / "pareto.csv", dtype={"trial_id": str})
    assert {"loss", "latency_ms", "peak_mem_gb", "feasible", "violation", "pareto_rank"} <= set(trials.columns)
    assert (trials["feasible"] == (trials["peak_mem_gb"] <= 4)).all()
    assert ((trials["violation"] == 0) == trials["feasible"]).all()
    expected = brute_front(trials, objectives.of(space), space.constraints, max_epochs)
    assert expected and set(front["trial_id"]) == expected and front["trial_id"].is_unique
    assert set(trials.loc[trials["pareto_rank"] == 1, "trial_id"]) == expected
    assert list(front.columns) == list(trials.columns)
    mine = trials.set_index("trial_id").loc[front["trial_id"]].reset_index()
    pd.testing.assert_frame_equal(front, mine, check_dtype=False)
    best = json.loads((folder / "best_config.json").read_text())
    assert best["objectives"] == objectives.of(space) and best["constraints"] == {"peak_mem_gb": ["<=", 4.0]}
    assert [p["trial_id"] for p in best["pareto"]] == list(front["trial_id"])
    assert all(set(p["config"]) == {"x", "y"} and p["peak_mem_gb"] <= 4 for p in best["pareto"])
    assert best["trial_id"] == front.loc[front["loss"].idxmin(), "trial_id"] == front["trial_id"].iloc[0]
    assert len(trials) - len(front) >= 2, "the run's trials need dominated or infeasible ones to test anything"
    return front


def test_random_search_keeps_the_front_of_what_ran(ray_here, tmp_path):
    space = tradeoff_space()
    result = tuning.search(None, space, seed=3, results_dir=tmp_path / "r")
    assert result.status == "finished" and len(result.trials) == 10
    front = check_front(tmp_path / "r", space, 2)
    assert list(result.pareto["trial_id"]) == list(front["trial_id"])
    assert result.best.trial_id == front["trial_id"].iloc[0]
    assert (~result.trials["feasible"]).any(), "the seed must draw some trial over the memory bound"
    assert "Pareto front (loss min, latency_ms min)" in result.summary()
    # Over two objectives the progress line names no best: the least loss is no trial's merit there.
    line = json.loads((tmp_path / "r" / "progress.json").read_text())
    assert line["best"] is None and "best" not in line["line"]
    # Over one, bounded, its best is the least loss of a feasible result, not an infeasible trial's.
    one = tuning.search(None, space.replace(objectives=None, metric="loss", mode="min", reference_point=None),
                        seed=3, results_dir=tmp_path / "one")
    line, trials = json.loads((tmp_path / "one" / "progress.json").read_text()), one.trials
    assert trials["loss"].min() < trials.loc[trials["feasible"], "loss"].min(), "the best loss must be infeasible"
    assert line["best"] == pytest.approx(trials.loc[trials["feasible"], "loss"].min())
    record = json.loads((tmp_path / "r" / "run.json").read_text())
    assert record["declaration"]["objectives"] == TWO and record["metric"] == "loss"


def test_the_command_line_declares_objectives_over_a_one_metric_space(ray_here, tmp_path, capsys):
    space_file = write_space(tmp_path, "SPACE = Space(params={'x': Uniform(0, 1), 'y': Uniform(0, 1)}, "
                                       "trainer='user_trainers:tradeoff', strategy='random', num_samples=8, "
                                       "max_epochs=2, gpus_per_trial=0)")
    folder = tmp_path / "r"
    code = run.main(["--space", str(space_file), "--results-dir", str(folder), "--seed", "5",
                     "--objective", "loss:min", "--objective", "latency_ms:min", "--constraint", "peak_mem_gb<=4"])
    assert code == 0, capsys.readouterr().err[-2000:]
    assert "pareto.csv" in capsys.readouterr().out
    check_front(folder, tradeoff_space(), 2)


def test_tpe_searches_several_objectives_and_a_resume_carries_them(ray_here, tmp_path):
    """Optuna's multi-objective TPE under MO-ASHA's brackets, which stop some trials at epoch 1;
    --add-samples runs more trials from the restored study, with every objective and the
    constraint, and the front is remade over all."""
    space = tradeoff_space(strategy="tpe", num_samples=10)
    folder = tmp_path / "r"
    result = tuning.search(None, space, seed=1, results_dir=folder)
    assert result.status == "finished" and len(result.trials) == 10
    stopped = result.trials["stopped_early"].astype(bool)
    assert stopped.any() and (result.trials.loc[stopped, "epochs"] == 1).all()
    assert (result.trials.loc[~stopped, "epochs"] == 2).sum() >= 3
    check_front(folder, space, 2)
    more = tuning.resume(folder, add_samples=3)
    assert more.status == "finished" and len(more.trials) == 13
    assert more.trials[["loss", "latency_ms", "peak_mem_gb", "feasible"]].notna().all().all()
    front = check_front(folder, space, 2)
    assert list(more.pareto["trial_id"]) == list(front["trial_id"])
    assert more.record.strategy == "tpe" and more.record.declaration["constraints"] == {"peak_mem_gb": ["<=", 4.0]}


def test_an_objective_the_trainer_never_reports_stops_the_run_in_one_line(ray_here, tmp_path):
    space = tradeoff_space(trainer="user_trainers:tradeoff_no_latency", num_samples=2)
    with pytest.raises(TuningError) as err:
        tuning.search(None, space, seed=0, results_dir=tmp_path / "r")
    assert "the trainer reported no 'latency_ms'" in str(err.value) and "\n" not in str(err.value)
    assert "drop it from the space's objectives and constraints" in str(err.value)
    assert "the first result without a usable latency_ms" in str(err.value)  # it named loss, which was there


def test_several_objectives_returned_as_a_tuple_are_told_to_return_a_dict_naming_each(ray_here, tmp_path):
    """The line's example was {'loss': 0.5} alone: followed, it stopped the run again on latency_ms."""
    space = Space(params=PARAMS, trainer="user_trainers:returns_a_tuple", objectives=TWO, strategy="tpe",
                  num_samples=2, gpus_per_trial=0)
    with pytest.raises(TuningError) as err:
        tuning.search(None, space, seed=0, results_dir=tmp_path / "r")
    assert "returned a tuple and never called on_epoch" in str(err.value)
    assert "a dict such as {'loss': 0.5, 'latency_ms': 0.5}" in str(err.value)


# ---------------------------------------------------------------- the strategies that stop trials early

def test_an_extended_mo_asha_rebuilds_its_rungs_with_every_objective(ray_here, tmp_path):
    """--add-samples on MO-ASHA: the rungs, which Tune does not save, are rebuilt from every earlier
    result with both objectives and the violation, so the new trials are judged against them."""
    from tuning import backend

    space = tradeoff_space(strategy="asha", max_epochs=4, grace_period=1, reduction_factor=2)

    def spec(**kw):
        return backend.RunSpec(space=space, strategy="asha", num_samples=6, max_epochs=4, seed=0, cpus_per_trial=1,
                               gpus_per_trial=0, source=None, results_dir=tmp_path, progress=False,
                               snapshot_every_step=False, **kw)

    backend.run(spec())
    got = {}
    records, _ = backend.run(spec(resume=True, add_samples=3, on_search=lambda a, s: got.update(asha=s)))
    assert len(records) == 9
    first_rung = dict(got["asha"]._brackets[0]._rungs)[1]  # every trial reaches the grace period
    assert len(first_rung) == 9
    for values, violation in first_rung.values():
        assert values.shape == (2,) and np.isfinite(values).all() and violation >= 0
    assert any(v > 0 for _, v in first_rung.values()), "the seed must draw a trial over the memory bound"
    new = {r.trial_id for r in records} - set(list(first_rung)[:6])
    assert {d[1] for d in got["asha"].decisions()} >= new  # the new ones decided against all nine


@pytest.mark.slow  # three runs; the default suite extends MO-ASHA (above) and tpe
def test_bohb_carries_every_objective_through_add_samples_and_warm_start(ray_here, tmp_path):
    from tuning import growth
    from tuning.backend import mo
    from tuning.backend.bohb import PaperBOHB, configspace

    space = tradeoff_space(strategy="bohb", num_samples=8, max_epochs=4, reduction_factor=2)
    first = tmp_path / "first"
    tuning.search(None, space, seed=0, results_dir=first)
    more = tuning.resume(first, add_samples=3)
    assert more.status == "finished" and len(more.trials) == 11
    assert more.trials[["loss", "latency_ms", "peak_mem_gb", "feasible"]].notna().all().all()
    check_front(first, space, 4)
    # A warm start gives BOHB's model every earlier result with both objectives and the violation.
    model = PaperBOHB(space=configspace(space, 0), metric=space.metric, mode=space.mode, seed=0,
                      params=space.params, rule=mo.Rule.of(space))
    model.warm(growth.all_rows(growth.earlier_runs([str(first)], space)))
    points, losses = model.bohber.points, model.bohber.losses
    assert points and sum(map(len, points.values())) >= 11
    for budget, kept in points.items():
        assert len(kept) == len(losses[budget]) and sorted(losses[budget]) == list(range(len(kept)))
        assert all(v.shape == (2,) and np.isfinite(v).all() for v, _ in kept)
    warm = tuning.search(None, space, seed=1, results_dir=tmp_path / "warm", warm_start=[str(first)])
    assert warm.status == "finished" and not warm.pareto.empty
