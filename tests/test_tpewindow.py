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


def _misleading_first_epoch(first_agrees: bool = False) -> optuna.Study:
    """A run like tpe's seed 9 on lcbench_167149 (docs/lab/strategies-log.md): the complete trials
    (x near 0.2) never learned and looked best at epoch 1; trials at x near 0.8 learn, look worse at
    epoch 1 and better at epoch 3, and were stopped at rung 1 or 3."""
    from optuna.trial import TrialState

    x = {"x": DISTS["x"]}
    trials = []
    for i in range(8):  # complete: epoch 3 orders like epoch 27, epoch 1 the other way round
        e1 = 30 + i if first_agrees else 40 - i
        trials.append(optuna.trial.create_trial(params={"x": 0.15 + 0.01 * i}, distributions=x, value=5.0 + 5 * i,
                                                intermediate_values={1: e1, 3: 15.0 + 5 * i, 9: 10.0 + 5 * i}))
    for i in range(5):  # stopped at epoch 1: looked worst there
        trials.append(optuna.trial.create_trial(params={"x": 0.5 + 0.01 * i}, distributions=x, state=TrialState.PRUNED,
                                                intermediate_values={1: 45.0 + i}))
    for i in range(5):  # stopped at epoch 3: better there than any complete trial was
        trials.append(optuna.trial.create_trial(params={"x": 0.78 + 0.01 * i}, distributions=x, state=TrialState.PRUNED,
                                                intermediate_values={1: 44.0 + i, 3: 10.0 + i}))
    study = optuna.create_study()
    study.add_trials(trials)
    return study


def test_where_a_rung_misleads_tpe_splits_at_the_lowest_rung_above_it_that_agrees():
    from optuna.samplers._tpe.sampler import _split_trials
    from optuna.trial import TrialState

    from tuning.backend.tpewindow import _Seen, at_agreeing_rung

    study = _misleading_first_epoch()
    stored = study.get_trials(deepcopy=False)
    shown = _Seen(study, window=1000, max_t=27)._get_trials(states=(TrialState.COMPLETE, TrialState.PRUNED))
    # Every trial that reached epoch 3, complete or not, is ranked by its value there.
    assert [t.value for t in shown if t.state == TrialState.COMPLETE] == [15.0 + 5 * i for i in range(8)] + [
        10.0 + i for i in range(5)]
    assert [t.number for t in shown if t.state == TrialState.PRUNED] == list(range(8, 13))
    below, _ = _split_trials(study, shown, 5)
    assert sorted(t.number for t in below) == list(range(13, 18))  # the learners stopped at epoch 3
    below, _ = _split_trials(study, stored, 5)  # Optuna's own: every complete trial first
    assert sorted(t.number for t in below) == list(range(5))
    assert [t.state for t in study.get_trials(deepcopy=False)] == [t.state for t in stored]  # stored ones untouched
    # Nothing misleads, or no full budget is known: Optuna's own split, the same objects.
    agrees = _misleading_first_epoch(first_agrees=True).get_trials(deepcopy=False)
    assert at_agreeing_rung(agrees, 27) is agrees
    assert at_agreeing_rung(stored, None) is stored


def test_where_a_rung_misleads_tpe_proposes_near_the_trials_that_learn():
    def near(sampler) -> tuple[int, int]:  # of 40 proposals: how many near the learners, near the flat ones
        study = _misleading_first_epoch()
        study.sampler = sampler
        xs = [study.ask({"x": DISTS["x"]}).params["x"] for _ in range(40)]
        return sum(abs(v - 0.8) < 0.1 for v in xs), sum(abs(v - 0.2) < 0.1 for v in xs)

    ours, theirs = near(WindowedTPE(seed=0, max_t=27)), near(optuna.samplers.TPESampler(seed=0))
    assert ours[0] >= 3 * ours[1] and theirs[1] >= 3 * theirs[0], (ours, theirs)
