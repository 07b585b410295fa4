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


def test_several_objectives_show_pruned_trials_furthest_then_by_front_and_tpe_takes_the_first():
    """Optuna ranks pruned trials of one objective by how far they got, then by their last value, and
    fills its good set with them only where complete ones are too few; over several objectives its
    score reads study.direction and raises, so they are told without values and ordered here."""
    from optuna.samplers._tpe.sampler import _split_trials
    from optuna.trial import TrialState

    from tuning.backend.tpewindow import RUNG_ATTR, _Seen

    study = optuna.create_study(directions=["minimize", "minimize"])
    rungs = [(1, [0.2, 0.2], 0.0),   # 0: epoch 1, dominates 1
             (1, [0.3, 0.3], 0.0),   # 1
             (3, [0.9, 0.9], 0.0),   # 2: further than all the others, dominated at epoch 3 by 3
             (3, [0.5, 0.5], 0.0),   # 3: the best pruned trial
             (3, [0.1, 0.1], 2.0),   # 4: at epoch 3 and best by values, but infeasible
             (1, [0.1, 0.9], 0.0)]   # 5: on epoch 1's front with 0
    trials = [optuna.trial.create_trial(params={"x": i / 10}, distributions={"x": DISTS["x"]}, state=TrialState.PRUNED,
                                        user_attrs={RUNG_ATTR: {"step": s, "values": v, "violation": c}})
              for i, (s, v, c) in enumerate(rungs)]
    trials.append(optuna.trial.create_trial(params={"x": 0.9}, distributions={"x": DISTS["x"]}, values=[0.6, 0.6]))
    study.add_trials(trials)
    shown = _Seen(study, window=1000, by_front=True)._get_trials(states=(TrialState.COMPLETE, TrialState.PRUNED))
    assert [t.number for t in shown] == [6, 3, 2, 4, 0, 5, 1]  # 0 and 5: one front, 0 adds more hypervolume
    assert {t.number for t in shown} == set(range(7)) and len(shown) == 7
    below, _ = _split_trials(study, shown, 2)  # the complete one, then the best pruned one
    assert [t.number for t in below] == [3, 6]
    below, _ = _split_trials(study, study._get_trials(deepcopy=False), 2)  # as stored: the first pruned one
    assert [t.number for t in below] == [0, 6]
