"""Hundreds of trials that do nothing: the driver's cost per trial stays flat as the run goes
(issue 39). The whole-run figures (2,000 and 10,000 trials against raw Tune) are the bench's scale
section, docs/performance.md; here a ratio within one run, never a wall-clock limit."""

import statistics
import time

import pytest

import tuning
from tuning import Space, Uniform
from tuning.bench.scale import tenths
from tuning.report import fanova, runplots

N = 300


@pytest.mark.alone  # a ratio of times within one run: a neighbour's test starting mid-run would move it
def test_a_later_trial_costs_the_driver_no_more_than_an_early_one(ray_here, tmp_path, monkeypatch):
    """Each trial stamps when it reported; the per-trial cost of the run's second half (its tenths'
    median) against its first half's, the first tenth left out (actors starting). And the share of
    the run the driver spent writing experiment snapshots: when every step rewrote every trial's
    state, 600 trials of nothing cost twice as much per trial at the end as at the start, and 2,000
    cost 3.7 times (docs/performance.md); now a snapshot waits until the driver has done
    snapshots.SHARE times its work, so they take about a twentieth of the run."""
    from tuning.backend import snapshots

    spent, write = [], snapshots._save_to_dir

    def timed(self):
        began = time.perf_counter()
        write(self)
        spent.append(time.perf_counter() - began)

    monkeypatch.setattr(snapshots, "_save_to_dir", timed)
    space = Space(params={"x": Uniform(0.0, 1.0), "y": Uniform(0.0, 1.0)}, trainer="tuning.bench.scale:noop",
                  max_epochs=1, gpus_per_trial=0, cpus_per_trial=1)
    result = tuning.search(space=space, strategy="random", num_samples=N, results_dir=tmp_path / "r", max_failures=0)
    assert result.status == "finished" and result.succeeded == N
    stamps = sorted(result.epochs["done_at"])
    per = tenths(stamps)
    first, second = statistics.median(per[1:5]), statistics.median(per[5:])
    assert second <= 1.5 * first, f"per-trial ms by tenth: {[round(1000 * t) for t in per]}"
    share = sum(spent) / (stamps[-1] - stamps[0])
    # About 6 % here, 53 % with a snapshot after every step; the margin is for a loaded machine.
    assert share <= 0.25, f"{len(spent)} snapshots took {share:.0%} of the run"


def test_tenths_cut_the_results_in_ten_from_the_first():
    stamps = [float(i) for i in range(11)] + [10 + 3.0 * i for i in range(1, 11)]  # 1 s apart, then 3 s
    per = tenths(stamps)
    assert len(per) == 10 and per[0] == pytest.approx(1.0) and per[-1] == pytest.approx(3.0)


def test_a_big_run_draws_a_sample_of_curves_and_says_so():
    import pandas as pd

    n = runplots.MAX_CURVES * 3
    trials = pd.DataFrame({"trial_id": [f"t{i}" for i in range(n)], "loss": [float(i) for i in range(n)],
                           "status": "TERMINATED"})
    shown, which = runplots.drawn(trials, "loss", "min")
    assert len(shown) == runplots.MAX_CURVES and shown["trial_id"].is_unique
    best = runplots.MAX_CURVES // 4
    assert set(shown["trial_id"][:best]) == {f"t{i}" for i in range(best)}  # the best are always drawn
    assert which == f"the {best} best and {runplots.MAX_CURVES - best} drawn at random of {n:,}"
    few, which = runplots.drawn(trials.head(10), "loss", "min")
    assert len(few) == 10 and which == ""


def test_importances_over_many_trials_come_from_a_draw_and_say_so():
    import numpy as np
    import pandas as pd

    n = fanova.MAX_IMPORTANCE_TRIALS + 100
    rng = np.random.default_rng(0)
    x, y = rng.random(n), rng.random(n)
    trials = pd.DataFrame({"trial_id": [f"t{i}" for i in range(n)], "x": x, "y": y, "loss": 5 * x + y,
                           "status": "TERMINATED", "epochs": 1})
    table, note = fanova.importance(trials, {"x": Uniform(0.0, 1.0), "y": Uniform(0.0, 1.0)}, metric="loss",
                                    mode="min", max_epochs=1)
    got = dict(zip(table["parameter"], table["importance"]))
    assert got["x"] > got["y"]
    assert f"random draw (seed 0) of the {n:,}" in note and f"These {fanova.MAX_IMPORTANCE_TRIALS} trials" in note


