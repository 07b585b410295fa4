"""What a user coming from Optuna or Ray Tune reaches for (issue 40): a trainer that returns its
metrics, the median-stopping strategy, a grid over some parameters with the rest sampled, and a
progress line that stays honest. Real local Ray, cheap trainers."""

import json

import pandas as pd
import pytest

import tuning
from tuning import Space, Uniform, contract, run

from cli_helpers import refused


# ---------------------------------------------------------------- trainers a migrating user writes

def returns_score(*, lr, epochs, state=None, on_epoch):
    """Optuna's habit: takes what the contract asks, trains, returns its metrics, never reports."""
    return {"score": 1 - abs(lr - 0.3), "epochs_given": epochs}


def objective(*, lr):
    """An Optuna objective as it is: its parameters in, a number out."""
    return 1 - abs(lr - 0.3)


def returns_unless_told(*, lr, epochs, state=None, on_epoch, per_epoch=False):
    """Names on_epoch, so its source cannot tell; it returns all the same."""
    if per_epoch:
        on_epoch({"score": lr}, {"epoch": 1})
    return {"score": 1 - abs(lr - 0.3)}


def returns_nothing(*, lr, epochs, state=None, on_epoch, per_epoch=False):
    """Neither reports nor returns: the contract broken."""
    if per_epoch:
        on_epoch({"score": lr}, {"epoch": 1})


def _space(trainer, **kw) -> Space:
    settings = dict(params={"lr": Uniform(0.0, 1.0)}, trainer=trainer, metric="score", mode="max", num_samples=3,
                    max_epochs=4, reduction_factor=2, gpus_per_trial=0, strategy="random")
    return Space(**{**settings, **kw})


# ---------------------------------------------------------------- 1. trainers that return

def test_the_source_tells_how_a_trainer_reports():
    assert contract.reporting(returns_score) == "returns" and contract.reporting(objective) == "returns"
    assert contract.reporting(returns_unless_told) == "per_epoch"
    assert contract.reporting(returns_nothing) == "per_epoch"

    def raises(*, lr, epochs, state=None, on_epoch):
        raise ValueError("a bug")

    def passes_it_on(*, lr, **kwargs):
        return helper(lr=lr, **kwargs)  # noqa: F821: never called

    assert contract.reporting(raises) == "neither" and contract.reporting(passes_it_on) == "unknown"
    assert contract.reporting(len) == "unknown"
    # A trainer that returns its metrics need take neither epochs, state nor on_epoch.
    contract.check_signature(objective, "objective", ["lr"], [])


@pytest.mark.parametrize("strategy", ["asha", "median", "hyperband", "bohb", "adaptive"])
def test_a_returning_trainer_is_refused_by_strategies_that_judge_epochs(tmp_path, strategy):
    """Known from its source: refused before anything starts or is written, naming the fix."""
    with pytest.raises(tuning.TuningError) as err:
        tuning.search(returns_score, _space(returns_score), strategy=strategy, results_dir=tmp_path / "r")
    line = str(err.value)
    assert "returns its metrics once instead of calling on_epoch" in line and strategy in line
    assert "call on_epoch(metrics, state) after every epoch, or use strategy random, grid or tpe" in line
    assert "\n" not in line and not (tmp_path / "r").exists()


def test_a_trainer_that_neither_returns_nor_takes_on_epoch_is_told_both_ways_to_report(tmp_path):
    def silent(*, lr):
        pass

    with pytest.raises(tuning.TuningError) as err:
        tuning.search(silent, _space(silent), results_dir=tmp_path / "r")
    assert str(err.value).startswith("trainer ") and "neither returns its metrics nor takes on_epoch" in str(err.value)
    assert "return them as a dict such as {'loss': 0.5}, or take epochs, state and on_epoch" in str(err.value)
    assert not (tmp_path / "r").exists()


def test_tpes_refusal_of_a_returning_trainer_names_a_fix_other_than_tpe():
    line = contract.one_report_refusal("tpe", 4, "objective")
    assert "tpe runs Hyperband brackets up to max_epochs 4" in line
    assert "or use --max-epochs 1, or --strategy random or grid" in line and "or tpe" not in line
    assert contract.one_report_refusal("tpe", 1, "objective") is None


