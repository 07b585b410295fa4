"""tpe's asynchronous brackets (tuning/backend/tpe.py, tuning.progress.async_brackets): a trial is
stopped at a rung as soon as it ranks below the cut, so TPE hears of it before its next proposal,
as under Optuna's own HyperbandPruner. Under synchronous brackets a whole bracket was proposed
before any rung was decided (docs/strategies.md, tpe)."""

import math
from types import SimpleNamespace

import pandas as pd
import pytest

import tuning
from tuning import progress
from tuning.backend import strategies
from tuning.backend import RunSpec


def test_brackets_are_optunas_count_each_judging_from_its_own_first_rung():
    brackets = progress.async_brackets(1, 27, 3)
    # floor(log3(27 / 1)) + 1 = 4, as HyperbandPruner(min_resource=1, max_resource=27, reduction_factor=3)
    assert [points for _, points in brackets] == [[1, 3, 9, 27], [3, 9, 27], [9, 27], [27]]
    shares = [share for share, _ in brackets]
    assert sum(shares) == pytest.approx(1.0) and shares == sorted(shares, reverse=True)
    assert shares[0] / shares[1] == pytest.approx(math.e)  # Tune's softmax over the rung counts
    assert progress.async_brackets(1, 1, 3) == [(1.0, [1])]  # one epoch: one bracket of full trials


def test_the_plan_is_asha_in_each_bracket_weighed_by_its_share():
    plan = progress.planned_epochs("tpe", trials=100, max_epochs=27, grace_period=1, reduction_factor=3)
    by_hand = sum(progress.halving_epochs(100 * share, points, 3) for share, points in progress.async_brackets(1, 27, 3))
    assert plan == round(by_hand)
    # fewer epochs than every trial to the end, more than one ASHA bracket from epoch 1
    assert progress.planned_epochs("asha", trials=100, max_epochs=27, grace_period=1, reduction_factor=3) < plan < 2700


def _spec(space, seed=0, **kw):
    return RunSpec(space=space, strategy="tpe", num_samples=12, max_epochs=9, seed=seed, cpus_per_trial=1,
                   gpus_per_trial=0, source=None, results_dir=None, **kw)


def test_tpe_is_asynchronous_hyperband_with_a_seeded_bracket_draw():
    space = tuning.spaces.load("counting_ones").replace(max_epochs=9)
    _, search, scheduler = strategies.build(_spec(space))
    assert isinstance(scheduler, strategies.Asha) and not isinstance(scheduler, strategies.HyperBand)
    assert len(scheduler._brackets) == len(progress.async_brackets(1, 9, space.reduction_factor)) == 3
    assert type(search.searcher).__name__ == "PrunedAware"  # told pruned, as before (test_adaptive.py)

    def draws(seed):  # which bracket each of 30 trials joins, as Tune adds them
        scheduler = strategies.build(_spec(space, seed=seed))[2]
        for i in range(30):
            scheduler.on_trial_add(None, SimpleNamespace(trial_id=f"t{i}"))
        return [scheduler._brackets.index(scheduler._trial_info[f"t{i}"]) for i in range(30)]

    assert draws(0) == draws(0) != draws(1) and len(set(draws(0))) > 1


def test_a_tpe_run_stops_trials_at_rungs_and_trains_about_its_plan(ray_here, tmp_path):
    """A real run: trials end at different rungs, and the epochs trained are near the plan (ASHA's
    promotions are asynchronous, so not to the epoch)."""
    result = tuning.search(None, "counting_ones", strategy="tpe", num_samples=24, max_epochs=9, seed=1,
                           results_dir=tmp_path / "r")
    assert result.status == "finished"
    trials = pd.read_csv(tmp_path / "r" / "trials.csv")
    assert len(trials) == 24 and trials["epochs"].max() == 9 and trials["epochs"].min() < 9
    planned = progress.planned_epochs("tpe", trials=24, max_epochs=9, reduction_factor=3)
    assert 0.5 * planned <= trials["epochs"].sum() <= 24 * 9


def test_a_share_of_tpe_proposals_is_drawn_at_random_whatever_the_model_believes():
    """tpe.Interleaved: about RANDOM_FRACTION of the trials are drawn at random (seeded by trial
    number, so a resumed or repeated run draws the same ones); the rest follow the model, which on
    a bowl closes in on its bottom while the random ones keep covering the whole range."""
    import optuna
    from tuning.backend import tpe

    sampler = tpe.Interleaved(seed=0)
    turns = [sampler._random_turn(SimpleNamespace(number=n)) for n in range(2000)]
    assert turns == [tpe.Interleaved(seed=0)._random_turn(SimpleNamespace(number=n)) for n in range(2000)]
    assert sum(turns) / 2000 == pytest.approx(tpe.RANDOM_FRACTION, abs=0.03)

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=tpe.Interleaved(seed=0))
    study.optimize(lambda t: (t.suggest_float("x", 0, 1) - 0.5) ** 2, n_trials=150)
    late = study.trials[50:]  # past the startup trials, the model has closed in
    far = {turn: [abs(t.params["x"] - 0.5) > 0.25 for t in late if turns[t.number] == turn] for turn in (True, False)}
    assert len(far[True]) >= 10
    assert sum(far[True]) / len(far[True]) > 0.25  # random: half of them, about
    assert sum(far[False]) / len(far[False]) < 0.1


def test_with_several_objectives_tpe_draws_a_share_at_random_too():
    """MOTPE under tpe (tpe.multi_objective_searcher's sampler) is interleaved as with one objective:
    on two objectives whose front is one point, the model's trials close in on it and the random
    ones do not."""
    import optuna
    from tuning.backend import tpe

    space = tuning.spaces.load("zdt")
    sampler = tpe.multi_objective_searcher(space, seed=0, max_t=space.max_epochs)._ot_study.sampler
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(directions=["minimize", "minimize"], sampler=sampler)
    study.optimize(lambda t: ((t.suggest_float("x", 0, 1) - 0.5) ** 2, abs(t.params["x"] - 0.5)), n_trials=150)
    late = study.trials[50:]
    random = {t.number for t in late if study.sampler._random_turn(t)}
    far = {turn: [abs(t.params["x"] - 0.5) > 0.25 for t in late if (t.number in random) == turn] for turn in (True, False)}
    assert len(far[True]) >= 10 and sum(far[True]) / len(far[True]) > 0.25
    assert sum(far[False]) / len(far[False]) < 0.1
