"""The report of one tuning.run (tuning.report.runreport): from a real counting-ones run through the CLI
(seconds), from a live run through tuning.backend with a 1 s cadence, and from trial records
covering every way a trial can end."""

import io
import json
import logging
import logging.handlers
import os
import re
import shutil
import time
from pathlib import Path

import matplotlib.image
import numpy as np
import pandas as pd
import pytest

from conftest import run_cli
from report_helpers import assert_renders_in_chromium, dom_in_chromium, needs_chromium
from tuning import progress, results, spacejson, spaces
from tuning.report import comparison as report
from tuning.report import fanova, runplots, runreport
from tuning.record import RunRecord
from tuning.results import TrialRecord

TESTS = Path(__file__).resolve().parent
SAMPLES = 12  # >= fanova.MIN_IMPORTANCE_TRIALS, so the importance table is there


@pytest.fixture(scope="module")
def co_run(tmp_path_factory):
    """A real tuning.run on the 16-parameter counting-ones benchmark: random search, 3 epochs."""
    out = tmp_path_factory.mktemp("co") / "results"
    proc = run_cli("--space", "counting_ones", "--num-samples", str(SAMPLES), "--max-epochs", "3",
                   "--results-dir", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc, out


def _copy(run_dir: Path, tmp_path: Path) -> Path:
    """The run's files without its report, to render into without touching the shared run."""
    d = tmp_path / "run"
    shutil.copytree(run_dir, d, ignore=shutil.ignore_patterns("report*", "tune"))
    return d


def _colours(png: bytes) -> int:
    img = matplotlib.image.imread(io.BytesIO(png), format="png")[..., :3]
    rgb = (img.reshape(-1, 3) * 255).astype(np.int64)
    return len(np.unique(rgb[:, 0] << 16 | rgb[:, 1] << 8 | rgb[:, 2]))


def test_the_run_ends_with_a_report_and_said_where_it_would_be(co_run):
    proc, out = co_run
    page = out / "report.html"
    first_table = proc.stdout.index("== Status ==")
    assert proc.stdout.index(f"Live report: {page}") < first_table  # printed when the run starts
    assert f"Report: {page}" in proc.stdout and "on_progress failed" not in proc.stderr  # the live writes too
    html, md = page.read_text(), (out / "report.md").read_text()
    assert 'http-equiv="refresh"' not in html and "LIVE" not in html  # finished: it stays put
    assert "Status: finished" in md
    figures = [out / runreport.FIGURES[k] for k in ("curves", "best", "params", "parallel")]
    for f in figures:  # 16 parameters: parallel coordinates too
        assert f"]({f.name})" in md
        assert f.stat().st_size > 10_000 and _colours(f.read_bytes()) > 100, f
    assert html.count("data:image/png;base64,") == len(figures)
    assert 'src="http' not in html and "<link" not in html  # self-contained


def test_report_lists_every_trial_and_configurations_that_differ(co_run):
    _, out = co_run
    md = (out / "report.md").read_text()
    trials = pd.read_csv(out / "trials.csv")
    section = md[md.index("## Trials"):md.index("## Provenance")]
    rows = [line for line in section.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert len(rows) == SAMPLES and all(t in section for t in trials["trial_id"])
    params = [f"x{i}" for i in range(8)]
    assert len(trials[params].drop_duplicates()) == SAMPLES and trials["loss"].nunique() > 3
    # The figures draw those differing configurations: a point per trial in each parameter's
    # panel, at different places, and a learning curve per trial.
    trials, epochs, plan = runreport.load(out)
    decls, metric, mode = runreport.searched(plan)
    fig = runplots.params_vs_metric(trials, decls, metric=metric, label="loss")
    x0 = fig.axes[list(decls).index("x0")]
    points = np.concatenate([c.get_offsets() for c in x0.collections])
    assert len(points) == SAMPLES and len(np.unique(points[:, 0])) == SAMPLES
    curves = runplots.learning_curves(trials, epochs, metric=metric, mode=mode, label="loss").axes[0].lines
    assert len({tuple(line.get_ydata()) for line in curves}) == SAMPLES
    assert "python -m tuning.run --space counting_ones --num-samples 12" in md  # provenance: the command
    assert "| git_commit |" in md and "| versions.ray |" in md
    assert "SYNTHETIC DATA" not in md  # a benchmark, not generated CIFAR images


def test_importance_is_fanova_over_every_parameter(co_run):
    _, out = co_run
    md = (out / "report.md").read_text()
    section = md[md.index("## Hyperparameter importance"):md.index("## Trials")]
    assert "fANOVA (Optuna" in section and f"over the {SAMPLES} trials" in section
    assert "| parameter | importance |" in section
    trials, _, plan = runreport.load(out)
    decls, metric, mode = runreport.searched(plan)
    imp, _ = fanova.importance(trials, decls, metric=metric, mode=mode, max_epochs=3)
    assert set(imp["parameter"]) == {f"c{i}" for i in range(8)} | {f"x{i}" for i in range(8)}
    assert imp["importance"].sum() == pytest.approx(1, abs=0.01) and imp["importance"].nunique() > 3
    assert all(f"| {p} | {v} |" in section for p, v in zip(imp["parameter"], imp["importance"]))


def test_too_few_full_budget_trials_give_no_importance_but_say_why(co_run):
    trials, _, plan = runreport.load(co_run[1])
    decls, metric, mode = runreport.searched(plan)
    imp, note = fanova.importance(trials.head(3), decls, metric=metric, mode=mode, max_epochs=3)
    assert imp is None and note.startswith("Not computed: 3 trial(s) ran their full budget")
    assert "needs at least 8" in note


def test_with_few_full_budget_trials_importance_is_at_the_last_epoch_enough_reached(co_run):
    # As under ASHA: 3 trials ran the budget of 3 epochs, the other 9 were stopped after epoch 2.
    trials, epochs, plan = runreport.load(co_run[1])
    decls, metric, mode = runreport.searched(plan)
    stopped = trials["trial_id"].iloc[3:]
    trials.loc[trials["trial_id"].isin(stopped), "stopped_early"] = True
    epochs = epochs[~(epochs["trial_id"].isin(stopped) & (epochs["training_iteration"] > 2))]
    imp, note = fanova.importance(trials, decls, metric=metric, mode=mode, max_epochs=3, epochs=epochs)
    assert f"over the {SAMPLES} trials that reached epoch 2: only 3 ran the full budget of 3 epochs" in note
    assert set(imp["parameter"]) == set(decls) and imp["importance"].sum() == pytest.approx(1, abs=0.01)
    # The values at epoch 2, not the final ones: the same study built by hand gives the same shares.
    at2 = epochs[epochs["training_iteration"] == 2].assign(status="TERMINATED", stopped_early=False)
    by_hand, _ = fanova.importance(at2, decls, metric=metric, mode=mode, max_epochs=2)
    assert imp.set_index("parameter")["importance"].to_dict() == by_hand.set_index("parameter")["importance"].to_dict()
    # Too few at every epoch before the budget: still not computed, and said why.
    few = epochs[epochs["trial_id"].isin(trials["trial_id"].head(5))]
    assert fanova.importance(trials.head(5).assign(stopped_early=True), decls, metric=metric, mode=mode,
                                max_epochs=3, epochs=few)[0] is None


def test_cli_regenerates_a_run_dir(co_run, tmp_path, capsys):
    d = _copy(co_run[1], tmp_path)
    assert not (d / "report.html").exists()
    assert report.main([str(d)]) == 0
    assert f"Report: {d / 'report.html'}" in capsys.readouterr().out
    md = (d / "report.md").read_text()
    assert all(t in md for t in pd.read_csv(d / "trials.csv")["trial_id"])
    assert all((d / f).exists() for f in runreport.FIGURES.values())


def test_a_killed_run_without_tables_gets_its_report_from_results_jsonl(co_run, tmp_path, capsys):
    # What a stale live page tells the user to run: the run was killed before writing its tables.
    d = _copy(co_run[1], tmp_path)
    for f in [*d.glob("trials.*"), *d.glob("epochs.*")]:
        f.unlink()
    plan = json.loads((d / "run.json").read_text())
    (d / "run.json").write_text(json.dumps({**plan, "status": "running"}))
    rows = [json.loads(line) for line in (d / results.ROWS_FILE).read_text().splitlines()]
    cut = rows[0]["trial_id"]  # cut off after epoch 2 of 3
    rows = [r for r in rows if not (r["trial_id"] == cut and r["training_iteration"] == 3)]
    (d / results.ROWS_FILE).write_text("".join(json.dumps(r) + "\n" for r in rows))
    progress.write(d / progress.PROGRESS_FILE, progress.estimate(
        done=0, done_at_start=0, planned=9, elapsed_s=0.0, epoch_s=[], at_once=1, best=None),
        "Progress: 0/9 epochs (0 %), 0 s elapsed, estimating", finished=False)
    assert report.main([str(d)]) == 0, capsys.readouterr().err
    md = (d / "report.md").read_text()
    assert "Status: stopped before writing its tables (killed or crashed; run.json still says 'running')" in md
    # A progress line from early in the run said 0 epochs done: the report says it is stale.
    assert "The last progress line the run wrote, before it stopped: Progress: 0/" in md
    assert f"; {len(rows)} epochs are recorded" in md
    section = md[md.index("## Trials"):md.index("## Provenance")]
    lines = [line for line in section.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert len(lines) == SAMPLES and all(t in section for t in {r["trial_id"] for r in rows})
    short = [line for line in lines if "short of its budget when the run stopped" in line]
    assert len(short) == 1 and cut in short[0]
    assert sum("full budget" in line for line in lines) == SAMPLES - 1
    assert all((d / f).exists() for f in runreport.FIGURES.values())


@pytest.mark.parametrize("damage", ["deleted", "parquet-unreadable", "both-garbage"])
def test_a_finished_runs_lost_or_damaged_table_is_made_again(co_run, tmp_path, capsys, caplog, damage):
    """With its trials tables deleted, the report said to --resume a run that had finished (refused);
    with trials.parquet unreadable, it failed though trials.csv beside it was whole; with both
    epochs files garbage, the CSV parsed as a table of one column and the report exited 2."""
    d = _copy(co_run[1], tmp_path)
    if damage == "deleted":
        for f in d.glob("trials.*"):
            f.unlink()
    elif damage == "parquet-unreadable":
        (d / "trials.parquet").write_bytes(b"junk")
    else:
        for f in d.glob("epochs.*"):
            f.write_text("garbage\n")
    assert report.main([str(d)]) == 0, capsys.readouterr().err
    if damage == "both-garbage":
        assert any("epochs table in" in r.getMessage() and "rebuilt from results.jsonl" in r.getMessage()
                   for r in caplog.records)
    md = (d / "report.md").read_text()
    assert "Status: finished" in md and all(t in md for t in pd.read_csv(co_run[1] / "trials.csv")["trial_id"])


@pytest.mark.parametrize("setup", ["no-trials", "bad-run-json", "empty-dir"])
def test_bad_run_dir_exits_2_with_one_line(co_run, tmp_path, capsys, setup):
    d = _copy(co_run[1], tmp_path)
    if setup == "no-trials":  # a run that has not written its tables, nor a result
        for f in [*d.glob("trials.*"), d / results.ROWS_FILE]:
            f.unlink()
    elif setup == "bad-run-json":
        (d / "run.json").write_text("{not json")
    else:
        shutil.rmtree(d)
        d.mkdir()
    capsys.readouterr()
    assert report.main([str(d)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err and err.startswith("tuning.report: error:")
    assert not (d / "report.html").exists()


@needs_chromium
def test_run_report_renders_in_headless_chromium(co_run, tmp_path):
    assert_renders_in_chromium(co_run[1] / "report.html", tmp_path)


# ---------------------------------------------------------------- every way a trial ends

def _rows(losses, *, resumed_at=0, diverged_at=None, t0=1_000_000):
    rows = []
    for i, loss in enumerate(losses, start=1):
        bad = diverged_at is not None and i >= diverged_at
        rows.append({"training_iteration": i, "epoch": i, "loss": 99.0 if bad else loss, "accuracy": 1 - loss / 3,
                     "diverged": bad, "restored_from": resumed_at if i > resumed_at else 0,
                     "time_total_s": 10.0 * i, "timestamp": t0 + 10 * i})
    return rows


def _record(tid, status, lr, batch, rows, error=None):
    return TrialRecord(trial_id=tid, status=status, config={"lr": lr, "batch_size": batch}, rows=rows, error=error)


RECORDS = [
    _record("full", "TERMINATED", 3e-3, 128, _rows([1.8, 1.2, 0.9, 0.7])),
    _record("early", "TERMINATED", 1e-4, 64, [{**_rows([2.2])[0], "done": True}]),  # Tune marks a STOP's result
    _record("resumed", "TERMINATED", 1e-3, 256, _rows([2.0, 1.5, 1.1, 0.8], resumed_at=1)),
    _record("diverged", "TERMINATED", 9e-3, 512, _rows([2.1, 2.5], diverged_at=2)),
    _record("failed", "ERROR", 5e-3, 64, _rows([2.0]), error="ValueError: boom"),
    _record("running", "RUNNING", 2e-4, 128, _rows([2.3, 2.0])),
]


def _plan(status="running"):
    space = spaces.load("cifar_asha")
    return RunRecord(space="cifar_asha", strategy="asha", seed=0, num_samples=6, max_epochs=4,
                     argv=["--space", "cifar_asha"], params=spacejson.declarations(space), metric="loss", mode="min",
                     status=status, data={"kind": "synthetic", "root": "/data/synthetic"},
                     started="1970-01-12T13:46:40+0000")


def test_every_way_a_trial_ends_is_told_apart(tmp_path):
    out = runreport.write_from_records(tmp_path, RECORDS, _plan(), live=True)
    md = out["markdown"].read_text()
    assert ("6 trials: 2 reached the full budget, 1 stopped early by the scheduler, 1 diverged (metric turned "
            "NaN/inf after its last point), 1 failed (training raised), 1 still running or waiting to start or "
            "resume; 1 paused and resumed") in md
    for outcome in ("| full budget |", "| stopped early |", "| diverged |", "| failed: ValueError: boom |",
                    "| running |", "full budget; paused, resumed at epoch 1"):
        assert outcome in md, outcome
    assert "SYNTHETIC DATA" in md and 'http-equiv="refresh"' in out["html"].read_text()
    section = md[md.index("## Hyperparameter importance"):md.index("## Trials")]
    assert "Not computed: 2 trial(s) ran their full budget" in section  # the resumed one counts, no other
    assert "| parameter | importance |" not in section and out["importance"] is None

    params = list(runreport.searched(_plan())[0])
    trials = results.trials_table(RECORDS, params, strategy="asha", max_epochs=4)
    fig = runplots.learning_curves(trials, results.epochs_table(RECORDS, params), metric="loss", mode="min",
                                   label="validation loss")
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert len(legend) == 6  # five endings and the resume marker, each once
    loss_ax = fig.axes[0]
    assert max(max(line.get_ydata(), default=0) for line in loss_ax.lines) < 99  # the stand-in is not drawn
    assert {line.get_linestyle() for line in loss_ax.lines} >= {"-", "--", "-.", ":"}


def test_live_page_reloads_and_says_so_the_final_one_does_not(tmp_path):
    live = runreport.write_from_records(tmp_path, RECORDS, _plan(), live=True)["html"].read_text()
    assert f'<meta http-equiv="refresh" content="{runreport.RELOAD_S}">' in live and "LIVE: the run is going" in live
    assert f"location.reload();}},{runreport.RELOAD_S * 1000})" in live  # what reloads it where scripts run
    final = runreport.write_from_records(tmp_path, RECORDS, _plan("finished"), live=False)["html"].read_text()
    assert "http-equiv" not in final and "LIVE" not in final and "Status: finished" in final


@needs_chromium
def test_a_live_page_its_run_left_behind_stops_reloading_and_says_so(tmp_path, monkeypatch):
    # A run killed or crashed never writes its final report: its last live page must not go on
    # saying LIVE and reloading in a browser for ever.
    (tmp_path / "fresh").mkdir(), (tmp_path / "old").mkdir()
    fresh = runreport.write_from_records(tmp_path / "fresh", RECORDS, _plan(), live=True)["html"]
    now = time.time()
    monkeypatch.setattr(runreport.time, "time", lambda: now - 3600)  # written an hour ago
    old = runreport.write_from_records(tmp_path / "old", RECORDS, _plan(), live=True)["html"]
    monkeypatch.undo()
    dom = dom_in_chromium(fresh, tmp_path)
    assert "LIVE: the run is going" in dom and 'id="stale"' not in dom
    before = time.time()
    dom = dom_in_chromium(old, tmp_path)
    after = time.time()
    assert "LIVE: the run is going" not in dom and 'id="stale"' in dom
    # The page counts from when it was written to when Chromium runs its script: an hour and the
    # time this test took since, which on a loaded machine can pass 30 s and round to 61.
    said = re.search(r"NOT LIVE ANY MORE: this page was last rewritten (\d+) min ago", dom)
    written = now - 3600
    assert said and round((before - written) / 60) <= int(said.group(1)) <= round((after - written) / 60), dom
    assert f"python -m tuning.report {tmp_path / 'old'} writes the final report" in dom


def test_log_scale_parameters_get_a_log_axis(tmp_path):
    params, _, _ = runreport.searched(_plan())
    trials = results.trials_table(RECORDS, list(params), strategy="asha", max_epochs=4)
    fig = runplots.params_vs_metric(trials, params, metric="loss", label="validation loss")
    lr, batch = fig.axes[:2]
    assert lr.get_xscale() == "log" and batch.get_xscale() == "linear"
    assert [t.get_text() for t in batch.get_xticklabels()] == ["64", "128", "256", "512"]


# ---------------------------------------------------------------- live, through tuning.backend

@pytest.fixture(scope="module")
def live_run(tmp_path_factory):
    """tuning.backend.run with a 1 s progress cadence; the hook raises on its second call."""
    import ray

    from tuning import backend

    tmp = tmp_path_factory.mktemp("live")
    space = spaces.Space(params={"lr": spaces.LogUniform(0.01, 1.0)}, trainer="faulty:steady", strategy="random",
                         num_samples=4, max_epochs=5, gpus_per_trial=0, fixed={"sleep_s": 0.5}, name="steady")
    calls = []

    def on_progress(records):
        calls.append({"at": time.monotonic(), "records": records})
        if len(calls) == 2:
            raise RuntimeError("the report could not be written")

    logged = logging.handlers.BufferingHandler(capacity=10_000)
    logging.getLogger("tuning.backend").addHandler(logged)
    before = os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(TESTS), before])  # Ray's workers import tests/faulty.py
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        spec = backend.RunSpec(space=space, strategy="random", num_samples=4, max_epochs=5, seed=0,
                               cpus_per_trial=1, gpus_per_trial=0, source=None, results_dir=tmp, progress=False,
                               progress_every_s=1, on_progress=on_progress)
        records, _ = backend.run(spec)
    finally:
        ray.shutdown()
        os.environ["PYTHONPATH"] = before
        logging.getLogger("tuning.backend").removeHandler(logged)
    return calls, records, space, [r.getMessage() for r in logged.buffer]


def test_progress_comes_at_most_every_period_with_trial_records(live_run):
    calls, records, _, _ = live_run
    assert len(calls) >= 3  # the run lasts about 5 s: one at the start, then about one a second
    gaps = np.diff([c["at"] for c in calls])
    assert (gaps >= 1.0).all(), gaps
    assert all(r.status == "TERMINATED" and len(r.rows) == 5 for r in records)
    mid = [r for c in calls for r in c["records"] if r.status == "RUNNING" and 0 < len(r.rows) < 5]
    assert mid, "no call saw a trial half-way"
    assert all(isinstance(r, TrialRecord) for c in calls for r in c["records"])  # what run() returns


def test_a_failing_progress_hook_is_logged_once_and_the_run_goes_on(live_run):
    calls, records, _, logged = live_run
    assert len(calls) > 2 and len(records) == 4  # called again after it raised; every trial finished
    failed = [m for m in logged if "on_progress failed" in m]
    assert len(failed) == 1 and "RuntimeError: the report could not be written" in failed[0]


def test_live_report_from_records_seen_mid_run(live_run, tmp_path):
    calls, _, space, _ = live_run
    mid = next(c["records"] for c in calls if any(r.status == "RUNNING" and r.rows for r in c["records"]))
    plan = RunRecord(space="steady", strategy="random", seed=0, num_samples=4, max_epochs=5,
                     params=spacejson.declarations(space), metric="loss", mode="min", status="running",
                     data={"kind": "trainer"})
    out = runreport.write_from_records(tmp_path, mid, plan, live=True)
    md, html = out["markdown"].read_text(), out["html"].read_text()
    assert 'http-equiv="refresh"' in html and "LIVE: the run is going" in md
    assert "still running or waiting to start or resume" in md and (tmp_path / runreport.FIGURES["curves"]).exists()