def test_the_cli_refuses_a_returning_trainer_under_asha_with_one_line(tmp_path, capsys):
    space = tmp_path / "space.py"
    space.write_text("from tuning import Space, Uniform\n"
                     "def train(*, lr, epochs, state=None, on_epoch):\n"
                     "    return {'score': lr}\n"
                     "SPACE = Space(params={'lr': Uniform(0.0, 1.0)}, trainer=train, metric='score', mode='max', "
                     "strategy='asha', gpus_per_trial=0)\n")
    refused(capsys, run.main, ["--space", str(space), "--results-dir", str(tmp_path / "r")],
            "returns its metrics once", "or use --strategy random, grid or tpe")
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("strategy", ["random", "tpe"])
def test_a_returned_dict_is_the_trials_one_report(ray_here, tmp_path, strategy):
    """Under random search and tpe (one bracket of full trials at one epoch) each trial is its return
    value: one report, the full budget, nothing stopped early, a best at the full budget; the trainer
    is still passed the declared epochs."""
    result = tuning.search(returns_score, _space(returns_score), strategy=strategy, results_dir=tmp_path / "r")
    assert result.status == "finished" and result.succeeded == 3
    trials = result.trials
    assert (trials["epochs"] == 1).all() and not trials["stopped_early"].any()
    assert (trials["epochs_given"] == 4).all()  # the declared budget, which it trains in one go
    assert result.best is not None and result.best.note == ""
    assert result.best.metrics["score"] == pytest.approx(trials["score"].max())
    record = json.loads((tmp_path / "r" / "run.json").read_text())
    assert record["max_epochs"] == 1 and record["trainer_epochs"] == 4
    assert "0 stopped early" in result.summary()
    assert (pd.read_csv(tmp_path / "r" / "epochs.csv")["training_iteration"] == 1).all()


def test_an_objective_that_returns_a_number(ray_here, tmp_path):
    result = tuning.search(objective, _space(objective), results_dir=tmp_path / "r")
    assert result.status == "finished" and result.succeeded == 3
    assert result.best.metrics["score"] == pytest.approx(result.trials["score"].max())


def test_a_trainer_found_returning_at_its_first_trial(ray_here, tmp_path):
    """Its source names on_epoch, so only its first trial tells: under random search its return value
    is its one report and the run becomes single-fidelity; under ASHA the run stops with one line."""
    result = tuning.search(returns_unless_told, _space(returns_unless_told), results_dir=tmp_path / "random")
    assert result.status == "finished" and result.succeeded == 3 and result.best.note == ""
    assert not result.trials["stopped_early"].any() and result.record.max_epochs == 1
    with pytest.raises(tuning.TuningError) as err:
        tuning.search(returns_unless_told, _space(returns_unless_told), strategy="asha",
                      results_dir=tmp_path / "asha")
    assert "returns its metrics once instead of calling on_epoch" in str(err.value)
    assert "asha stops and promotes trials" in str(err.value) and "\n" not in str(err.value)


def test_a_trainer_that_neither_reports_nor_returns(ray_here, tmp_path):
    with pytest.raises(tuning.TuningError) as err:
        tuning.search(returns_nothing, _space(returns_nothing), results_dir=tmp_path / "r")
    line = str(err.value)
    assert "returned nothing and never called on_epoch" in line
    assert "call on_epoch(metrics, state) after every epoch, or return the trial's metrics as a dict" in line
    assert json.loads((tmp_path / "r" / "run.json").read_text())["error"].startswith("trainer ")


# ---------------------------------------------------------------- 2. the median stopping rule

def slow_line(*, lr, epochs, state=None, on_epoch):
    """loss = lr, a little lower each epoch: the lower lr, the better at every epoch."""
    import time

    for e in range(state["epoch"] if state else 0, epochs):
        time.sleep(0.05)
        on_epoch({"loss": lr - 0.01 * e}, {"epoch": e + 1})


def test_median_is_a_strategy_beside_asha():
    from tuning import progress, spaces

    order = spaces.STRATEGIES
    assert order.index("median") == order.index("asha") + 1
    assert "median (random search + the median stopping rule)" in " ".join(run.build_parser().format_help().split())
    assert progress.planned_epochs("median", trials=8, max_epochs=4) == 32  # an upper bound


def test_the_median_rule_stops_trials_worse_than_the_median(ray_here, tmp_path):
    space = Space(params={"lr": Uniform(0.0, 1.0)}, trainer=slow_line, num_samples=10, max_epochs=4,
                  grace_period=1, gpus_per_trial=0)
    result = tuning.search(None, space, strategy="median", seed=3, results_dir=tmp_path / "r")
    trials = result.trials
    assert result.status == "finished" and result.succeeded == 10
    stopped = trials[trials["stopped_early"]]
    assert len(stopped) >= 2 and (stopped["epochs"] < 4).all()
    # The lowest lr is the best at every epoch: never below anyone's median, it runs its full budget.
    assert trials.loc[trials["lr"].idxmin(), "epochs"] == 4
    assert result.best.epochs == 4 and result.best.config["lr"] == pytest.approx(trials["lr"].min())


