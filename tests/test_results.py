"""The files of a results folder read back by the one reader every report and the replay use: no Ray."""

import math
import subprocess
import sys

import pandas as pd
import pytest

from conftest import ROOT
from tuning import record, results, spacejson, spaces
from tuning.compare import recorded as replay
from tuning.report import analysis, runreport

# An id pandas would read from CSV as the number 1.234e+570 (inf) if it were not read as text.
EPOCHS = pd.DataFrame({"trial_id": ["1234e567", "00001"] * 2, "training_iteration": [1, 1, 2, 2],
                       "x": [0.25, 0.75] * 2, "loss": [0.1 + 1e-17, 0.3, 0.05, 0.2]})


def _run(folder):
    """A finished run of one Uniform parameter: run.json and both tables, as tuning.run writes them."""
    folder.mkdir()
    record.RunRecord(space="tiny", strategy="random", seed=0, num_samples=2, max_epochs=2, trainer="mine:train",
                     params=spacejson.declarations({"x": spaces.Uniform(0.0, 1.0)}), status="finished").write(folder)
    trials = EPOCHS[EPOCHS["training_iteration"] == 2].assign(status="TERMINATED", epochs=2)
    results.write_tables(folder, trials, EPOCHS)
    return folder


def test_the_report_of_a_run_still_going_is_refused_not_rebuilt_as_a_killed_ones(tmp_path):
    """tuning.report on a live run wrote 'stopped before writing its tables (killed or crashed)'
    over the live page, which then stopped reloading until the run wrote it again."""
    from tuning import inputs

    folder = _run(tmp_path / "run")
    held = inputs.lock(folder)  # as tuning.run holds it while it runs
    try:
        with pytest.raises(analysis.ReportError, match="is a run still going"):
            runreport.regenerate(folder)
    finally:
        held.release()
    assert not inputs.held(folder)  # once it has ended, or died: the OS drops the lock


def test_a_table_reads_back_the_same_from_parquet_and_from_csv_ids_as_text(tmp_path):
    folder = _run(tmp_path / "run")
    from_parquet = results.read_table(folder, "epochs")
    (folder / "epochs.parquet").unlink()
    from_csv = results.read_table(folder, "epochs")
    pd.testing.assert_frame_equal(from_parquet, EPOCHS)
    pd.testing.assert_frame_equal(from_csv, EPOCHS)  # the ids as written, the floats to the last bit
    assert results.read_table(folder, "nothing") is None


def _damage(folder):
    # A damaged parquet with no CSV beside it to read instead (one beside it is read: below).
    for name in ("epochs", "runs"):
        (folder / f"{name}.parquet").write_bytes(b"PAR1 cut short\nby a full disk")
        (folder / f"{name}.csv").unlink(missing_ok=True)


@pytest.mark.parametrize("reader,error", [(runreport.load, analysis.ReportError),
                                          (analysis.load, analysis.ReportError),
                                          (replay.read, replay.ReplayError)])
def test_a_damaged_table_is_one_line_naming_it_in_every_reader(tmp_path, reader, error):
    folder = _run(tmp_path / "run")
    EPOCHS.to_csv(folder / "runs.csv", index=False)  # a comparison's table, for analysis.load
    (folder / "experiment.json").write_text("{}")
    _damage(folder)
    with pytest.raises(error) as caught:
        reader(str(folder) if reader is replay.read else folder)
    message = str(caught.value)
    assert len(message.splitlines()) == 1 and "cannot read" in message and str(folder) in message


def test_a_damaged_parquet_beside_a_whole_csv_reads_the_csv(tmp_path):
    # tuning.report refused a run whose trials.parquet was unreadable though trials.csv beside it was whole.
    folder = _run(tmp_path / "run")
    (folder / "epochs.parquet").write_bytes(b"PAR1 cut short")
    pd.testing.assert_frame_equal(results.read_table(folder, "epochs"), EPOCHS)