def test_the_next_trial_is_fifos_own_choice_without_rereading_the_finished():
    from types import SimpleNamespace

    from ray.tune.experiment import Trial

    from tuning.backend.strategies import Fifo

    fifo = Fifo()
    trials = [SimpleNamespace(status=s) for s in (Trial.TERMINATED, Trial.ERROR, Trial.RUNNING, Trial.PAUSED,
                                                  Trial.PENDING, Trial.PENDING)]
    for t in trials:
        fifo.on_trial_add(None, t)
    assert fifo.choose_trial_to_run(None) is trials[4]  # the first PENDING, as FIFOScheduler
    assert fifo._finished == 2  # the finished front is passed over from now on
    trials[4].status = trials[5].status = Trial.RUNNING
    assert fifo.choose_trial_to_run(None) is trials[3]  # else the first PAUSED
    trials[3].status = Trial.TERMINATED
    assert fifo.choose_trial_to_run(None) is None
    trials[2].status = Trial.PENDING  # a failure with retries left goes back to PENDING
    assert fifo.choose_trial_to_run(None) is trials[2]


def test_bohbs_set_of_evaluated_points_agrees_with_comparing_every_pair():
    import numpy as np
    from ray.tune.search.bohb.bohb_search import _BOHBJobWrapper

    from tuning import spaces
    from tuning.backend.bohb import VectorisedBOHB, configspace

    cs = configspace(spaces.load("lcbench"), 0)
    model = VectorisedBOHB(cs, random_fraction=0.0)
    rng = np.random.default_rng(0)
    for config in cs.sample_configuration(300):
        model.new_result(_BOHBJobWrapper(float(rng.random()), 27, dict(config)))
    seen = model.configs[27]
    for step in range(2):  # the set grows with the results that arrive in between
        vectors = np.array([*seen[:20], *(np.asarray(p) + 1e-3 for p in seen[20:40]), *rng.random((24, 7))])
        got = model._evaluated(vectors, seen, 27)
        assert (got == VectorisedBOHB.evaluated_among(vectors, np.asarray(seen, dtype=float))).all()
        assert got[:20].all() and not got[20:].any()
        model.new_result(_BOHBJobWrapper(0.5, 27, dict(cs.sample_configuration())))


def test_bohb_fits_a_window_past_a_thousand_results_and_still_knows_every_point():
    import numpy as np
    from ray.tune.search.bohb.bohb_search import _BOHBJobWrapper

    from tuning import spaces
    from tuning.backend.bohb import VectorisedBOHB, configspace

    cs = configspace(spaces.load("lcbench"), 0)
    model = VectorisedBOHB(cs, random_fraction=0.0)
    model.window = 200
    configs, losses = list(cs.sample_configuration(500)), np.random.default_rng(0).random(500)
    for i, (config, loss) in enumerate(zip(configs, losses)):
        model.new_result(_BOHBJobWrapper(float(loss), 27, dict(config)))
        if i + 1 == model.window:  # up to the window, HpBandSter's own lists
            assert model.losses[27] == [float(v) for v in losses[:200]]
    kept = model.losses[27]
    assert len(kept) == model.window
    best = sorted(losses)[:model.window * model.top_n_percent // 100]
    assert set(best) <= set(kept)  # the good set of the whole run is in the window
    assert kept[-10:] == [float(v) for v in losses[-10:]]  # and the most recent results
    assert len(model.evaluated[27]) == 500  # a proposal is still checked against every point
    assert model._evaluated(np.array([configs[0].get_array()]), model.evaluated[27], 27).all()  # the first, kept or not
