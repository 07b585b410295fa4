"""The adaptive strategy's parts (tuning/backend/adaptive.py), tpe's pruned trials and its brackets
(tuning/backend/tpe.py), driven directly, without a Tune loop: which bracket opens, which budget's
densities propose, and what Optuna is told. End to end they run in test_strategies.py."""

import numpy as np
import pytest

import tuning
from tuning import progress, spaces
from tuning.backend import RunSpec, adaptive, rayinternals, strategies, tpe
from tuning.backend.bohb import configspace

SPACE = tuning.Space(params={f"x{i}": tuning.Uniform(0.0, 1.0) for i in range(3)}, trainer="mf_hartmann",
                     max_epochs=27, reduction_factor=3, cpus_per_trial=1, gpus_per_trial=0)


def _curves(agreement, n, flip_at_1=True, seed=0):
    """n trials with values at 1, 3, 9, 27: epoch 27's order reversed at epoch 1 when flip_at_1,
    kept at 3 and 9."""
    rng = np.random.default_rng(seed)
    final = rng.permutation(n).astype(float)
    for i, v in enumerate(final):
        for budget, value in ((1, -v if flip_at_1 else v), (3, v), (9, v), (27, v)):
            agreement.observe(f"t{i}", budget, value)
    return final


def _model():
    return adaptive.AdaptiveBOHB(space=configspace(SPACE, 0), metric="loss", mode="min", seed=0)


def test_a_rung_that_ranks_against_the_top_weighs_little_and_is_not_trusted():
    a = adaptive.Agreement()
    assert a.weight(1) == 1.0 and a.trusted(1)  # nothing measured: Hyperband's and BOHB's behaviour
    _curves(a, 12)
    assert a.rho()[1] == pytest.approx(-1.0) and a.rho()[3] == pytest.approx(1.0) and a.rho()[27] == 1.0
    assert a.weight(1) == adaptive.FLOOR and a.weight(3) == 1.0 and a.weight(9) == 1.0
    assert not a.trusted(1) and a.trusted(3) and a.trusted(27)
    # where a random trial may first be judged: the lowest rung only once it is measured to agree
    assert not a.judges(1, lowest=True) and a.judges(3, lowest=False) and a.judges(27, lowest=False)
    b = adaptive.Agreement()
    assert not b.judges(1, lowest=True) and b.judges(3, lowest=False)
    _curves(b, 12, flip_at_1=False)
    assert b.judges(1, lowest=True)


def test_where_every_rung_agrees_it_is_bohb():
    a = adaptive.Agreement()
    _curves(a, 12, flip_at_1=False)
    assert all(a.weight(b) == 1.0 and a.trusted(b) for b in (1, 3, 9, 27))


def _feed(model, budgets, n, flip_at_1):
    rng = np.random.default_rng(1)
    for i in range(n):
        x = rng.random(3)
        final = float(np.sum((x - 0.3) ** 2))
        for budget in budgets:
            value = -final if (budget == 1 and flip_at_1) else final
            model.observe(f"t{i}", budget, {"loss": value, **{f"config/x{j}": float(x[j]) for j in range(3)}})


def test_the_model_proposes_from_the_largest_budget_that_agrees_with_the_top():
    model = _model()
    _feed(model, (1,), 12, flip_at_1=True)
    # Only epoch 1 has a model, and nothing is measured against a higher rung yet: BOHB's choice.
    assert model.bohber.model_budget() == 1
    _feed(model, (3,), 12, flip_at_1=True)  # the same trials at 3: epoch 1 now ranks them backwards
    assert model.agreement.rho()[1] == pytest.approx(-1.0)
    assert model.bohber.model_budget() == 3


def test_with_only_a_misleading_rung_modelled_the_proposal_is_random():
    model = _model()
    _feed(model, (1,), 12, flip_at_1=True)
    for i in range(6):  # a higher rung with too few points for a model, enough to measure rung 1 against
        model.agreement.observe(f"t{i}", 3, model.agreement.curves[f"t{i}"][1] * -1)
    assert set(model.bohber.kde_models) == {1} and not model.agreement.trusted(1)
    assert model.bohber.model_budget() is None
    config, info = model.bohber.get_config(1)
    assert info == {"model_based_pick": False} and set(config) == set(SPACE.params)


def _model_picks(max_t: int) -> list[bool]:
    """Of 60 proposals after 12 results at max_t, which came from the model (not at random)."""
    model = _model()
    adaptive.AdaptiveHyperBand(time_attr="training_iteration", metric="loss", mode="min", max_t=max_t,
                               reduction_factor=3, model=model, seed=0)
    _feed(model, (max_t,), 12, flip_at_1=False)
    np.random.seed(0)
    return [model.bohber.get_config(max_t)[1]["model_based_pick"] for _ in range(60)]


def test_at_one_fidelity_every_proposal_past_the_first_points_is_the_models():
    # Every trial trained to max_t (a table): no rung to measure, and BOHB's random third dropped,
    # as Optuna's TPE proposes. With rungs, the random third stays.
    assert all(_model_picks(1))
    with_rungs = _model_picks(27)
    assert 10 <= with_rungs.count(False) <= 30  # about a third of 60


