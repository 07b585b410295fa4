"""Several objectives and constraints in the strategies that stop trials early (issue 41): the
order a rung promotes by (tuning/backend/mo.py) on points made by hand; MO-ASHA's scheduler and a
Hyperband bracket deciding on hand-made results; BOHB's good/bad split; then real runs (a local
Ray, tests/user_trainers.py's `tradeoff` and tests/mo_trainers.py's `growing`): MO-ASHA's every
decision, Hyperband's and BOHB's fronts, and the stop of a trial past the bound of a metric that
only grows."""

import json

import numpy as np
import pytest

import tuning
from tuning import backend, results
from tuning.backend import mo, rayinternals
from tuning.cli import TuningError

from test_objectives import TWO, check_front, dominates, tradeoff_space

RULE = mo.Rule(TWO, {"peak_mem_gb": ("<=", 4.0)})


def _random_rung(rng, n: int) -> tuple[np.ndarray, np.ndarray]:
    """n points of two objectives on a coarse grid (ties and duplicates happen), a third infeasible."""
    values = rng.integers(0, 6, size=(n, 2)).astype(float)
    violations = np.where(rng.random(n) < 0.3, rng.integers(1, 4, size=n), 0).astype(float)
    return values, violations


# ---------------------------------------------------------------- the order, by hand

def test_the_order_is_feasible_fronts_then_violation_and_a_front_by_hypervolume_contribution():
    values = np.array([[1, 3], [2, 2], [3, 1], [2, 4], [0, 0], [0.5, 9], [np.nan, 1]])
    violations = np.array([0, 0, 0, 0, 2, 1, 0])
    # The front (0, 1, 2) against the reference (3.2, 4.3), a tenth of the range past the worst
    # feasible values: (1, 3) adds 1 x 1.3 of hypervolume, (2, 2) 1 x 1, (3, 1) 0.2 x 1. Then the
    # dominated (2, 4), the one missing an objective, and the infeasible by violation, whatever
    # their objectives: (0, 0) dominates every other point.
    assert list(mo.order(values, violations)) == [0, 1, 2, 3, 6, 5, 4]
    # Units do not matter: latency in seconds instead of milliseconds, or a loss shifted by a
    # constant, orders the same.
    assert list(mo.order(values * [1, 1e-3], violations)) == [0, 1, 2, 3, 6, 5, 4]
    assert list(mo.order(values + [5, 0], violations)) == [0, 1, 2, 3, 6, 5, 4]


def test_no_promotion_puts_a_dominated_or_infeasible_trial_over_one_that_beats_it():
    rng = np.random.default_rng(0)
    for _ in range(200):
        n = int(rng.integers(1, 12))
        values, violations = _random_rung(rng, n)
        trials = [f"t{i}" for i in range(n)]
        results_of = {t: {"loss": v[0], "latency_ms": v[1], "peak_mem_gb": 4 + c} for t, v, c in
                      zip(trials, values, violations)}
        for keep in range(1, n + 1):
            good, bad = mo.split(RULE, trials, results_of, keep)
            assert len(good) == keep and set(good) | set(bad) == set(trials)
            for g in good:
                i = trials.index(g)
                for b in bad:
                    j = trials.index(b)
                    if violations[i] > 0:  # an infeasible one goes on only with every feasible one
                        assert violations[j] >= violations[i], (values, violations, keep)
                    else:
                        assert violations[j] > 0 or not dominates(values[j], values[i]), (values, violations, keep)


def test_a_front_tie_break_spreads_what_is_promoted():
    """Promoting 2 of a front of 5 on a line: hypervolume contribution keeps the knee points, not
    the ends, and never two copies of one point over a distinct one."""
    values = np.array([[0, 4], [1, 3], [2, 2], [2, 2], [3, 1], [4, 0.]])
    # Against the reference (4.4, 4.4): (1, 3) and (3, 1) add 1 each, the ends 0.4, the two copies
    # of (2, 2) nothing (each is covered by the other); a tie goes to the first objective.
    assert list(mo.order(values, np.zeros(6))) == [1, 4, 0, 5, 2, 3]


# ---------------------------------------------------------------- the schedulers on hand-made results

class _Trial:
    def __init__(self, trial_id):
        self.trial_id, self.status = trial_id, "RUNNING"


def _result(loss, latency, mem, epoch=1):
    return {"loss": loss, "latency_ms": latency, "peak_mem_gb": mem, "training_iteration": epoch}


