"""tpe's sampler at scale (tuning/backend/tpewindow.py): Optuna's TPE as it ships up to WINDOW
finished trials, a bounded window past that."""

import pickle

import optuna
import pytest

from tuning.backend.tpewindow import WindowedTPE, windowed

optuna.logging.set_verbosity(optuna.logging.WARNING)
DISTS = {"x": optuna.distributions.FloatDistribution(0.0, 1.0),
         "n": optuna.distributions.IntDistribution(1, 5),
         "c": optuna.distributions.CategoricalDistribution(["a", "b", "c"])}


def _study(sampler, n: int, seed: int = 0) -> optuna.Study:
    import random

    rng = random.Random(seed)
    study = optuna.create_study(sampler=sampler)
    trials = []
    for i in range(n):
        params = {"x": rng.random(), "n": rng.randint(1, 5), "c": rng.choice("abc")}
        value = (params["x"] - 0.3) ** 2 + 0.1 * params["n"] + rng.random() * 0.01
        state = optuna.trial.TrialState.PRUNED if i % 3 == 0 else optuna.trial.TrialState.COMPLETE
        trials.append(optuna.trial.create_trial(params=params, distributions=DISTS, state=state,
                                                value=value if state == optuna.trial.TrialState.COMPLETE else None,
                                                intermediate_values={1: value}))
    study.add_trials(trials)
    return study


def _proposals(study: optuna.Study, k: int = 5) -> list[dict]:
    out = []
    for _ in range(k):
        trial = study.ask(DISTS)
        out.append(trial.params)
        study.tell(trial, trial.params["x"])
    return out


def test_up_to_the_window_its_proposals_are_tpes_own():
    ours = _proposals(_study(WindowedTPE(seed=3, window=400), 300))
    theirs = _proposals(_study(optuna.samplers.TPESampler(seed=3), 300))
    assert ours == theirs


def test_past_the_window_it_sees_the_best_complete_and_the_most_recent():
    study = _study(optuna.samplers.TPESampler(seed=0), 1500)
    trials = study.get_trials(deepcopy=False)
    shown = windowed(trials, 1000, minimize=True)
    assert len(shown) == 1000
    best = sorted((t for t in trials if t.state == optuna.trial.TrialState.COMPLETE), key=lambda t: t.value)[:100]
    numbers = {t.number for t in shown}
    assert {t.number for t in best} <= numbers  # the good set (at most 25 trials) is always among them
    assert set(range(1500 - 900, 1500)) <= numbers  # and the most recent
    assert [t.number for t in shown] == sorted(numbers)  # in the run's order
    assert windowed(trials[:1000], 1000, minimize=True) == trials[:1000]


def test_past_the_window_proposals_still_follow_the_good_region_and_it_pickles():
    sampler = WindowedTPE(seed=0, window=200)
    study = _study(sampler, 600)
    xs = [p["x"] for p in _proposals(study, 20)]
    assert sum(abs(x - 0.3) < 0.2 for x in xs) >= 12  # most proposals near the optimum at x = 0.3
    finished = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
    assert len(sampler._view(study)._get_trials(states=finished)) == 200  # what it was shown: the window
    again = pickle.loads(pickle.dumps(sampler))
    assert again.window == 200 and again._seen == {}


@pytest.mark.parametrize("window", [0, 5])
def test_a_tiny_window_keeps_at_least_the_recent_trials(window):
    study = _study(optuna.samplers.TPESampler(seed=0), 40)
    shown = windowed(study.get_trials(deepcopy=False), window, minimize=True)
    assert len(shown) == window
