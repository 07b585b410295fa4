"""tuning.compare over several objectives (issue 41): hypervolume against the experiment's
reference point (moocore's), the ZDT benchmark with a fidelity bias, Optuna's multi-objective peers,
and the report's tables and curves. Peers run in process (no Ray); one smoke comparison runs random
search through a real local Ray."""

import json
import math

import moocore
import numpy as np
import pandas as pd
import pytest

from cli_helpers import refused
from tuning import objectives, spaces
from tuning.compare import mobench, peers, runner as compare
from tuning.report import comparison, mocompare


def _peer_rows(peer, space, *, seed=0, budget=4.5, max_t=3):
    rows = peers.run(peer, space, seed=seed, budget=budget, max_t=max_t)
    return compare._run_rows(rows, benchmark=space.trainer, strategy=peer, seed=seed, max_t=max_t,
                             params=list(space.params), metric=space.metric, others=tuple(objectives.required(space)))


def _exp(space, point):
    return {"objectives": objectives.of(space), "constraints": space.constraints, "reference_point": list(point),
            "true_hypervolume": None}


@pytest.mark.parametrize("peer", peers.MO_PEERS)
def test_a_runs_hypervolume_is_moocores_on_its_feasible_full_budget_results(peer):
    """Rows short of the full budget (every earlier epoch, and the trial the budget cut) and
    infeasible ones never count; a maximised objective counts negated."""
    space = spaces.load("zdt").replace(constraints={"f1": ("<=", 0.6)})
    run = _peer_rows(peer, space, budget=12.5)
    exp = _exp(space, mobench.ZDT_REFERENCE)
    full = run[(run["training_iteration"] == 3) & (run["f1"] <= 0.6)]
    assert 0 < len(full) < run["trial_id"].nunique()  # some trials are infeasible, and the last was cut
    got = mocompare.per_run(run, exp)
    assert got["hypervolume"].iloc[0] == moocore.hypervolume(full[["f1", "f2"]].to_numpy(), ref=mobench.ZDT_REFERENCE)
    # f2 maximised instead: the hypervolume of the negated column against the negated bound
    flipped = {**exp, "objectives": {"f1": "min", "f2": "max"}, "reference_point": [1.1, -1.0]}
    points = full[["f1", "f2"]].to_numpy() * [1, -1]
    assert mocompare.per_run(run, flipped)["hypervolume"].iloc[0] == pytest.approx(
        moocore.hypervolume(points, ref=[1.1, 1.0]))
    # the anytime curve ends at the final hypervolume, and never falls
    curve = mocompare.run_curve(run, exp)["hypervolume"]
    assert curve.iloc[-1] == got["hypervolume"].iloc[0] and curve.is_monotonic_increasing


@pytest.mark.parametrize("problem", ["zdt1", "zdt2"])
def test_zdts_full_fidelity_front_is_the_known_one_and_low_fidelities_are_biased(problem):
    bench = mobench.MO_BENCHMARKS[problem]
    x0 = np.linspace(0, 1, 11)
    front = [bench.fn({"x0": v, "x1": 0, "x2": 0, "x3": 0}, 9, 9, 0) for v in x0]
    known = 1 - np.sqrt(x0) if problem == "zdt1" else 1 - x0 ** 2
    assert [p["f1"] for p in front] == pytest.approx(x0) and [p["f2"] for p in front] == pytest.approx(known)
    # The closed form of the front's hypervolume against the reference point, as moocore measures a
    # dense sample of it (from below: a finite set misses the slivers between its points).
    dense = moocore.hypervolume(mobench.zdt_front(problem, 20001), ref=mobench.ZDT_REFERENCE)
    assert dense <= bench.true_hypervolume < dense + 1e-3
    # Below the full budget every objective is scaled up and noised; at it, exact.
    rng = np.random.default_rng(0)
    configs = [{f"x{i}": float(v) for i, v in enumerate(rng.uniform(0, 1, 4))} for _ in range(200)]
    exact = np.array([[bench.fn(c, 9, 9, 0)[k] for k in ("f1", "f2")] for c in configs])
    first = np.array([[bench.fn(c, 1, 9, 0)[k] for k in ("f1", "f2")] for c in configs])
    assert (first.mean(axis=0) > exact.mean(axis=0) * 1.2).all()
    assert np.array_equal(exact, [mobench.zdt_objectives(problem, np.array(list(c.values()))) for c in configs])


def _experiment(tmp_path, extra: str) -> str:
    (tmp_path / "exp.py").write_text("from tuning.compare import Experiment\n"
                                     f"EXPERIMENT = Experiment(space='zdt', budget=2, strategies=('random',), {extra})\n")
    return str(tmp_path / "exp")


@pytest.mark.parametrize("extra,needles", [
    ("tasks=('zdt1',), reference_point=(1.1,)",
     ("task zdt1: reference_point=(1.1,) has 1 values for 2 objectives (f1, f2)",)),
    ("reference_point=(1.1, 11, 3)", ("has 3 values for 2 objectives",)),
    ("tasks=('zdt1', 'zdt2'), reference_point={'zdt1': (1.1, 11)}", ("task zdt2", "need a reference point")),
    ("", ("several objectives need a reference point", "reference_point=(...)")),
])
def test_a_reference_point_of_the_wrong_dimension_or_none_exits_2_and_writes_nothing(capsys, tmp_path, extra, needles):
    exp = _experiment(tmp_path, extra)
    before = sorted(p.name for p in tmp_path.iterdir())
    refused(capsys, compare.main, [exp, "--out", str(tmp_path / "out")], *needles)
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written


