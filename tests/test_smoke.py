"""The real thing, end to end: `python -m tuning.run --space cifar_asha --smoke` through real Ray."""

import json
import re

import pandas as pd
import pytest

from conftest import run_cli


@pytest.fixture(scope="module")
def asha_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("asha")
    proc = run_cli("--space", "cifar_asha", "--smoke", "--data-dir", str(tmp / "data"),
                   "--results-dir", str(tmp / "results"))
    return proc, tmp / "results"


def test_smoke_run_succeeds(asha_run):
    proc, _ = asha_run
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_cli_reporter_table_is_what_the_user_sees(asha_run):
    out = asha_run[0].stdout
    assert "== Status ==" in out
    # The last table, once trials have reported: the metric columns appear with the first result.
    header = [line for line in out.splitlines() if line.startswith("| Trial name")][-1]
    for col in ("status", "lr", "batch_size", "loss", "accuracy", "training_iteration"):
        assert col in header
    assert "AIR_VERBOSITY is set, ignoring passed-in ProgressReporter" not in asha_run[0].stderr


def test_ray_noise_does_not_bury_the_table(asha_run):
    both = asha_run[0].stdout + asha_run[0].stderr
    for noise in ("Token authentication is enabled", "Checkpoint successfully created",
                  "sigterm_handler", "Traceback", "Total run time:"):
        assert noise not in both


def test_prints_best_trial_data_kind_and_results_path(asha_run):
    proc, results = asha_run
    assert "Best trial" in proc.stdout and "validation loss" in proc.stdout
    assert "test loss" in proc.stdout
    assert "SYNTHETIC" in proc.stdout and "SYNTHETIC" in proc.stderr  # at start and in the summary
    assert str(results) in proc.stdout


def test_trials_table(asha_run):
    _, results = asha_run
    trials = pd.read_csv(results / "trials.csv")
    assert len(trials) == 8 and trials["trial_id"].is_unique
    for col in ("trial_id", "strategy", "lr", "batch_size", "loss", "accuracy", "best_loss",
                "best_accuracy", "epochs", "status", "wall_time_s"):
        assert col in trials.columns
    assert (trials["status"] == "TERMINATED").all()
    assert trials["lr"].between(1e-4, 1e-2).all()
    parquet = pd.read_parquet(results / "trials.parquet")
    assert list(parquet.columns) == list(trials.columns)
    cols = ["trial_id", "lr", "batch_size", "loss", "epochs"]
    pd.testing.assert_frame_equal(trials[cols], parquet[cols], check_dtype=False)


def test_asha_stopped_a_trial_early(asha_run):
    trials = pd.read_csv(asha_run[1] / "trials.csv")
    assert (trials["epochs"] < 2).any() and trials["stopped_early"].any()
    assert (trials["epochs"] == 2).any()


def test_epochs_table_holds_the_learning_curves(asha_run):
    _, results = asha_run
    epochs = pd.read_csv(results / "epochs.csv")
    trials = pd.read_csv(results / "trials.csv")
    assert set(epochs["trial_id"]) == set(trials["trial_id"])
    for tid, curve in epochs.groupby("trial_id"):
        assert curve["training_iteration"].tolist() == list(range(1, len(curve) + 1))
        assert len(curve) == trials.set_index("trial_id").loc[tid, "epochs"]
    assert epochs["loss"].notna().all()


def test_cifar_trials_train_in_processes_forked_from_the_nodes_server(asha_run):
    # tuning.trial.forkserver: the process that trained is not the trial's Ray process, and trials that
    # followed one another in a reused Ray process trained in its one kept child.
    epochs = pd.read_csv(asha_run[1] / "epochs.csv")
    assert epochs["trainer_pid"].notna().all() and (epochs["trainer_pid"] != epochs["pid"]).all()
    assert epochs.groupby("pid")["trainer_pid"].nunique().max() == 1 < epochs["trial_id"].nunique()


