"""--max-concurrent-trials / search(max_concurrent_trials=N): what a user coming from Ray Tune's
max_concurrent_trials or ConcurrencyLimiter asks for, under every strategy, synchronous Hyperband
brackets included (a trial paused at its rung frees its slot). Real local Ray of 2 CPUs, a trainer
that logs when each of its epochs ran."""

import json

import pytest

import tuning
from tuning import Space, Uniform, run

from cli_helpers import refused


def _space(log, strategy, **kw) -> Space:
    # Epochs long beside a trial's start (about a second here), so that without a limit trials overlap.
    settings = dict(params={"lr": Uniform(0.0, 1.0)}, trainer="user_trainers:logs_its_epochs",
                    fixed={"log": str(log), "pause": 0.6},
                    metric="loss", mode="min", num_samples=4, max_epochs=3, reduction_factor=3, cpus_per_trial=1,
                    gpus_per_trial=0, strategy=strategy)
    return Space(**{**settings, **kw})


def epochs_at_once(log) -> int:
    """The most epochs of different trials that ran at the same moment."""
    spans = [tuple(map(float, line.split()[1:])) for line in open(log)]
    events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    now = most = 0
    for _, step in events:
        now += step
        most = max(most, now)
    return most


@pytest.mark.parametrize("strategy", ["random", "hyperband", "bohb", pytest.param("tpe", marks=pytest.mark.slow)])
def test_one_trial_at_a_time_under_every_kind_of_search(ray_here, tmp_path, strategy):
    """Two CPUs, a CPU a trial: without the limit two trials train at once (the last test); with
    it, never two epochs at the same moment, and every trial still ends (no bracket waits for
    ever on a slot its own paused trials hold)."""
    log = tmp_path / "epochs.log"
    result = tuning.search(space=_space(log, strategy), results_dir=tmp_path / "r", max_concurrent_trials=1)
    assert result.status == "finished" and len(result.trials) >= 4
    assert (result.trials["status"] == "TERMINATED").all()
    assert epochs_at_once(log) == 1
    assert json.loads((tmp_path / "r" / "run.json").read_text())["max_concurrent_trials"] == 1
    md = (tmp_path / "r" / "report.md").read_text()
    assert "| max_concurrent_trials | 1 |" in md and "| fixed.log |" in md  # the report's provenance
    assert "| space | a Space built in Python, without name=" in md  # the row was empty


# Hyperband's first rung of 3 trials is an epoch each, shorter than the next trial's start: at this
# size its trials seldom overlap anyway, so its limited run above shows that no bracket waits for ever.
@pytest.mark.parametrize("strategy", ["random", *(pytest.param(s, marks=pytest.mark.slow) for s in ("bohb", "tpe"))])
def test_without_the_limit_two_trials_train_at_once(ray_here, tmp_path, strategy):
    log = tmp_path / "epochs.log"
    tuning.search(space=_space(log, strategy), results_dir=tmp_path / "r")
    assert epochs_at_once(log) == 2


def test_a_resume_keeps_the_limit(ray_here, tmp_path):
    # Random search: every trial trains its 3 epochs, so two trials allowed at once do overlap (under
    # ASHA the new trials were often stopped after an epoch each and never overlapped on a busy machine).
    log = tmp_path / "epochs.log"
    tuning.search(space=_space(log, "random", num_samples=2), results_dir=tmp_path / "r", max_concurrent_trials=1)
    log.write_text("")
    more = tuning.resume(tmp_path / "r", add_samples=2)
    assert len(more.trials) == 4 and epochs_at_once(log) == 1
    # A new limit on a resume: the run moved to more machines, say.
    log.write_text("")
    wider = tuning.resume(tmp_path / "r", add_samples=4, max_concurrent_trials=2)
    assert len(wider.trials) == 8 and epochs_at_once(log) == 2
    assert json.loads((tmp_path / "r" / "run.json").read_text())["max_concurrent_trials"] == 2


@pytest.mark.parametrize("strategy", ["random", pytest.param("hyperband", marks=pytest.mark.slow)])
def test_a_resume_starts_no_more_than_its_limit(ray_here, tmp_path, strategy):
    """Tune restores every unfinished trial PENDING and starts each it can: a resumed run once ran
    them all at once (two here, on two CPUs), whatever the limit. Those past it are held, and handed
    back as slots free, Hyperband's too (its own choice resumes only the trials its rungs promote)."""
    log = tmp_path / "epochs.log"
    # Random search makes its four trials at once: however few had run when the budget was spent (on
    # a loaded machine, none), the resume restores four unfinished trials, two CPUs' worth at least.
    first = tuning.search(space=_space(log, strategy), results_dir=tmp_path / "r", time_budget=3)
    assert first.status == "time budget spent"
    log.write_text("")
    done = tuning.resume(tmp_path / "r", time_budget=600, max_concurrent_trials=1)
    assert done.status == "finished" and (done.trials["status"] == "TERMINATED").all()
    assert epochs_at_once(log) == 1


@pytest.mark.parametrize("value", [0, 1.5, "2"])
def test_a_limit_that_is_no_positive_whole_number_is_refused(tmp_path, value):
    with pytest.raises(tuning.TuningError) as err:
        tuning.search(space=_space(tmp_path / "log", "random"), results_dir=tmp_path / "r", max_concurrent_trials=value)
    assert str(err.value).startswith("max_concurrent_trials must be") and not (tmp_path / "r").exists()


def test_the_cli_refuses_a_limit_of_zero(tmp_path, capsys):
    refused(capsys, run.main, ["--space", "cifar_asha", "--max-concurrent-trials", "0",
                               "--results-dir", str(tmp_path / "r")], "--max-concurrent-trials")
    assert not (tmp_path / "r").exists()
