"""tuning.fidelity: whether low epochs rank configurations like the last, on hand-made curves whose
answer is known, and the section both reports show. No Ray, no training."""

import json
import math

import pandas as pd
import pytest

from tuning import fidelity, spacejson, spaces
from tuning.fidelity import Agreement, agreement, sentence
from tuning.record import RunRecord
from tuning.results import TrialRecord
from tuning.report import comparison, runreport


def _curves(n=8, top=4):
    """n trials over epochs 1..top: the last epoch's value is q; epoch 2 orders them as the last
    (an increasing function of q), epoch 1 the other way round, epoch 3 not at all (constant)."""
    return {f"t{i}": {1: -float(i), 2: 10.0 + i * i, 3: 0.5, top: float(i)} for i in range(n)}


def test_a_rung_that_ranks_like_the_top_gives_one_a_reversed_one_minus_one():
    got = agreement(_curves())
    assert [(a.rung, a.top, a.n) for a in got] == [(1, 4, 8), (2, 4, 8), (3, 4, 8)]
    assert got[0].rho == pytest.approx(-1) and got[1].rho == pytest.approx(1)
    assert math.isnan(got[2].rho)  # every trial the same at epoch 3: no ranks to compare


def test_n_counts_only_trials_that_reached_both_and_top_is_what_enough_reached():
    curves = _curves(n=6)
    curves.update({f"stopped{i}": {1: 100.0 + i, 2: 5.0} for i in range(4)})  # stopped at epoch 2
    curves["far"] = {1: 0.0, 2: 0.0, 3: 0.0, 4: 0.0, 9: 1.0}  # the only one at epoch 9: not the top
    got = {a.rung: a for a in agreement(curves)}
    assert {a.top for a in got.values()} == {4}
    assert got[1].n == got[2].n == 7  # six made-up trials and "far"; the stopped ones never reached 4


def test_non_finite_values_are_ignored():
    curves = _curves(n=7)
    curves["t0"][1] = math.nan  # t0 left out at epoch 1 only
    curves["t1"][4] = math.inf  # t1 left out everywhere: it has no value at the top
    curves["t2"][2] = None
    got = {a.rung: a for a in agreement(curves)}
    assert got[1].n == 5 and got[2].n == 5 and got[1].rho == pytest.approx(-1) and got[2].rho == pytest.approx(1)
    # Too few finite values at the last epoch: the top moves down to one with enough.
    for i in range(2, 4):
        curves[f"t{i}"][4] = math.nan
    assert {a.top for a in agreement(curves)} == {3}


def test_below_min_trials_nothing():
    curves = _curves(n=4)
    assert agreement(curves) == [] and agreement(curves, min_trials=4) != []
    assert agreement({}) == []
    # Enough trials in all, but not at any rung together with the top: no row for that rung.
    curves = _curves(n=5)
    curves["t0"].pop(1)
    assert [a.rung for a in agreement(curves)] == [2, 3]


def test_explicit_rungs_are_measured_in_order_and_only_below_the_top():
    got = agreement(_curves(), rungs=[3, 1, 4, 7, 1])
    assert [a.rung for a in got] == [1, 3]


def test_the_sentence():
    assert sentence(Agreement(rung=1, top=27, rho=0.0612, n=12)) == "epoch 1 ranks like epoch 27: ρ = 0.06 (12 trials)"
    assert sentence(Agreement(rung=3, top=9, rho=-0.001, n=5)) == "epoch 3 ranks like epoch 9: ρ = 0.00 (5 trials)"
    assert "ρ undefined" in sentence(Agreement(rung=3, top=9, rho=math.nan, n=5))


def test_curves_from_rows_key_by_several_columns_and_leave_out_stand_ins():
    rows = pd.DataFrame({"run_id": ["a", "a", "b", "b", "b"], "trial_id": ["t0"] * 5,
                         "training_iteration": [1, 2, 1, 1, 2], "loss": [3.0, 2.0, 5.0, 4.0, 99.0],
                         "diverged": [False, False, False, False, "True"]})
    assert fidelity.from_rows(rows, trial=["run_id", "trial_id"]) == {("a", "t0"): {1: 3.0, 2: 2.0},
                                                                      ("b", "t0"): {1: 4.0}}  # the later row
    assert fidelity.from_rows(rows.drop(columns="run_id").head(2)) == {"t0": {1: 3.0, 2: 2.0}}
    assert fidelity.from_rows(rows.head(0)) == {}


