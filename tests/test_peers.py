"""Peers (tuning/compare/peers.py): Optuna's TPE, alone and under its Hyperband pruner, run in process on a
synthetic benchmark or a replay. No Ray: seconds."""

import json

import pandas as pd
import pytest

from cli_helpers import refused
from conftest import ROOT
from tuning import spaces
from tuning.compare import peers, runner as compare
from tuning.report import analysis

CALIBRATION = ROOT / "docs" / "calibration"  # a finished tuning.run: what cifar_replay replays


def _rows(peer, seed=0, *, space="mf_hartmann", budget=6.0, max_t=None):
    sp = spaces.load(space)
    max_t = max_t or sp.max_epochs
    rows = peers.run(peer, sp, seed=seed, budget=budget, max_t=max_t)
    return compare._run_rows(rows, benchmark=sp.trainer, strategy=peer, seed=seed, max_t=max_t,
                             params=list(sp.params))


def _last_epochs(df: pd.DataFrame) -> pd.Series:
    return df.groupby("trial_id", sort=False)["training_iteration"].max()


@pytest.mark.parametrize("peer", peers.PEERS)
@pytest.mark.parametrize("budget", [6.0, 4.5])  # 4.5: the budget runs out in the middle of a trial
def test_a_peer_run_spends_its_budget_and_no_more(peer, budget):
    df = _rows(peer, budget=budget)
    # Charged as the Ray runs are: every result is one epoch of one trial, 1/max_t of a full evaluation.
    assert list(df["consumed_budget"]) == pytest.approx([(i + 1) / 27 for i in range(len(df))])
    assert df["consumed_budget"].max() <= budget + 1 / 27 + 1e-9
    assert df["consumed_budget"].max() == pytest.approx(budget, abs=1 / 27)
    assert not df.duplicated(["trial_id", "epoch"]).any()
    assert (df["full_fidelity"] == (df["training_iteration"] == 27)).all()
    assert df["device_hours"].is_monotonic_increasing and df["wall_s"].is_monotonic_increasing


def test_the_pruned_peer_stops_trials_at_rungs_and_the_full_one_trains_every_trial_to_max_t():
    full, pruned = _rows("optuna_tpe", budget=10), _rows("optuna_tpe_hb", budget=10)
    assert list(_last_epochs(full)) == [27] * 10  # a budget of 10 full evaluations: 10 whole trials
    ends = _last_epochs(pruned).iloc[:-1]  # the last trial may be cut by the budget, not the pruner
    assert (ends < 27).any() and (ends == 27).any(), ends.value_counts().to_dict()
    # Pruned at Hyperband's rungs: the grace period times powers of the reduction factor.
    assert set(ends[ends < 27]) <= {1, 3, 9}, ends.value_counts().to_dict()
    assert pruned["trial_id"].nunique() > full["trial_id"].nunique()


@pytest.mark.parametrize("peer", peers.PEERS)
def test_the_same_seed_gives_the_same_rows(peer):
    keep = lambda df: df.drop(columns=["wall_s", "device_hours"])  # noqa: E731 (times vary, nothing else)
    first, again, other = _rows(peer, 3), _rows(peer, 3), _rows(peer, 4)
    pd.testing.assert_frame_equal(keep(first), keep(again))
    assert not first[["x0", "x1"]].equals(other[["x0", "x1"]].iloc[:len(first)])


def test_conditional_parameters_are_asked_for_only_where_they_are_active():
    sp = spaces.load("conditional_branches")
    df = _rows("optuna_tpe_hb", space="conditional_branches", budget=5, max_t=3)
    for _, row in df.iterrows():
        config = {k: row[k] for k in sp.params if row[k] is not None and not pd.isna(row[k])}
        assert set(config) == spaces.active(sp, config), row.to_dict()


def test_a_replay_is_evaluated_in_process_and_charged_its_recorded_cost():
    from tuning.compare import recorded as replay

    recorded = replay.read(str(CALIBRATION))
    sp = replay.space(recorded)
    rows = peers.run("optuna_tpe_hb", sp, seed=0, budget=2, max_t=4, recorded=recorded)
    df = compare._run_rows(rows, benchmark=sp.trainer, strategy="optuna_tpe_hb", seed=0, max_t=4,
                           params=list(sp.params), metric=sp.metric)
    assert len(df) == 8 and df["recorded_trial"].notna().all()
    epochs = pd.read_csv(CALIBRATION / "epochs.csv", dtype={"trial_id": str}).set_index(
        ["trial_id", "training_iteration"])
    cost = [epochs.loc[(t, i), "time_this_iter_s"] / 3600 for t, i in zip(df["recorded_trial"], df["training_iteration"])]
    assert list(df["device_hours"]) == pytest.approx(list(pd.Series(cost).cumsum()))


def test_a_comparison_runs_its_peers_without_ray_resumes_them_and_labels_them(tmp_path, monkeypatch, capsys):
    def no_ray(**kwargs):
        raise AssertionError("Ray started for a comparison of peers alone")

    monkeypatch.setattr(compare.backend, "start_ray", no_ray)
    exp = compare.Experiment(space="mf_hartmann", budget=3, seeds=(0, 1), strategies=(), max_epochs=9)
    out = tmp_path / "cmp"
    compare.run("peers_only", exp, out, smoke=False, seeds=None, budget=None, argv=[])
    printed = capsys.readouterr().out
    assert "[1/4] optuna_tpe-s0: running" in printed and "[4/4] optuna_tpe_hb-s1: done" in printed
    assert sorted(p.name for p in (out / "runs").glob("*.csv")) == sorted(
        f"{p}-s{s}.csv" for p in peers.PEERS for s in (0, 1))
    runs = pd.read_csv(out / "runs.csv")
    assert set(runs["strategy"]) == set(peers.PEERS) and runs["consumed_budget"].max() == pytest.approx(3)
    assert json.loads((out / "experiment.json").read_text())["peers"] == list(peers.PEERS)
    md = (out / "report.md").read_text()
    assert "| optuna_tpe (peer) |" in md and "| optuna_tpe_hb (peer) |" in md and peers.NOTE in md

    compare.run("peers_only", exp, out, smoke=False, seeds=None, budget=None, argv=[])
    assert capsys.readouterr().out.count("finished in an earlier invocation, kept") == 4


def test_no_peers_for_a_trainer_that_is_not_a_benchmark_and_the_report_says_so():
    sp = spaces.load("cifar_random")
    assert not peers.supported(sp) and peers.supported(spaces.load("counting_ones"))
    assert compare._peers(compare.Experiment(space="cifar_random", budget=1), sp) == ()
    assert compare._peers(compare.Experiment(space="counting_ones", budget=1, peers=()), sp) == ()
    assert peers.report_lines({"peers": [], "peers_not_run": peers.NOT_RUN}) == [peers.NOT_RUN]
    assert peers.report_lines({}) == []  # a comparison from before peers: nothing said
    assert analysis.label("optuna_tpe", ["optuna_tpe"]) == "optuna_tpe (peer)"
    assert analysis.label("tpe", ["optuna_tpe"]) == "tpe"


def test_an_experiment_naming_an_unknown_peer_is_refused(capsys, tmp_path):
    (tmp_path / "bad.py").write_text("from tuning.compare import Experiment\n"
                                     "EXPERIMENT = Experiment(space='counting_ones', budget=5, peers=('optuna_cmaes',))\n")
    refused(capsys, compare.main, [str(tmp_path / "bad"), "--out", str(tmp_path / "out")],
            "peer 'optuna_cmaes' unknown", "optuna_tpe, optuna_tpe_hb")
    assert not (tmp_path / "out").exists()