def test_files_meant_for_committing_name_paths_inside_the_working_folder_relatively(tmp_path, monkeypatch):
    # Written from inside tmp_path, as from a checkout: /tmp/pytest-.../ would name nothing elsewhere.
    monkeypatch.chdir(tmp_path)
    from types import SimpleNamespace

    from tuning.compare import runner as compare

    out, data = tmp_path / "out", SimpleNamespace(kind="synthetic", root=str(tmp_path / "data" / "synthetic"))
    out.mkdir()
    exp = compare.Experiment(space="counting_ones", budget=1, seeds=(0,))
    compare.write_records(out, "x", exp, spaces.load("counting_ones"), data, smoke=True, budget=1, max_t=1,
                           seeds=[0], argv=[str(tmp_path / "exp.py"), f"--out={out}", "--storage-path", "s3://b/x"])
    prov = (out / "provenance.json").read_text()
    assert str(tmp_path) not in prov + (out / "experiment.json").read_text()
    assert '"command": "python -m tuning.compare exp.py --out=out --storage-path s3://b/x"' in prov
    assert '"root": "data/synthetic"' in prov

    run = _run(tmp_path / "run")  # and a run's report, from a run.json that keeps its paths whole
    trials = [results.TrialRecord(trial_id=tid, config={"x": x}, status="TERMINATED",
                                 rows=[{"training_iteration": t, "loss": x / t} for t in (1, 2)])
              for tid, x in (("a", 0.2), ("b", 0.6))]
    results.write_tables(run, results.trials_table(trials, ["x"], strategy="random", max_epochs=2),
                         results.epochs_table(trials, ["x"]))
    rec = record.read(run)
    rec.argv, rec.data = ["--results-dir", str(run), "--data-dir", "/elsewhere/data"], record.DataOrigin(**data.__dict__)
    rec.write(run)
    md = runreport.regenerate(run)["markdown"].read_text()
    assert str(tmp_path) not in md and "| data.root | data/synthetic |" in md
    assert "--results-dir run --data-dir /elsewhere/data" in md  # outside the working folder: as it was


def test_the_summary_counts_one_epoch_in_the_singular(tmp_path):
    from tuning.searchresult import Best, SearchResult

    rec = record.RunRecord(space="tiny", strategy="tpe", seed=0, num_samples=1, max_epochs=1, status="finished")
    trials = pd.DataFrame({"trial_id": ["a"], "epochs": [1], "status": ["TERMINATED"], "diverged": [False]})
    best = Best(trial_id="a", config={"x": 0.5}, metrics={"loss": 0.25}, epochs=1)
    text = SearchResult(tmp_path, "finished", trials, pd.DataFrame(), best, rec, None).summary()
    assert "loss 0.25" in text and "after 1 epoch\n" in text + "\n" and "1 epochs" not in text, text


def test_an_empty_front_is_put_down_to_the_constraints_only_where_a_trial_reached_the_full_budget(tmp_path):
    """Ten trials that all crashed at their first epoch were summed up as 'no trial met the
    constraints', which sent the user to loosen a bound that had nothing to do with it."""
    from tuning.searchresult import SearchResult

    rec = record.RunRecord(space="tiny", strategy="random", seed=0, num_samples=2, max_epochs=2, status="finished")
    crashed = pd.DataFrame({"trial_id": ["a", "b"], "epochs": [0, 0], "status": ["ERROR", "ERROR"], "error": ["boom"] * 2,
                            "feasible": [False, False], "diverged": [False, False], "loss": [0.5, 0.4]})
    over = crashed.assign(epochs=[2, 2], status=["TERMINATED", "TERMINATED"])
    for trials, why in ((crashed, "no trial reached the full budget with every objective measured"),
                        (over, "no trial met the constraints at the full budget")):
        text = SearchResult(tmp_path, "finished", trials, pd.DataFrame(), None, rec, None, pareto=trials.iloc[0:0]).summary()
        assert f"Pareto front: empty ({why})" in text


def test_a_full_budget_trial_without_its_second_objective_is_named_off_the_front(tmp_path):
    """A NaN latency (a trainer's timer that failed) left the trial off the front without a word."""
    from tuning import objectives
    from tuning.searchresult import SearchResult

    rec = record.RunRecord(space="tiny", strategy="random", seed=0, num_samples=3, max_epochs=2, status="finished",
                           declaration={"objectives": {"loss": "min", "latency_ms": "min"}})
    trials = pd.DataFrame({"trial_id": ["a", "b", "c"], "epochs": [2, 2, 1], "status": ["TERMINATED"] * 3,
                           "diverged": [False] * 3, "loss": [0.3, 0.2, 0.1], "latency_ms": [1.0, math.nan, math.nan]})
    front = trials.iloc[:1].assign(pareto_rank=1)
    text = SearchResult(tmp_path, "finished", trials, pd.DataFrame(), None, rec, None, pareto=front).summary()
    # b reached the full budget and is off; c stopped short, which is no news
    assert "1 trial(s) at the full budget left off the front: their latency_ms is missing or not a number" in text
    assert objectives.unmeasured(trials.assign(latency_ms=1.0), rec.declaration["objectives"], 2) == {}
    text = SearchResult(tmp_path, "finished", trials.iloc[1:], pd.DataFrame(), None, rec, None,
                        pareto=front.iloc[0:0]).summary()
    assert "Pareto front: empty (no trial reached the full budget with every objective measured)" in text
    assert "left off the front: their latency_ms" in text