def test_tune_per_trial_loggers_are_off_without_the_flag(asha_run):
    # They cost time with many short trials (docs/performance.md); --tune-logs turns them on.
    _, results = asha_run
    assert list((results / "tune").glob("*/checkpoint_*"))
    for pattern in ("*/progress.csv", "*/result.json", "*/events.out.tfevents.*"):
        assert not list((results / "tune").glob(pattern)), pattern


def test_best_config_and_run_record(asha_run):
    _, results = asha_run
    best = json.loads((results / "best_config.json").read_text())
    trials = pd.read_csv(results / "trials.csv")
    assert best["trial_id"] == trials.loc[trials["loss"].idxmin(), "trial_id"]
    assert set(best["config"]) == {"lr", "batch_size"} and 0 <= best["test_accuracy"] <= 1
    run = json.loads((results / "run.json").read_text())
    assert run["status"] == "finished" and run["space"] == "cifar_asha" and run["seed"] == 0
    assert run["data"]["kind"] == "synthetic"
    for pkg in ("torch", "ray", "hpbandster", "ConfigSpace"):
        assert run["versions"][pkg]
    assert "git_commit" in run
    from tuning import record

    rec = record.read(results)  # its parts typed, as every reader of run.json gets them
    assert rec.data.kind == "synthetic" and rec.resources_per_trial.cpu == run["resources_per_trial"]["cpu"]
    assert rec.best.trial_id == best["trial_id"] and rec.best.row["test_accuracy"] == best["test_accuracy"]
    assert [s.ended for s in rec.segments] == ["finished"] and rec.segments[0].wall_s > 0


def test_run_ends_with_its_report(asha_run):
    proc, results = asha_run
    page = results / "report.html"
    assert proc.stdout.index(f"Live report: {page}") < proc.stdout.index("== Status ==")
    html, md = page.read_text(), (results / "report.md").read_text()
    assert "SYNTHETIC DATA" in md and "SYNTHETIC DATA" in html  # the banner
    assert "http-equiv" not in html and "Status: finished" in md
    best = json.loads((results / "best_config.json").read_text())
    assert f"| test_accuracy | {best['test_accuracy']:.4g} |" in md
    for name in ("report-curves.png", "report-best-so-far.png", "report-params.png"):
        assert (results / name).stat().st_size > 10_000 and f"]({name})" in md
    assert html.count("data:image/png;base64,") == 3  # two parameters: no parallel coordinates
    # ASHA lets too few of the 8 trials run the full 2 epochs for fANOVA, but all 8 ran epoch 1: the
    # importances are those at epoch 1, and the report says so.
    section = md[md.index("## Hyperparameter importance"):md.index("## Trials")]
    assert "Not computed" not in section and "| parameter | importance |" in section
    assert "over the 8 trials that reached epoch 1: only" in section
    assert "| lr |" in section and "| batch_size |" in section


def test_progress_tables_come_about_every_30_s(asha_run):
    out = asha_run[0].stdout
    tables = out.count("== Status ==")
    elapsed = re.findall(r"running for (\d+):(\d+):(\d+)", out)[-1]
    seconds = int(elapsed[0]) * 3600 + int(elapsed[1]) * 60 + int(elapsed[2])
    # One at the start, then at most one per 30 s, and the final one (Tune's default: every 5 s).
    assert 2 <= tables <= seconds / 30 + 2, (tables, seconds)


def test_smoke_gets_a_local_ray_of_smoke_cpus_on_any_machine(monkeypatch):
    # Which trials ASHA stops depends on how many run at once (tuning.cli.SMOKE_CPUS); 1 here,
    # so that the check tells on a 2-core machine too.
    import ray

    from tuning import cli, session, spaces
    from tuning.record import RunRecord

    monkeypatch.setattr(cli, "SMOKE_CPUS", 1)
    assert not ray.is_initialized()
    try:
        record = RunRecord(space="counting_ones", strategy="asha", seed=0, num_samples=8, max_epochs=2,
                           smoke={"num_samples": 8})
        session.start(spaces.load("counting_ones"), record, address=None, worker_logs=False)
        assert ray.cluster_resources()["CPU"] == 1
    finally:
        ray.shutdown()