def test_brackets_are_drawn_away_from_a_misleading_first_rung():
    model = _model()
    bands = adaptive.AdaptiveHyperBand(time_attr="training_iteration", metric="loss", mode="min", max_t=27,
                                       reduction_factor=3, model=model, seed=0)
    for s in [3, 2, 1, 0] * 10:
        bands._create_bracket(s)
    assert bands.chosen == [3, 2, 1, 0] * 10  # nothing measured: Hyperband's (BOHB's) order exactly
    _curves(model.agreement, 12)
    bands.chosen.clear()
    for s in [3, 2, 1, 0] * 100:
        bands._create_bracket(s)
    counts = np.bincount(bands.chosen, minlength=4)
    # s = 3 starts at epoch 1 (weight FLOOR), the others at 3, 9, 27 (weight 1): s = 3 is opened in
    # about FLOOR of its turns, a skipped turn going to s = 2.
    assert counts[3] / 100 == pytest.approx(adaptive.FLOOR, abs=0.04)
    assert counts[1] == counts[0] == 100 and counts[2] == 200 - counts[3]


def test_tpe_tells_optuna_a_trial_stopped_below_max_t_was_pruned():
    """Ray's OptunaSearch told Optuna the value at the rung where a trial stopped, as if complete:
    a trial stopped at epoch 1 with a low loss became TPE's best. Pruned, it ranks below every
    trial that reached max_t, as under Optuna's own HyperbandPruner."""
    import optuna

    search = tpe.searcher(SPACE, seed=0, max_t=27)
    for trial_id in ("early", "full"):
        assert set(search.suggest(trial_id)) == set(SPACE.params)
    search.on_trial_result("early", {"loss": 0.5, "training_iteration": 1})
    search.on_trial_complete("early", {"loss": 0.01, "training_iteration": 3})  # stopped at rung 3
    for t in range(1, 27):
        search.on_trial_result("full", {"loss": 1.0 / t, "training_iteration": t})
    search.on_trial_complete("full", {"loss": 0.2, "training_iteration": 27})
    trials = {t.number: t for t in search._ot_study.trials}
    early, full = trials[0], trials[1]
    assert early.state == optuna.trial.TrialState.PRUNED and early.intermediate_values == {1: 0.5, 3: 0.01}
    assert full.state == optuna.trial.TrialState.COMPLETE and full.value == 0.2
    assert search._ot_study.best_trial.number == full.number


def test_tpe_draws_its_trials_brackets_away_from_a_misleading_first_rung():
    """tpe's asynchronous brackets (strategies.TpeBrackets): Tune's draw where nothing is measured or
    every rung agrees; where epoch 1 ranks against the top, the bracket starting there gets about
    FLOOR of its share and the others the rest, in Tune's proportions."""
    from ray.tune.experiment import Trial

    def draws(flip_at_1, n=2000):
        np.random.seed(0)
        sched = strategies.TpeBrackets(metric="loss", mode="min", max_t=27, grace_period=1, reduction_factor=3,
                                     brackets=4)
        if flip_at_1 is not None:
            _curves(sched.agreement, 12, flip_at_1=flip_at_1)
        brackets = rayinternals.asha_brackets(sched)
        for k in range(n):
            sched.on_trial_add(None, Trial("tpe", stub=True, trial_id=f"n{k}"))
        firsts = [min(m for m, _ in rayinternals.rungs(b)) for b in brackets]
        chosen = rayinternals.asha_brackets(sched, of_trials=True)
        return np.array([sum(chosen[f"n{k}"] is b for k in range(n)) for b in brackets]) / n, firsts

    unmeasured, firsts = draws(None)
    agreeing, _ = draws(False)
    misleading, _ = draws(True)
    assert firsts == [1, 3, 9, 27]
    tune_p = np.array(progress.tune_bracket_shares([4, 3, 2, 1]))  # the rungs of each bracket
    assert tune_p == pytest.approx(np.exp([0, -1, -2, -3]) / np.exp([0, -1, -2, -3]).sum())
    assert np.array_equal(unmeasured, agreeing)  # the same random numbers: Tune's draw exactly
    assert unmeasured == pytest.approx(tune_p, abs=0.03)
    want = tune_p * [adaptive.FLOOR, 1, 1, 1]
    assert misleading == pytest.approx(want / want.sum(), abs=0.03)