@pytest.mark.parametrize("status", ["finished", "interrupted", "time budget spent"])
def test_the_summary_of_a_run_without_a_best_trial_says_why_and_how_to_go_on(tmp_path, status):
    from tuning.searchresult import SearchResult

    tmp_path = tmp_path / "my results"  # pasted into a shell, quoted

    rec = record.RunRecord(space="tiny", strategy="random", seed=0, num_samples=2, max_epochs=2, status=status,
                           time_budget_s=5.0, time_used_s=5.2)
    unstarted = pd.DataFrame({"trial_id": ["a", "b"], "epochs": [0, 0], "status": ["PENDING", "PENDING"]})
    text = SearchResult(tmp_path, status, unstarted, pd.DataFrame(), None, rec, None).summary()
    stopped = "No trial reported a result before the run stopped."
    if status == "finished":  # then the trainer reported nothing usable
        assert stopped not in text and "No trial reported a usable loss." in text
        assert "--resume" not in text
    else:
        assert stopped in text and "usable" not in text
        hint = f"tuning.resume({str(tmp_path)!r}" + (", time_budget=LONGER)" if status == "time budget spent" else ")")
        assert f"python -m tuning.run --resume '{tmp_path}'" in text and hint in text
        # A trainer defined in a script or notebook: only Python can hand it back.
        rec.trainer = "__main__:train"
        text = SearchResult(tmp_path, status, unstarted, pd.DataFrame(), None, rec, None).summary()
        assert "--resume" not in text and f"tuning.resume({str(tmp_path)!r}, trainer=train" in text
        # A run on a cluster goes on on the cluster: without --address a resume started a local Ray.
        rec.trainer, rec.address = "cifar", "10.0.0.5:6379"
        text = SearchResult(tmp_path, status, unstarted, pd.DataFrame(), None, rec, None).summary()
        assert f"python -m tuning.run --resume '{tmp_path}' --address 10.0.0.5:6379" in text
        assert f"tuning.resume({str(tmp_path)!r}, address='10.0.0.5:6379'" in text


def test_the_machine_is_named_without_importing_torch():
    """provenance.json's machine, written by every comparison: naming the GPUs must not import torch
    (2 s) in a driver whose trainer never does (a table benchmark)."""
    code = ("import sys; from tuning import provenance; m = provenance.machine()\n"
            "assert isinstance(m['gpus'], list) and m['cpus'] and m['ray'], m\nprint('torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "False"


def test_a_csv_table_cut_short_mid_row_leaves_its_last_row_out_with_a_warning(tmp_path, caplog):
    """epochs.csv cut off mid-file (a copy that stopped) was read as it was: its last row with a loss
    cut mid-digit, or empty cells, as if measured."""
    folder = _run(tmp_path / "run")
    (folder / "epochs.parquet").unlink()
    text = (folder / "epochs.csv").read_text()
    (folder / "epochs.csv").write_text(text[:-5])  # the last row loses its last characters and its newline
    with caplog.at_level("WARNING", logger="tuning.resultfiles"):
        cut = results.read_table(folder, "epochs")
    pd.testing.assert_frame_equal(cut, EPOCHS.iloc[:-1])
    assert "epochs.csv ends mid-row" in caplog.text and "last row is left out" in caplog.text
    caplog.clear()
    (folder / "epochs.csv").write_text(text)  # whole: every row, no word
    pd.testing.assert_frame_equal(results.read_table(folder, "epochs"), EPOCHS)
    assert "mid-row" not in caplog.text


def test_a_trial_the_run_stopped_before_its_first_result_did_not_end_itself():
    """A run stopped at another trial's unusable result called a trial that never reported one
    'ended by its trainer' (ended_itself), and the report counted it so."""
    trials = [results.TrialRecord(trial_id="a", config={"x": 0.1}, status="TERMINATED", rows=[]),
              results.TrialRecord(trial_id="b", config={"x": 0.2}, status="TERMINATED",
                                  rows=[{"training_iteration": 1, "loss": 0.5}])]
    table = results.trials_table(trials, ["x"], strategy="random", max_epochs=3).set_index("trial_id")
    assert table.loc["a", "ended_itself"] == False and table.loc["a", "epochs"] == 0  # noqa: E712
    assert table.loc["b", "ended_itself"] == True  # noqa: E712  (its trainer returned after one epoch of 3)