def test_the_median_rule_judges_a_resumed_run_against_earlier_results():
    """Tune saves no scheduler state: a resume rebuilds the rule's results from results.jsonl, so a
    trial that reports worse than the earlier trials' median at its epoch stops at once."""
    from ray.tune.schedulers import TrialScheduler

    from tuning.backend.strategies import Median

    def rows(loss):
        return [{"training_iteration": t, "loss": loss - 0.01 * t} for t in (1, 2)]

    fresh = Median(time_attr="training_iteration", metric="loss", mode="min", grace_period=1)
    class Trial:  # what the rule reads of Tune's trials: an id, hashed as itself
        def __init__(self, trial_id):
            self.trial_id = trial_id

    bad, good = Trial("d"), Trial("e")
    assert fresh.on_trial_result(None, bad, {"training_iteration": 1, "loss": 0.9}) == TrialScheduler.CONTINUE

    rule = Median(time_attr="training_iteration", metric="loss", mode="min", grace_period=1)
    assert rule.rebuild({"a": rows(0.1), "b": rows(0.2), "c": rows(0.3), "d": rows(0.8)[:1]}) == 7
    assert rule.on_trial_result(None, good, {"training_iteration": 1, "loss": 0.15}) == TrialScheduler.CONTINUE
    # d, resumed after its first epoch, has one history: its own earlier result is not another trial's.
    assert rule.on_trial_result(None, bad, {"training_iteration": 2, "loss": 0.77}) == TrialScheduler.STOP
    assert bad in rule._results and "d" not in rule._results and len(rule._results[bad]) == 2


# ---------------------------------------------------------------- 3. a grid over some parameters

def quick(*, batch_size, lr, wd, epochs, state=None, on_epoch):
    for e in range(state["epoch"] if state else 0, epochs):
        on_epoch({"loss": lr + wd + 1 / batch_size - 0.01 * e}, {"epoch": e + 1})


def _mixed(**kw) -> Space:
    return Space(params={"batch_size": tuning.Choice([32, 64, 128]), "lr": tuning.LogUniform(1e-3, 1e-1),
                         "wd": Uniform(0.0, 0.1)},
                 grid=["batch_size"], trainer=quick, num_samples=3, max_epochs=2, gpus_per_trial=0, **kw)


def _per_point(trials: pd.DataFrame, samples: int) -> None:
    """Every grid point has exactly `samples` trials, and no two trials drew the same rest."""
    assert trials.groupby("batch_size").size().to_dict() == {32: samples, 64: samples, 128: samples}
    assert trials["lr"].nunique() == len(trials) and trials["wd"].nunique() == len(trials)


@pytest.mark.parametrize("strategy", ["random", "median"])
def test_a_grid_over_some_parameters_the_rest_sampled(ray_here, tmp_path, strategy):
    result = tuning.search(None, _mixed(), strategy=strategy, seed=2, results_dir=tmp_path / "r")
    assert result.status == "finished" and len(result.trials) == 9
    _per_point(result.trials, 3)
    assert json.loads((tmp_path / "r" / "progress.json").read_text())["planned"] == 9 * 2
    record = json.loads((tmp_path / "r" / "run.json").read_text())
    assert record["declaration"]["grid"] == ["batch_size"]
    if strategy == "random":  # --add-samples 1: one more trial at every grid point
        more = tuning.resume(tmp_path / "r", add_samples=1)
        assert more.status == "finished" and len(more.trials) == 12
        _per_point(more.trials, 4)


@pytest.mark.parametrize("strategy", ["hyperband", "bohb", "adaptive", "tpe"])
def test_a_grid_over_some_parameters_is_refused_where_it_does_not_map(tmp_path, strategy):
    with pytest.raises(tuning.TuningError) as err:
        tuning.search(None, _mixed(), strategy=strategy, results_dir=tmp_path / "r")
    line = str(err.value)
    assert "grid=['batch_size']" in line and "use strategy random, asha or median" in line and "\n" not in line
    assert not (tmp_path / "r").exists()


def test_a_grid_declaration_that_cannot_work_is_refused():
    for grid, needle in ((["bs"], "grid= names 'bs', which is not a searched parameter"),
                         ("batch_size", "grid= takes a list of parameter names")):
        with pytest.raises(tuning.TuningError, match=needle):
            _mixed().replace(grid=grid)
    with pytest.raises(tuning.TuningError, match="exists only under when="):
        Space(params={"opt": tuning.Choice(["sgd", "adam"]), "m": Uniform(0.0, 0.9, when={"opt": "sgd"})},
              grid=["m"], trainer=quick)


def test_a_returning_objective_typed_at_a_prompt_is_single_fidelity():
    # Optuna's quick-start objective typed at `python` or `python -c`: no source to read, but a
    # function that is not handed on_epoch cannot report per epoch, so it returns.
    from tuning import contract

    namespace: dict = {}
    exec(compile("def objective(*, x):\n    return (x - 2) ** 2\n", "<stdin>", "exec"), namespace)
    objective = namespace["objective"]
    assert contract.reporting(objective) == "returns"
    contract.check_signature(objective, "objective", ["x"], [])  # refused before: "does not take epochs, ..."