def test_without_its_own_the_experiment_takes_the_spaces_reference_point(tmp_path):
    (tmp_path / "space.py").write_text("from search_spaces.zdt import SPACE as _ZDT\n"
                                       "SPACE = _ZDT.replace(reference_point={'f2': 12.0, 'f1': 2.0})\n")
    (tmp_path / "exp.py").write_text("from tuning.compare import Experiment\n"
                                     f"EXPERIMENT = Experiment(space={str(tmp_path / 'space.py')!r}, budget=2)\n")
    _, exp = compare.load_experiment(str(tmp_path / "exp"))
    space, _ = compare.space_of(exp.space)
    assert compare.several_fields(exp, space, None)["reference_point"] == [2.0, 12.0]  # the objectives' order
    assert exp.peers == peers.MO_PEERS


def test_a_single_objective_peer_on_several_objectives_is_refused(capsys, tmp_path):
    exp = _experiment(tmp_path, "reference_point=(1.1, 11), peers=('optuna_tpe',)")
    refused(capsys, compare.main, [exp, "--out", str(tmp_path / "out")],
            "peer 'optuna_tpe' unknown for a space of several objectives", "optuna_nsga2, optuna_motpe")


def test_the_optuna_level_is_put_back_as_it_was():
    import optuna

    before = optuna.logging.get_verbosity()
    try:
        optuna.logging.set_verbosity(optuna.logging.DEBUG)
        _peer_rows("optuna_motpe", spaces.load("zdt"), budget=2)
        assert optuna.logging.get_verbosity() == optuna.logging.DEBUG
    finally:
        optuna.logging.set_verbosity(before)


def _check_finals(task, saved):
    finals = pd.read_csv(task / "finals.csv")
    runs = pd.read_csv(task / "runs.csv")
    for _, f in finals.iterrows():  # each run's final is moocore's on its own full-budget rows
        rows = runs[(runs["run_id"] == f["run_id"]) & runs["full_fidelity"]]
        assert f["hypervolume"] == pytest.approx(moocore.hypervolume(rows[["f1", "f2"]].to_numpy(),
                                                                     ref=mobench.ZDT_REFERENCE))
        assert f["hv_regret"] == pytest.approx(saved["true_hypervolume"] - f["hypervolume"])
    return finals


def test_a_comparison_of_peers_tests_final_hypervolumes_and_regenerates(tmp_path, monkeypatch):
    """Two seeds each, no Ray: the Mann-Whitney table against the reference strategy, the curves,
    and the same numbers from the folder alone."""
    def no_ray(**kwargs):
        raise AssertionError("Ray started for a comparison of peers alone")

    monkeypatch.setattr(compare.backend, "start_ray", no_ray)
    exp = compare.Experiment(space="zdt", budget=4, seeds=(0, 1), strategies=(), max_epochs=3,
                             reference="optuna_nsga2", reference_point=mobench.ZDT_REFERENCE)
    out = tmp_path / "zdt"
    compare.run("zdt", exp, out, smoke=False, seeds=None, budget=None, argv=[])
    saved = json.loads((out / "experiment.json").read_text())
    assert saved["peers"] == list(peers.MO_PEERS) and saved["true_hypervolume"] == pytest.approx(1.1 * 11 - 1 / 3)
    finals = _check_finals(out, saved)
    assert sorted(finals["run_id"]) == sorted(f"{p}-s{s}" for p in peers.MO_PEERS for s in (0, 1))
    md = (out / "report.md").read_text()
    assert "| optuna_motpe (peer) | 2 |" in md and "## Significance against optuna_nsga2" in md
    assert "p (Mann-Whitney U, two-sided)" in md and peers.MO_NOTE in md
    assert (out / mocompare.FIGURES["anytime"]).stat().st_size > 0 and (out / mocompare.FIGURES["front"]).exists()
    again = comparison.write_report(out)
    assert again["table"].set_index("strategy")["hv_mean"].to_dict() == pytest.approx(
        finals.groupby("strategy")["hypervolume"].mean().to_dict())
    assert math.isfinite(again["tests"]["p"].iloc[0])


@pytest.mark.timeout(300)
def test_a_smoke_comparison_writes_the_hypervolume_table_and_curves(tmp_path, ray_2cpus):
    """Random search through Ray beside a peer, over a task of the experiment, with its summary."""
    exp = compare.Experiment(space="zdt", budget=2, seeds=(0,), strategies=("random",), max_epochs=2,
                             peers=("optuna_motpe",), tasks=("zdt2",), reference_point=mobench.ZDT_REFERENCE)
    out = tmp_path / "zdt"
    compare.run_tasks("zdt", exp, out, tasks=exp.tasks, smoke=False, seeds=None, budget=None, argv=[])
    task = out / "zdt2"
    saved = json.loads((task / "experiment.json").read_text())
    assert saved["objectives"] == {"f1": "min", "f2": "min"} and saved["reference_point"] == [1.1, 11.0]
    assert saved["true_hypervolume"] == pytest.approx(1.1 * 11 - 2 / 3)
    finals = _check_finals(task, saved)
    assert set(finals["run_id"]) == {"random-s0", "optuna_motpe-s0"} and (finals["hypervolume"] > 0).all()
    md = (task / "report.md").read_text()
    assert "## Final hypervolume" in md and "| optuna_motpe (peer) | 1 |" in md and "| random | 1 |" in md
    assert (task / mocompare.FIGURES["anytime"]).stat().st_size > 0
    summary = (out / "summary.md").read_text()
    assert "mean normalized hypervolume regret" in summary and "worst ratio to optuna_motpe" in summary