def test_a_report_shows_the_rungs_trials_stopped_at_not_every_epoch():
    # ASHA-like, η = 3: 27 trials at epoch 1, 9 go on to 3, 5 to 9.
    curves = {f"t{i}": {e: float(i + e) for e in range(1, (9 if i < 5 else 3 if i < 9 else 1) + 1)}
              for i in range(27)}
    assert [a.rung for a in fidelity.shown(curves)] == [1, 3]
    assert [a.rung for a in fidelity.shown(curves, reduction_factor=3)] == [1, 3]
    # FIFO, 27 epochs: at most six rungs, the scheduler's ladder where it names one, else spread.
    fifo = {f"t{i}": {e: float(i * e) for e in range(1, 28)} for i in range(8)}
    assert [a.rung for a in fidelity.shown(fifo, reduction_factor=3)] == [1, 3, 9]
    spread = [a.rung for a in fidelity.shown(fifo)]
    assert len(spread) == fidelity.MOST_SHOWN and spread[0] == 1 and spread[-1] == 26


# ---------------------------------------------------------------- the reports

def _records(n, epochs=4):
    """n trials of a run: the last epoch orders them as q, epoch 1 the other way round; every
    third trial stopped after epoch 2, as a scheduler would."""
    out = []
    for i in range(n):
        last = 2 if i % 3 == 2 else epochs
        rows = [{"training_iteration": e, "epoch": e, "loss": (-i if e == 1 else i + 1.0 / e), "diverged": False,
                 "restored_from": 0, "time_total_s": 1.0 * e, "timestamp": 1_000_000 + e} for e in range(1, last + 1)]
        out.append(TrialRecord(trial_id=f"t{i:02d}", status="TERMINATED", config={"lr": 10 ** (-1 - i / n)},
                               rows=rows))
    return out


def _plan(n):
    space = spaces.Space(params={"lr": spaces.LogUniform(1e-3, 1e-1)}, metric="loss", mode="min", max_epochs=4)
    return RunRecord(space="", strategy="asha", seed=0, num_samples=n, max_epochs=4, trainer="mine:train",
                     params=spacejson.declarations(space), declaration=spacejson.to_json(space), metric="loss",
                     mode="min", status="finished", data={"kind": "trainer"})


def test_the_run_report_says_whether_low_epochs_rank_like_the_last(tmp_path):
    md = runreport.write_from_records(tmp_path, _records(12), _plan(12), live=False)["markdown"].read_text()
    section = md[md.index(f"## {fidelity.TITLE}"):]
    section = section[:section.index("\n## ")]
    assert "- epoch 1 ranks like epoch 4: ρ = -1.00 (8 trials)" in section
    assert "- epoch 2 ranks like epoch 4: ρ = 1.00 (8 trials)" in section
    assert "| rung (epoch) | top (epoch) | ρ | n (trials) |" in section and "| 2 | 4 | 1.00 | 8 |" in section
    # Fewer trials than a rank correlation needs: no section at all.
    md = runreport.write_from_records(tmp_path, _records(4), _plan(4), live=False)["markdown"].read_text()
    assert fidelity.TITLE not in md


def test_the_comparison_report_pools_every_run(tmp_path):
    # Two strategies x two seeds, six trials each, trial ids repeated in every run: 24 trials, not 6.
    rows = []
    for strategy in ("random", "asha"):
        for seed in (0, 1):
            done = 0
            for t in range(6):
                q = (t + 6 * seed) / 12 + (strategy == "asha")
                for i in (1, 2, 3):
                    done += 1
                    rows.append({"benchmark": "toy", "strategy": strategy, "seed": seed,
                                 "run_id": f"{strategy}-s{seed}", "trial_id": f"t{t}", "training_iteration": i, "epoch": i,
                                 "loss": -q if i == 1 else q, "full_fidelity": i == 3,
                                 "consumed_budget": done / 3, "wall_s": 0.1 * done})
    pd.DataFrame(rows).to_csv(tmp_path / "runs.csv", index=False)
    (tmp_path / "experiment.json").write_text(json.dumps({
        "name": "toy", "benchmark": "toy", "metric": "loss", "mode": "min", "budget": 6, "max_t": 3,
        "strategies": ["random", "asha"], "seeds": [0, 1], "params": []}))
    md = comparison.write_report(tmp_path)["markdown"].read_text()
    section = md[md.index(f"## {fidelity.TITLE}"):md.index("## Provenance")]
    assert "- epoch 1 ranks like epoch 3: ρ = -1.00 (24 trials)" in section
    assert "- epoch 2 ranks like epoch 3: ρ = 1.00 (24 trials)" in section
    assert "every strategy's and seed's trials pooled" in section