def test_a_random_trial_of_tpe_is_first_judged_where_a_rung_is_known_to_agree():
    """strategies.TpeBrackets with `explores`: a trial the searcher drew at random never starts at
    epoch 1 while epoch 1 is unmeasured or ranks against the top, and starts there in Tune's share
    once it is measured to agree; a trial of the model is drawn as before, from the same numbers."""
    from ray.tune.experiment import Trial

    def draws(flip_at_1, explores, n=1000):
        np.random.seed(0)
        sched = strategies.TpeBrackets(metric="loss", mode="min", max_t=27, grace_period=1, reduction_factor=3,
                                       brackets=4, explores=explores)
        if flip_at_1 is not None:
            _curves(sched.agreement, 12, flip_at_1=flip_at_1)
        for k in range(n):
            sched.on_trial_add(None, Trial("tpe", stub=True, trial_id=f"n{k}"))
        brackets, chosen = rayinternals.asha_brackets(sched), rayinternals.asha_brackets(sched, of_trials=True)
        return np.array([brackets.index(chosen[f"n{k}"]) for k in range(n)])

    def random_ones(trial_id):
        return int(trial_id[1:]) % 2 == 0

    tune_p = np.array(progress.tune_bracket_shares([4, 3, 2, 1]))
    for flip_at_1 in (None, True):  # unmeasured, or misleading
        mixed = draws(flip_at_1, random_ones)
        assert not (mixed[::2] == 0).any()  # no random trial starts at epoch 1
        assert (mixed[1::2] == 0).any()  # the model's trials still may
    unmeasured = draws(None, random_ones)[::2]
    assert np.bincount(unmeasured, minlength=4)[1:] / len(unmeasured) == pytest.approx(
        tune_p[1:] / tune_p[1:].sum(), abs=0.05)  # the other brackets in Tune's proportions
    agreeing = draws(False, random_ones)
    assert np.bincount(agreeing[::2], minlength=4) / 500 == pytest.approx(tune_p, abs=0.05)
    assert np.array_equal(draws(False, None), draws(False, lambda trial_id: False))  # as before


def test_tpe_knows_which_of_its_trials_it_drew_at_random():
    """tpe.Interleaved records its startup trials and its random turns, and PrunedAware.explores
    answers for Tune's trial ids; build() hands that to the brackets."""
    space = tuning.spaces.load("counting_ones").replace(max_epochs=9)
    _, search, sched = strategies.build(RunSpec(
        space=space, strategy="tpe", num_samples=40, max_epochs=9, seed=0, cpus_per_trial=1, gpus_per_trial=0,
        source=None, results_dir=None))
    searcher = search.searcher
    assert sched.explores == searcher.explores
    sampler = searcher._ot_study.sampler
    for k in range(40):
        trial_id = f"t{k}"
        searcher.suggest(trial_id)
        if k < sampler._n_startup_trials:  # k trials finished so far: TPE's startup draws at random
            assert searcher.explores(trial_id)
        else:  # past them only the random turns explore
            assert searcher.explores(trial_id) == sampler._random_turn(rayinternals.optuna_trial(searcher, trial_id))
        if k < 12:
            searcher.on_trial_complete(trial_id, {"training_iteration": 9, space.metric: float(k)})
    assert 12 < len(sampler.explored) < 40 and not searcher.explores("unknown")


def test_tpe_brackets_measure_agreement_from_the_results_they_see_and_from_a_resume():
    from ray.tune.experiment import Trial

    sched = strategies.TpeBrackets(metric="loss", mode="min", max_t=27, grace_period=1, reduction_factor=3,
                                 brackets=4)
    rows = {}
    for i in range(8):
        trial = Trial("tpe", stub=True, trial_id=f"t{i}")
        sched.on_trial_add(None, trial)
        for epoch in (1, 2, 3):  # epoch 1 reversed against epoch 3; epoch 2 is no rung
            row = {"training_iteration": epoch, "loss": float(-i if epoch == 1 else i)}
            sched.on_trial_result(None, trial, row)
            rows.setdefault(f"t{i}", []).append(row)
    assert set(sched.agreement.curves["t0"]) == {1, 3}
    assert sched.agreement.rho()[1] == pytest.approx(-1.0) and sched.agreement.weight(1) == adaptive.FLOOR
    resumed = strategies.TpeBrackets(metric="loss", mode="min", max_t=27, grace_period=1, reduction_factor=3,
                                   brackets=4)
    resumed.rebuild(rows)
    assert resumed.agreement.rho() == sched.agreement.rho()


def test_adaptive_measures_agreement_from_every_epoch_at_a_rung_whatever_the_trials_bracket():
    """A trial that starts at epoch 3 still reports epoch 1: its value there counts for the agreement.
    From rung results alone, epoch 1 went unmeasured once the top rung was past most trials that
    started there, and its bracket went back to weight 1 (lcbench_189905: docs/strategies.md)."""
    from types import SimpleNamespace

    from ray.tune.experiment import Trial

    model = _model()
    bands = adaptive.AdaptiveHyperBand(time_attr="training_iteration", metric="loss", mode="min", max_t=27,
                                       reduction_factor=3, model=model, seed=0)
    controller = SimpleNamespace(search_alg=None)  # what the brackets read of Tune's controller when pausing
    for i in range(8):
        trial = Trial("adaptive", stub=True, trial_id=f"t{i}")
        bands.on_trial_add(controller, trial)
        for epoch in (1, 2, 3):  # epoch 1 reversed against epoch 3; epoch 2 is no rung
            bands.on_trial_result(controller, trial, {"training_iteration": epoch, "loss": float(-i if epoch == 1 else i)})
    assert set(model.agreement.curves["t0"]) == {1, 3}
    assert model.agreement.rho()[1] == pytest.approx(-1.0) and model.agreement.weight(1) == adaptive.FLOOR
