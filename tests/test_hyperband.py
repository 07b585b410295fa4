"""Hyperband and BOHB as the papers define them, on counting ones through real Ray (seconds a run):
brackets take exactly their quota and close, bands advance s_max ... 0, every trial passes the
rungs its bracket prescribes, and BOHB's model is given every rung result once, the full budget
included."""

import math
from collections import Counter

import pytest
from ray.tune.experiment import Trial
from ray.tune.schedulers import TrialScheduler

from tuning import backend, progress, spaces

MAX_T, ETA, BUDGET = 27, 3, 30  # rungs 1, 3, 9, 27; a band costs about 13 full evaluations
S_MAX = 3


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """One BOHB and one Hyperband run of 30 full evaluations each: into a third band."""
    import ray

    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    out = {}
    try:
        for strategy in ("bohb", "hyperband"):
            got, rec = {}, backend.recorder()
            spec = backend.RunSpec(
                space=spaces.load("counting_ones"), strategy=strategy, num_samples=BUDGET * MAX_T + 1,
                max_epochs=MAX_T, seed=0, cpus_per_trial=1, gpus_per_trial=0, source=None,
                results_dir=tmp_path_factory.mktemp(strategy), budget_iterations=BUDGET * MAX_T, progress=False,
                snapshot_every_step=False, callbacks=[rec], on_search=lambda a, s, got=got: got.update(search=a, hb=s))
            backend.run(spec)
            out[strategy] = {**got, "rows": rec.rows, "starts": dict(rec.starts)}
    finally:
        ray.shutdown()
    return out


def _n0(s: int) -> int:  # the Hyperband paper's bracket sizes, as Ray computes them
    return math.ceil((S_MAX + 1) / (s + 1) * ETA ** s)


def _reached(rows: list[dict]) -> dict[str, int]:
    out = {}
    for r in rows:
        out[r["trial_id"]] = max(out.get(r["trial_id"], 0), r["training_iteration"])
    return out


