"""MLflow for a search of several objectives or constraints (tuning.tracking calls it at the end of
each segment, on its worker thread): the child runs on the Pareto front tagged pareto=true, and the
tag taken off a child that a later segment pushed off the front; the front as the parent's
pareto.csv artifact; its size and hypervolume as the parent's metrics, with the reference point
as a tag. Every objective and constrained metric is a metric of each child run as it is for any
reported metric (tuning.tracking logs each epoch).

The front is a file artifact rather than mlflow's log_table: log_table appends to an artifact that
exists, so a resumed search would hold each segment's front, one after the other."""

from __future__ import annotations

from pathlib import Path

from tuning import objectives

TAG = "pareto"


def required(record) -> list[str]:
    """The objectives and constrained metrics of a run's record ([] for a run of one metric)."""
    declared = record.declaration or {}
    return list(dict.fromkeys([*(declared.get("objectives") or {}), *(declared.get("constraints") or {})]))


def log(worker, parent: str, children: dict, trials, record, results_dir: Path, step: int, now: int) -> None:
    """children: trial_id -> the tracker's _Child (run_id, tags as the server holds them); trials:
    the segment's trials table, ranked (tuning.objectives.annotate)."""
    from mlflow.entities import Metric

    from tuning.report import hypervolume as hv  # pandas and moocore: only at a tracked run's end

    g = hv.goals(record.declaration or {}, record.metric, record.mode)
    if g is None:
        return
    on = set(objectives.front(trials)["trial_id"]) if len(trials) else set()
    for tid, child in children.items():
        if tid in on and child.tags.get(TAG) != "true":
            worker.log(child.run_id, tags={TAG: "true"})
            child.tags[TAG] = "true"
        elif tid not in on and TAG in child.tags:  # on the front of an earlier segment only
            worker.client.delete_tag(child.run_id, TAG)
            del child.tags[TAG]
    metrics, tags = {"pareto_size": len(on)}, {}
    ref = hv.reference(trials, g, (record.declaration or {}).get("reference_point")) if g.several else None
    if ref is not None:
        metrics["hypervolume"] = hv.hypervolume(hv.counted(trials), g, ref)
        tags = {"hypervolume_reference": f"{ref.text()} ({ref.how})"}
    worker.log(parent, tags=tags, metrics=[Metric(k, float(v), now, step) for k, v in metrics.items()])
    if (Path(results_dir) / "pareto.csv").is_file():
        worker.client.log_artifact(parent, str(Path(results_dir) / "pareto.csv"))