def test_mo_asha_stops_the_dominated_and_the_infeasible_at_a_rung_where_asha_would_not():
    from tuning.backend.strategies import Asha, MoAsha

    settings = dict(metric="loss", mode="min", max_t=9, grace_period=1, reduction_factor=3)
    arrivals = [("a", _result(0.5, 3, 1)),   # alone at the rung: goes on
                ("d", _result(0.6, 4, 1)),   # dominated by a: 2nd of 2, stops
                ("x", _result(0.1, 1, 9)),   # best on both objectives but over the memory bound: stops
                ("b", _result(0.4, 5, 1))]   # on the front beside a: within the first ceil(4/3) = 2
    for scheduler, expected in ((MoAsha(rule=RULE, **settings), ["CONTINUE", "STOP", "STOP", "CONTINUE"]),
                                (Asha(**settings), ["CONTINUE", "STOP", "CONTINUE", "STOP"])):
        got = []
        for trial_id, result in arrivals:
            trial = _Trial(trial_id)
            scheduler.on_trial_add(None, trial)
            got.append(scheduler.on_trial_result(None, trial, result))
        assert got == expected, type(scheduler).__name__


def test_a_hyperband_rung_keeps_its_best_by_fronts_feasible_first():
    from tuning.backend.hyperband import QuotaBracket

    bracket = QuotaBracket(time_attr="training_iteration", max_trials=6, init_t_attr=1, max_t_attr=9, eta=3, s=2,
                           band=0, rule=RULE)
    rung = {"front_a": _result(0.2, 6, 1), "front_b": _result(0.6, 2, 1), "dominated": _result(0.7, 7, 1),
            "infeasible": _result(0.1, 1, 5), "worse": _result(0.9, 9, 1), "worst": _result(1.0, 10, 1)}
    trials = {name: _Trial(name) for name in rung}
    for name, trial in trials.items():
        bracket.add_trial(trial)
        bracket.update_trial_stats(trial, rung[name])
    good, bad = bracket.successive_halving("loss", 1.0)  # 6 trials, eta 3: 2 go on
    assert {t.trial_id for t in good} == {"front_a", "front_b"}
    assert bad[-1].trial_id == "infeasible"  # after every feasible one, though it beats them all