@pytest.mark.parametrize("strategy", ["bohb", "hyperband"])
def test_brackets_take_their_quota_in_paper_order_and_bands_advance(runs, strategy):
    brackets = runs[strategy]["hb"].brackets()
    assert len({b["band"] for b in brackets}) >= 3, brackets  # several bands, not one swallowing all
    for i, b in enumerate(brackets):
        assert b["s"] == S_MAX - i % (S_MAX + 1), "brackets open largest first within a band"
        assert b["band"] == i // (S_MAX + 1)
        assert (b["n0"], b["r0"]) == (_n0(b["s"]), MAX_T // ETA ** b["s"])
        assert len(b["trials"]) <= b["n0"]
        if i < len(brackets) - 1:  # every bracket but the newest was closed at its quota
            assert len(b["trials"]) == b["n0"], b
    trials = [t for b in brackets for t in b["trials"]]
    assert len(trials) == len(set(trials))  # a trial is in one bracket


@pytest.mark.parametrize("strategy", ["bohb", "hyperband"])
def test_trials_pass_the_rungs_successive_halving_prescribes(runs, strategy):
    reached = _reached(runs[strategy]["rows"])
    first_band = [b for b in runs[strategy]["hb"].brackets() if b["band"] == 0]  # the budget cut none of it
    assert len(first_band) == S_MAX + 1
    for b in first_band:
        n, r = b["n0"], b["r0"]
        while r <= MAX_T:  # n trials reach rung r; the best ceil(n / eta) go on to r * eta
            assert sum(reached[t] >= r for t in b["trials"]) == n, (b, r)
            n, r = math.ceil(n / ETA), r * ETA
        # nobody stops between rungs: every trial ends on a rung of its bracket
        assert {reached[t] for t in b["trials"]} <= {b["r0"] * ETA ** k for k in range(b["s"] + 1)}


@pytest.mark.parametrize("strategy", ["bohb", "hyperband"])
def test_trials_are_made_as_they_start_and_start_in_bracket_order(runs, strategy):
    """Tune keeps up to 200 trials of a random generator pending, each in a bracket a band or more
    ahead, and starts them in no fixed order; Hyperband's random proposals now come one at a time,
    as BOHB's: at most one trial waits, and trials start in the order the brackets took them."""
    given = [t for b in runs[strategy]["hb"].brackets() for t in b["trials"]]
    starts = runs[strategy]["starts"]
    assert len(given) - len(starts) <= 1, f"{len(given) - len(starts)} trials made and never started"
    assert sorted(starts, key=starts.get) == [t for t in given if t in starts]


def test_bohb_model_gets_every_rung_result_once_full_budget_included(runs):
    bohb = runs["bohb"]
    observed = bohb["search"].searcher.observed
    assert len(observed) == len(set(observed)), "a (trial, budget) pair reached the model twice"
    rungs = {}
    for b in bohb["hb"].brackets():
        for t in b["trials"]:
            rungs[t] = {b["r0"] * ETA ** k for k in range(b["s"] + 1)}
    expected = {(r["trial_id"], r["training_iteration"]) for r in bohb["rows"]
                if r["training_iteration"] in rungs[r["trial_id"]]}
    assert set(observed) == expected
    budgets = Counter(b for _, b in observed)
    assert set(budgets) == {1, 3, 9, 27} and budgets[MAX_T] >= 5, budgets
    # HpBandSter's model holds the full-budget results: the rung Tune withheld from it before.
    model = bohb["search"].searcher.bohber
    assert len(model.losses[MAX_T]) == budgets[MAX_T]
    # Its KDE sits on the largest budget with enough points for one (2 (d + 1) with d = 16).
    enough = [b for b, losses in model.losses.items() if len(losses) >= 2 * (16 + 1)]
    assert max(model.kde_models) == max(enough)


class _Controller:
    """What a scheduler asks of Tune's controller, as Ray's own scheduler tests stand it in."""

    def __init__(self, trials):
        self.trials, self.stopped, self.search_alg = trials, [], None

    def get_trials(self):
        return self.trials

    def stop_trial(self, trial):
        self.stopped.append(trial)
        trial.set_status(Trial.TERMINATED)


def test_a_rung_whose_last_trials_pause_together_is_decided_at_the_next_free_slot():
    from tuning.backend.hyperband import PaperHyperBand

    hb = PaperHyperBand(time_attr="training_iteration", metric="loss", mode="min", max_t=3, reduction_factor=3)
    a, b, c, other = trials = [Trial("steady", config={}, stub=True) for _ in range(4)]
    controller = _Controller(trials)
    for t in trials:  # a, b, c fill the first bracket (3 trials from 1 iteration); `other` opens the next
        hb.on_trial_add(controller, t)
        t.set_status(Trial.RUNNING)
    assert hb.on_trial_result(controller, c, {"training_iteration": 1, "loss": 0.5}) == TrialScheduler.PAUSE
    c.set_status(Trial.PAUSED)
    # a and b reach the rung together: each sees the other still running (its pause in flight).
    assert hb.on_trial_result(controller, a, {"training_iteration": 1, "loss": 0.1}) == TrialScheduler.PAUSE
    assert hb.on_trial_result(controller, b, {"training_iteration": 1, "loss": 0.9}) == TrialScheduler.PAUSE
    a.set_status(Trial.PAUSED)
    b.set_status(Trial.PAUSED)
    # `other` keeps a worker busy, so Ray's own fallback (process when nothing runs) never comes.
    assert hb.choose_trial_to_run(controller) is a  # the rung is decided: the best goes on
    assert sorted(map(id, controller.stopped)) == sorted([id(b), id(c)])  # the others are stopped


def test_a_bracket_ends_at_max_t_whatever_max_t_is():
    """The paper's rungs are max_t * eta^(i - s): Ray's int(r * eta) from an r0 rounded down gave
    1, 2, 4, 8 for max_t 10 (the Space's default) at eta 2, so no trial trained the full budget."""
    assert progress.bracket_rungs(1, 3, 10, 2) == [1, 3, 5, 10]
    assert progress.bracket_rungs(2, 2, 10, 2) == [2, 5, 10] and progress.bracket_rungs(10, 0, 10, 2) == [10]
    assert progress.bracket_rungs(1, 3, 27, 3) == [1, 3, 9, 27]  # powers of eta: as before
    assert progress.bracket_rungs(1, 1, 3, 2) == [1, 3]
    # the plan counts those rungs: 8 trials to 1, 4 on to 3, 2 to 5, 1 to 10; then 6 to 2, 3 to 5, 2 to 10
    assert progress.planned_epochs("hyperband", trials=14, max_epochs=10, reduction_factor=2) == 25 + 31


@pytest.mark.parametrize("strategy", ["hyperband", pytest.param("bohb", marks=pytest.mark.slow),
                                      pytest.param("adaptive", marks=pytest.mark.slow)])
def test_trials_train_to_max_t_where_it_is_no_power_of_eta(ray_here, tmp_path, strategy):
    import tuning

    space = spaces.load("counting_ones").replace(max_epochs=10, reduction_factor=2, num_samples=14)
    result = tuning.search(None, space, strategy=strategy, seed=0, results_dir=tmp_path / "r")
    epochs = result.trials["epochs"]
    assert set(epochs) <= {1, 2, 3, 5, 10} and (epochs == 10).sum() >= 2, sorted(epochs)
    assert result.best.epochs == 10 and result.best.note == ""


def test_a_trial_stopped_at_a_rung_stays_stopped_in_the_saved_experiment(ray_here, tmp_path):
    """Tune marks no PAUSED trial it stops for the snapshot, so a rung's losers, stopped while paused,
    stayed PAUSED in the saved experiment: a resume (--add-samples, make test-all) trained them on."""
    import json

    import tuning

    space = spaces.load("counting_ones").replace(max_epochs=9, reduction_factor=3, num_samples=9)
    folder = tmp_path / "r"
    first = tuning.search(None, space, strategy="hyperband", seed=0, results_dir=folder)
    state = json.loads(max(folder.glob("tune/**/experiment_state-*.json")).read_text())
    assert {json.loads(t[0])["status"] for t in state["trial_data"]} == {"TERMINATED"}
    assert (first.trials["epochs"] < 9).sum() >= 3  # rung losers, the trials this is about


@pytest.mark.slow  # make test-all; the default suite checks the saved statuses above
def test_adding_trials_never_trains_a_rung_loser_on(ray_here, tmp_path):
    import tuning

    space = spaces.load("counting_ones").replace(max_epochs=9, reduction_factor=3, num_samples=9)
    before = tuning.search(None, space, strategy="hyperband", seed=0, results_dir=tmp_path / "r").trials
    after = tuning.resume(tmp_path / "r", add_samples=1).trials.set_index("trial_id")["epochs"]
    assert len(after) == 10 and after[before["trial_id"]].tolist() == before["epochs"].tolist()
