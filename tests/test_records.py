"""The typed records that cross modules: a run's (run.json) and a trial's. No Ray: the real runs that
fill them are checked where they run (test_smoke, test_replay)."""

import json

import pytest

from tuning import record, results

# run.json as the versions before its parts were typed wrote it (and as this one still writes it),
# with a key this version does not know.
OLD = {
    "space": "cifar_asha", "strategy": "asha", "seed": 0, "num_samples": 4, "max_epochs": 2,
    "resources_per_trial": {"cpu": 1, "gpu": 0.5},
    "data": {"kind": "synthetic", "root": "/data/synthetic"},
    "segments": [{"started": 1000.0, "wall_s": 30.5, "ended": "interrupted"},
                 {"started": 2000.0, "wall_s": None, "ended": None}],
    "best": {"trial_id": "ab_00001", "lr": 0.003, "loss": 0.9, "accuracy": 0.61, "epochs": 2, "test_accuracy": 0.6},
    "mlflow": {"uri": "file:///m", "experiment": "e", "default": False, "experiment_id": "7",
               "parent_run_id": "p1"},
    "a_later_key": {"kept": True},
}


def test_an_earlier_run_json_reads_into_typed_parts_and_writes_back_the_same(tmp_path):
    (tmp_path / record.FILE).write_text(json.dumps(OLD))
    rec = record.read(tmp_path)
    assert rec.resources_per_trial == record.Resources(cpu=1, gpu=0.5)
    assert rec.data == record.DataOrigin(kind="synthetic", root="/data/synthetic")
    assert rec.segments == [record.Segment(1000.0, 30.5, "interrupted"), record.Segment(2000.0)]
    assert rec.best.trial_id == "ab_00001" and rec.best.epochs == 2 and rec.best.row["test_accuracy"] == 0.6
    assert rec.mlflow.parent_run_id == "p1" and rec.mlflow.default is False
    rec.write(tmp_path)
    again = json.loads((tmp_path / record.FILE).read_text())
    assert {k: again[k] for k in OLD} == OLD  # the plain JSON it was: a resume by either version reads it


def test_a_planned_record_has_no_parts_it_has_not_reached():
    rec = record.RunRecord.from_json({"space": "s", "strategy": "random", "seed": 0, "num_samples": 1,
                                      "max_epochs": 1, "data": {}, "mlflow": {}, "resources_per_trial": {}})
    assert rec.data is None and rec.mlflow is None and rec.best is None and rec.segments == []
    assert rec.resources_per_trial == record.Resources()  # one CPU, no GPU: what a trial gets by default
    assert rec.to_json()["data"] is None


def test_the_tables_read_a_trials_record_not_a_dict():
    rec = results.TrialRecord(trial_id="t1", status="ERROR", config={"lr": 0.1}, failures=2, error="ValueError: x",
                              error_file="errors/t1.txt", rows=[{"training_iteration": 1, "loss": 2.0}])
    row = results.trials_table([rec], ["lr"], strategy="random", max_epochs=3).iloc[0]
    assert (row["trial_id"], row["status"], row["failures"], row["error_file"]) == ("t1", "ERROR", 2, "errors/t1.txt")
    with pytest.raises(AttributeError):  # a plain dict is no longer a trial's record
        results.trials_table([{"trial_id": "t1", "status": "ERROR", "config": {}, "rows": []}], [],
                             strategy="random", max_epochs=3)