def test_bohb_splits_good_from_bad_by_fronts_and_never_ranks_the_infeasible_first():
    from tuning.backend import bohb

    space = tradeoff_space(strategy="bohb")
    model = bohb.FrontsBOHB(bohb.configspace(space, 0), min_points_in_model=3, top_n_percent=30)
    rng = np.random.default_rng(1)
    points = []
    for _ in range(20):
        x, y = rng.random(2)
        result = {"loss": (1 - x) ** 2 + 0.2 * y, "latency_ms": 1 + 10 * x + 2 * y, "peak_mem_gb": 8 * x}
        job = rayinternals.bohb_job(0.0, 1, {"x": x, "y": y})
        job.point = RULE.point(result)
        model.new_result(job)
        points.append(RULE.point(result))
    losses = np.array(model.losses[1])
    assert sorted(losses) == list(range(20))  # each result's place in the order
    values, violations = np.array([p[0] for p in points]), np.array([p[1] for p in points])
    assert list(np.argsort(losses)) == list(mo.order(values, violations))
    good = np.argsort(losses)[:max(3, 30 * 20 // 100)]  # HpBandSter's good set at this budget
    feasible = violations == 0
    assert feasible.sum() >= len(good) and feasible[good].all()
    assert model.kde_models[1]["good"].data.shape[0] == len(good)


# ---------------------------------------------------------------- real runs

def _reached(rows: dict) -> dict[str, int]:
    return {t: max(r["training_iteration"] for r in rs) for t, rs in rows.items()}


def test_mo_asha_decides_every_rung_by_fronts_in_a_real_run(ray_here, tmp_path):
    space = tradeoff_space(strategy="asha", num_samples=12, max_epochs=4, grace_period=1, reduction_factor=2)
    got = {}
    spec = backend.RunSpec(space=space, strategy="asha", num_samples=12, max_epochs=4, seed=2, cpus_per_trial=1,
                           gpus_per_trial=0, source=None, results_dir=tmp_path, progress=True,  # its table too
                           snapshot_every_step=False, on_search=lambda a, s: got.update(asha=s))
    backend.run(spec)
    scheduler, rows = got["asha"], results.read_rows(tmp_path / results.ROWS_FILE)
    reached, decided, stopped = _reached(rows), 0, 0
    for milestone, rung in scheduler._brackets[0]._rungs:
        if milestone >= 4:
            continue
        seen = []
        for trial_id, point in rung.items():  # in the order they arrived
            seen.append(point)
            go_on = mo.positions(seen)[-1] < mo.promoted_count(len(seen), 2)
            assert go_on == (reached[trial_id] > milestone), (milestone, trial_id)
            decided, stopped = decided + 1, stopped + (not go_on)
            if go_on:  # nothing seen so far that dominates it, or is feasible where it is not, went after it
                ahead = mo.order(np.array([p[0] for p in seen]), [p[1] for p in seen])
                beaten_by = [i for i, p in enumerate(seen[:-1])
                             if (p[1] == 0 < point[1]) or (p[1] == point[1] == 0 and dominates(p[0], point[0]))]
                assert all(list(ahead).index(i) < list(ahead).index(len(seen) - 1) for i in beaten_by)
    assert decided >= 12 and stopped >= 3, "the run must stop some trials at rungs to test anything"
    assert {d[1] for d in scheduler.decisions()} == set(rows)


@pytest.mark.parametrize("strategy", ["hyperband", "bohb", pytest.param("adaptive", marks=pytest.mark.slow)])
def test_hyperband_bohb_and_adaptive_search_two_objectives_to_a_non_dominated_front(ray_here, tmp_path, strategy):
    space = tradeoff_space(strategy=strategy, num_samples=14, max_epochs=4, reduction_factor=2)
    result = tuning.search(None, space, seed=4, results_dir=tmp_path / "r")
    assert result.status == "finished" and len(result.trials) == 14
    assert (result.trials["epochs"] < 4).any(), "brackets stop trials at their rungs"
    front = check_front(tmp_path / "r", space, 4)
    assert list(result.pareto["trial_id"]) == list(front["trial_id"])


def _growing_space(constraint, strategy="random"):
    return tradeoff_space(trainer="mo_trainers:growing", constraints={"peak_mem_gb": constraint},
                          strategy=strategy, num_samples=8, max_epochs=4, reduction_factor=2)


def _stopped_past_the_bound(folder) -> tuple[int, int]:
    """(trials whose memory passed 4 GB, of them stopped before the full budget); asserts each
    trained no epoch after its first result past the bound."""
    rows, early = results.read_rows(folder / results.ROWS_FILE), 0
    crossed = {t: rs for t, rs in rows.items() if any(r["peak_mem_gb"] > 4 for r in rs)}
    for t, rs in crossed.items():
        first_past = min(r["training_iteration"] for r in rs if r["peak_mem_gb"] > 4)
        assert max(r["training_iteration"] for r in rs) == first_past, t
        early += first_past < 4
    return len(crossed), early


@pytest.mark.parametrize("strategy", ["random", pytest.param("asha", marks=pytest.mark.slow), "bohb"])
def test_a_trial_past_the_bound_of_a_growing_metric_stops_there(ray_here, tmp_path, strategy):
    space = _growing_space(("<=", 4, "grows"), strategy)
    result = tuning.search(None, space, seed=0, results_dir=tmp_path / "r")
    assert result.status == "finished" and len(result.trials) == 8  # Hyperband's brackets go on without it
    crossed, early = _stopped_past_the_bound(tmp_path / "r")
    assert early >= 1, "the seed must draw a trial whose memory passes the bound before the last epoch"
    record = json.loads((tmp_path / "r" / "run.json").read_text())
    assert record["declaration"]["constraints"] == {"peak_mem_gb": ["<=", 4.0, "grows"]}
    assert (result.pareto["peak_mem_gb"] <= 4).all()
    # ASHA promotes by the results its rung has seen so far, two trials at a time: in some orders of
    # arrival none of the 8 reaches the full budget within the bound, and its front is empty.
    assert strategy == "asha" or not result.pareto.empty
    trials = result.trials
    stopped = trials[(trials["peak_mem_gb"] > 4) & (trials["epochs"] < 4)]
    assert len(stopped) == early and stopped["stopped_early"].all()  # random's FIFO stops these too
    assert record["stopped_early"] == trials["stopped_early"].sum() >= early
    if strategy == "random":  # nothing else stops a trial there
        assert trials["stopped_early"].sum() == early


def test_without_the_declaration_a_trial_past_the_bound_trains_on(ray_here, tmp_path):
    result = tuning.search(None, _growing_space(("<=", 4)), seed=0, results_dir=tmp_path / "r")
    assert (result.trials["epochs"] == 4).all() and (~result.trials["feasible"]).any()
    rows = results.read_rows(tmp_path / "r" / results.ROWS_FILE)
    assert any(r["peak_mem_gb"] > 4 and r["training_iteration"] < 4 for rs in rows.values() for r in rs)


def test_median_refuses_several_objectives_in_one_line(tmp_path):
    with pytest.raises(TuningError) as err:
        tuning.search(None, tradeoff_space(), strategy="median", results_dir=tmp_path / "r")
    assert "no median that orders trials" in str(err.value) and "\n" not in str(err.value)
    assert not (tmp_path / "r").exists()
