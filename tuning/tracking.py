"""MLflow tracking (``tuning.run --mlflow [URI]``, docs/tracking.md): a search as one parent run
with a child run per trial, nested; a comparison (``tuning.compare --mlflow``) as one parent with
a run per strategy x seed. What is logged lives here; where (the URI, checked) and the thread that
sends it, in tuning.tracking_store.

Everything is logged from the driver by one background thread: trials, on any node, never talk
to the tracking server, and a server that is slow or down never holds up the search. A sync that
fails is retried; what could not be logged is said once in the summary, and the results dir is
written as ever. What a child run already holds is asked of the server (its metric histories'
last step), never kept in a local ledger: a driver killed by SIGKILL remembers nothing, and a
reply lost in a timeout may have been written all the same. So a resume, or a retry after a
failure, logs each epoch once.

mlflow is imported only when tracking is on (``pip install 'tuning[mlflow]'``).
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

from tuning import provenance, results, tracking_front
from tuning import record as records
from tuning.record import MlflowLink
from tuning.results import TrialRecord
from tuning.tracking_store import Target, Worker, batches, setting, short

log = logging.getLogger(__name__)


@dataclass
class _Child:
    run_id: str
    step: int = 0  # the last epoch the server holds
    params: bool = False  # its config is logged
    status: str = "RUNNING"
    tags: dict = field(default_factory=dict)


_STATUS = {"TERMINATED": "FINISHED", "ERROR": "FAILED"}  # Tune's status -> MLflow's; the others run on
_ENDS = {"finished": "FINISHED", "interrupted": "KILLED", "time budget spent": "KILLED"}  # a segment's; else FAILED


class Tracker:
    """A search's parent run and its trials' child runs, kept in step by a Worker. The driver calls
    start, update (with the statuses, every 30 s) and finish; none of them raises."""

    def __init__(self, target: Target, record, results_dir: Path, params: list[str]):
        self.target, self.record, self.dir, self.params = target, record, Path(results_dir), params
        # Logged as metrics even where a name is a diagnostic's (a bound on peak_rss_mb, say).
        self.ranked = set(tracking_front.required(record))
        self.experiment_id = self.parent = self.worker = None
        self.known: dict[str, _Child] | None = None  # None: ask the server before the next log
        self.statuses, self.rows, self.offset, self.final_ok = {}, {}, 0, False

    def start(self) -> None:
        """Opens the parent run before the first trial, so that run.json holds its id."""
        self.worker = Worker("mlflow", self.target.uri, idle=self._sync, every=setting("EVERY_S"),
                             on_error=self._forget)
        try:
            self._open_parent()  # here, before the thread starts: two parents must never race
        except Exception as exc:  # down at this moment: the worker's first sync tries again
            log.warning("MLflow: the parent run could not be opened (%s); trying again in the background",
                        short(exc))
        self.worker.start()

    def update(self, records: list[TrialRecord]) -> None:
        self.statuses = {r.trial_id: r.status for r in records}

    def finish(self, records: list[TrialRecord], trials, best, status: str) -> list[str]:
        """The last sync (final statuses, the parent's results and artifacts), waited for at most
        FLUSH_S; the summary's lines."""
        self.worker.submit(lambda: self._final(records, trials, best, status))
        self.worker.close(setting("FLUSH_S"))
        return self.target.lines("search", "a child run per trial", self.parent, self.final_ok,
                                 self.worker.first_error)

    def abandon(self) -> None:
        self.worker.close(0)

    def _forget(self) -> None:
        self.known = None  # after a failure the server may hold more than was noted

    def _open_parent(self) -> None:
        w, rec, mine = self.worker, self.record, self.record.mlflow or MlflowLink()
        self.experiment_id = w.experiment(self.target)
        same = ((mine.uri == self.target.uri or (mine.default and self.target.default))
                and mine.experiment == self.target.experiment)
        parent = mine.parent_run_id if same else None
        if parent is not None and not _exists(w.client, parent):  # the store was replaced or the run deleted
            log.warning("MLflow: run %s, this search's parent, is not in %s: a new parent run logs the whole search",
                        parent, self.target.uri)
            parent = None
        if parent is None and "'" not in str(self.dir):  # opened by a driver killed before run.json said so?
            found = w.client.search_runs([self.experiment_id], f"tags.`tuning.results_dir` = '{self.dir}' and "
                                         f"tags.`tuning.started` = '{rec.started}'", max_results=1)
            parent = found[0].info.run_id if found else None
        if parent is None:
            parent = w.client.create_run(self.experiment_id, run_name=self.dir.name, tags={
                "tuning.results_dir": str(self.dir), "tuning.started": rec.started or "", "tuning.kind": "search"
            }).info.run_id
            w.log(parent, params=_search_params(rec))
        else:
            w.client.update_run(parent, status="RUNNING")
        w.log(parent, tags={"git_commit": rec.git_commit or "unknown", "data": rec.data.kind if rec.data else "",
                            "tuning.status": "running", "resumes": rec.resumes, "extensions": len(rec.extensions),
                            "num_samples_now": rec.num_samples})
        self.parent = parent
        rec.mlflow = MlflowLink(uri=self.target.uri, experiment=self.target.experiment,
                                        default=self.target.default, experiment_id=self.experiment_id,
                                        parent_run_id=parent)

    def _ask_server(self) -> dict[str, _Child]:
        """Each trial's child run, found by its trial_id tag; its last epoch, the highest step of its
        metric histories."""
        known, c = {}, self.worker.client
        for run in self.worker.children(self.experiment_id, self.parent):
            tid = run.data.tags.get("trial_id")
            if tid and tid not in known:
                steps = [m.step for k in run.data.metrics for m in c.get_metric_history(run.info.run_id, k)]
                known[tid] = _Child(run.info.run_id, max(steps, default=0), bool(run.data.params), run.info.status,
                                    dict(run.data.tags))
        return known

    def _read_rows(self) -> dict[str, list[dict]]:
        """The new whole lines of results.jsonl, where the driver appends every result as it arrives."""
        try:
            with open(self.dir / results.ROWS_FILE, "rb") as f:
                f.seek(self.offset)
                chunk = f.read()
        except OSError:
            return self.rows
        whole = chunk[:chunk.rfind(b"\n") + 1]
        self.offset += len(whole)
        for line in whole.decode("utf-8", "replace").splitlines():
            try:
                row = json.loads(line)
                self.rows.setdefault(row["trial_id"], []).append(row)
            except (ValueError, KeyError, TypeError):
                pass  # a line cut short by a crash: the tables skip it too
        return self.rows

    def _sync(self, records: list[TrialRecord] | None = None, table: dict | None = None) -> None:
        """Every trial's child run brought up to date: from results.jsonl while the run goes, from
        the final records (and the trials table's verdicts) at the end of a segment."""
        if self.parent is None:
            self._open_parent()
        if self.known is None:
            self.known = self._ask_server()
        if records is None:
            rows, statuses = self._read_rows(), dict(self.statuses)
            configs = {t: r[-1].get("config") or {} for t, r in rows.items()}
        else:  # a trial still waiting to start (a run cut short) gets its child run once it runs
            records = [r for r in records if r.rows or r.status != "PENDING"]
            rows, statuses = {r.trial_id: r.rows for r in records}, {r.trial_id: r.status for r in records}
            configs = {r.trial_id: r.config for r in records}
        for tid in sorted(set(rows) | {t for t, s in statuses.items() if s != "PENDING"}):
            if tid in configs:
                self._sync_trial(tid, rows.get(tid, []), configs[tid], statuses.get(tid), (table or {}).get(tid),
                                 final=records is not None)

    def _sync_trial(self, tid: str, rows: list[dict], config: dict, status: str | None, row: dict | None,
                    final: bool) -> None:
        from mlflow.entities import Metric

        w, child = self.worker, self.known.get(tid)
        starts, stamps = _times_ms(rows)
        if child is None:
            run = w.client.create_run(self.experiment_id, start_time=min(starts, default=None), run_name=tid,
                                      tags={"mlflow.parentRunId": self.parent, "trial_id": tid})
            child = self.known[tid] = _Child(run.info.run_id, tags={"trial_id": tid})
        epochs = {}
        for r in rows:  # an epoch's first report: one trained again after a resume is not sent again
            if results.is_number(r.get("training_iteration")) and r["training_iteration"] > child.step:
                epochs.setdefault(int(r["training_iteration"]), r)
        metrics = [Metric(k, float(v), round(1000 * (r.get("ended_at") or r.get("timestamp", time.time()))), step)
                   for step, r in sorted(epochs.items()) for k, v in r.items()
                   if results.is_number(v) and (results.is_metric(k) or k in self.ranked)]
        tags = {"status": status} if status else {}
        if row is not None:  # the trials table's verdict, at the end of the segment
            tags.update({"stopped_early": str(bool(row.get("stopped_early"))).lower(),
                         "resumed_at": _text(row.get("resumed_at")) or "none", "failures": str(row.get("failures", 0)),
                         "recomputed_epochs": str(row.get("recomputed_epochs", 0)),
                         **({"failure": row["error"]} if _text(row.get("error")) else {})})
        tags = {k: v for k, v in tags.items() if child.tags.get(k) != v}
        w.log(child.run_id, params=None if child.params else {p: v for p, v in config.items() if p in self.params},
              tags=tags)
        child.params = True
        child.tags.update(tags)
        for batch in batches(metrics):
            w.client.log_batch(child.run_id, metrics=batch)
            child.step = batch[-1].step
        want = _STATUS.get(status, "KILLED" if final else "RUNNING") if status else child.status
        if want == child.status:
            return
        if want == "RUNNING":
            w.client.update_run(child.run_id, status="RUNNING")
        else:  # ended when its last epoch did, not when the driver heard (every 30 s)
            w.client.set_terminated(child.run_id, status=want, end_time=max(stamps) if stamps and want != "KILLED"
                                    else None)
        child.status = want

    def _final(self, records, trials, best, status: str) -> None:
        from mlflow.entities import Metric

        self._sync(records, {r["trial_id"]: r for r in trials.to_dict("records")} if len(trials) else {})
        rec, now = self.record, int(time.time() * 1000)
        metrics = {k: v for k, v in (best.metrics if best else {}).items() if results.is_number(v)}
        metrics.update({"trials": rec.trials, "stopped_early": rec.stopped_early, "failed": rec.failed,
                        "cpu_hours": rec.cpu_hours, "gpu_hours": rec.gpu_hours, "wall_time_s": rec.wall_time_s})
        tags = {"tuning.status": status, "best_trial_id": best.trial_id if best else "none",
                **({"best_note": best.note} if best and best.note else {})}
        # Step: the segment (0, then 1 after a resume, ...), so a resumed search keeps each one's result.
        self.worker.log(self.parent, tags=tags,
                        metrics=[Metric(k, float(v), now, max(rec.resumes, 0)) for k, v in metrics.items()])
        if "best_note" not in tags and "best_note" in self.worker.client.get_run(self.parent).data.tags:
            self.worker.client.delete_tag(self.parent, "best_note")  # an earlier segment's: this one's best is full
        tracking_front.log(self.worker, self.parent, self.known, trials, rec, self.dir, max(rec.resumes, 0), now)
        for name in ("best_config.json", "trials.csv", "report.html"):
            if (self.dir / name).is_file():
                self.worker.client.log_artifact(self.parent, str(self.dir / name))
        self.worker.client.set_terminated(self.parent, status=_ENDS.get(status, "FAILED"))
        self.final_ok = True


def _exists(client, run_id: str) -> bool:
    from mlflow.exceptions import MlflowException

    try:
        return client.get_run(run_id).info.lifecycle_stage != "deleted"
    except MlflowException as exc:
        if getattr(exc, "error_code", "") == "RESOURCE_DOES_NOT_EXIST":
            return False
        raise  # the store did not answer: the worker tries again


def _text(value) -> str | None:
    """A trials table's text cell, or None where it is empty (NaN where no trial had one)."""
    return value if isinstance(value, str) and value else None


def _times_ms(rows: list[dict]) -> tuple[list[int], list[int]]:
    """(when each epoch started, when it ended), in milliseconds since 1970: a trial's child run
    starts when its first epoch did and ends when its last did. A row's ended_at is its epoch's end
    to the microsecond, as the trial reports it (tuning.backend.trainables), else Tune's timestamp
    in whole seconds (a replay, a run recorded before ended_at); time_this_iter_s how long the
    epoch took."""
    ends = [(r["ended_at"] if results.is_number(r.get("ended_at")) else r["timestamp"], r.get("time_this_iter_s"))
            for r in rows if results.is_number(r.get("ended_at")) or results.is_number(r.get("timestamp"))]
    starts = [round(1000 * (end - (took if results.is_number(took) else 0))) for end, took in ends]
    return starts, [round(1000 * end) for end, _ in ends]


def _search_params(rec) -> dict:
    """The parent's params: what the search was asked to do. MLflow never changes a param, so what a
    resume or an extension changes (samples) goes into tags."""
    decl = {f"space.{k}": ", ".join(f"{f}={v}" for f, v in d.items()) for k, d in records.declarations(rec).items()}
    res = rec.resources_per_trial
    return {"space": rec.space or "(in Python)", "trainer": rec.trainer, "strategy": rec.strategy, "seed": rec.seed,
            "num_samples": rec.num_samples, "max_epochs": rec.max_epochs, "metric": rec.metric, "mode": rec.mode,
            "cpus_per_trial": res.cpu, "gpus_per_trial": res.gpu,
            "workers_per_trial": rec.workers_per_trial, "time_budget_s": rec.time_budget_s,
            "smoke": bool(rec.smoke), **decl}


class Comparison:
    """A comparison's parent run with a child run per strategy x seed (its totals, and its
    incumbent against the results it consumed); the report as the parent's artifacts. The parent's
    id is kept in the output folder (mlflow.json): the command run again goes on under it."""

    FILE = "mlflow.json"

    def __init__(self, target: Target, name: str, out: Path, params: dict):
        self.target, self.name, self.out, self.params = target, name, Path(out), params
        self.parent = self.experiment_id = self.done = None
        self.final_ok = False
        self.worker = Worker("mlflow-compare", target.uri, on_error=self._forget).start()

    def _forget(self) -> None:
        self.done = None

    def _open(self) -> None:
        w, t = self.worker, self.target
        saved = json.loads((self.out / self.FILE).read_text()) if (self.out / self.FILE).is_file() else {}
        self.experiment_id = w.experiment(t)
        if (saved.get("uri"), saved.get("experiment")) == (t.uri, t.experiment):
            self.parent = saved["parent_run_id"]
            w.client.update_run(self.parent, status="RUNNING")
        else:
            self.parent = w.client.create_run(self.experiment_id, run_name=self.name, tags={
                "tuning.kind": "comparison", "tuning.out": str(self.out.absolute()),
                "git_commit": provenance.git_commit() or "unknown"}).info.run_id
            w.log(self.parent, params=self.params)
        results.write_json(self.out / self.FILE, {"uri": t.uri, "experiment": t.experiment,
                                                  "experiment_id": self.experiment_id, "parent_run_id": self.parent})

    def run_done(self, run_id: str, strategy: str, seed: int, df, metric: str, mode: str) -> None:
        """A strategy x seed run finished, or was kept from an earlier invocation: its child run."""
        self.worker.submit(lambda: self._child(run_id, strategy, seed, df, metric, mode))

    def _child(self, run_id: str, strategy: str, seed: int, df, metric: str, mode: str) -> None:
        from mlflow.entities import Metric

        w = self.worker
        if self.parent is None:
            self._open()
        if self.done is None:  # what the server holds, after a failure too
            self.done = {}
            for r in w.children(self.experiment_id, self.parent):
                if r.info.status != "FINISHED":  # cut short by a failure: logged again, whole
                    w.client.delete_run(r.info.run_id)
                else:
                    self.done[r.data.tags.get("run_id")] = r.info.run_id
        if run_id in self.done:
            return
        run = w.client.create_run(self.experiment_id, run_name=run_id, tags={
            "mlflow.parentRunId": self.parent, "run_id": run_id, "strategy": strategy, "seed": str(seed)}).info.run_id
        now, best, curve = int(time.time() * 1000), None, []
        full = df["full_fidelity"] if "full_fidelity" in df else [True] * len(df)
        for step, (value, whole) in enumerate(zip(df[metric] if metric in df else [], full), start=1):
            if whole and results.is_number(value) and (best is None or (value < best if mode == "min" else value > best)):
                best = float(value)
                curve.append(Metric(f"incumbent_{metric}", best, now, step))  # step: results consumed so far
        n = len(df)
        totals = {"results": n, "trials": df["trial_id"].nunique() if n else 0,
                  "wall_s": df["wall_s"].max() if n else 0, "device_hours": df["device_hours"].max() if n else 0}
        w.log(run, params={"strategy": strategy, "seed": seed},
              metrics=curve + [Metric(k, float(v), now, 0) for k, v in totals.items()])
        w.client.set_terminated(run, status="FINISHED")
        self.done[run_id] = run

    def finish(self, report: dict) -> list[str]:
        """The report's files as the parent's artifacts, then its end; the lines to print."""
        def end():
            if self.parent is None:
                self._open()
            for path in report.values():
                if Path(path).is_file():
                    self.worker.client.log_artifact(self.parent, str(path))
            self.worker.client.set_terminated(self.parent, status="FINISHED")
            self.final_ok = True

        self.worker.submit(end)
        self.worker.close(setting("FLUSH_S"))
        return self.target.lines("comparison", "a child run per strategy x seed", self.parent, self.final_ok,
                                 self.worker.first_error)
