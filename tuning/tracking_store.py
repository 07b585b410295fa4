"""Where a search is tracked, and the way there: --mlflow's URI and experiment checked before a run
starts (check, Target), MLflow's client kept short and quiet, and the background Worker that sends
tuning.tracking's jobs to the store, retrying, never raising. mlflow is imported only when tracking
is on (``pip install 'tuning[mlflow]'``).
"""

from __future__ import annotations

import logging
import os
import queue
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from tuning.cli import UsageError

log = logging.getLogger(__name__)

INSTALL = "pip install 'tuning[mlflow]'"
DB = "mlflow.db"  # the SQLite store in a folder given as the URI (--mlflow alone: the results dir)
# Short on purpose: a down server must cost the end of a search seconds, not MLflow's defaults (7
# retries with backoff, 120 s a request: minutes). TUNING_MLFLOW_<NAME> overrides one for a whole
# command (a slow network; the tests).
SETTINGS = {"TIMEOUT_S": 10,  # one HTTP request
            "RETRIES": 3,  # tries of one sync (0.5 s, then 1 s apart) before it counts as failed
            "FLUSH_S": 60,  # at the end, how long the driver waits for the last sync
            "EVERY_S": 5}  # how often the learning curves are sent while the run goes


def setting(name: str) -> float:
    return float(os.environ.get(f"TUNING_MLFLOW_{name}", SETTINGS[name]))


@dataclass
class Target:
    """Where a search or a comparison is tracked: a checked tracking URI and an experiment."""

    uri: str
    experiment: str
    default: bool = False  # --mlflow with no URI: the SQLite store in the results dir

    def lines(self, what: str, nested: str, parent: str | None, ok: bool, error: str | None) -> list[str]:
        """The summary's lines: where it went (and the command that shows a local store), or why not."""
        where = f"experiment {self.experiment!r} at {self.uri}"
        if not ok:
            why = f"first error: {error}" if error else f"no answer within {setting('FLUSH_S'):g} s"
            return [f"MLflow logging failed ({why}): {where} holds only part of this {what}; its files are complete"]
        ui = [f"  open it with: mlflow ui --backend-store-uri {self.uri}"] if self.uri.startswith("sqlite:") else []
        return [f"MLflow: parent run {parent} with {nested}, in {where}", *ui]


# The package that provides a database driver SQLAlchemy imports by module name.
DRIVERS = {"MySQLdb": "mysqlclient", "pymysql": "pymysql", "psycopg2": "psycopg2-binary", "psycopg": "psycopg",
           "pymssql": "pymssql", "pyodbc": "pyodbc"}


def check(uri, experiment: str | None, name: str, folder: Path, *, strict: bool = True) -> Target | None:
    """--mlflow and --mlflow-experiment, checked before Ray starts (a refusal leaves no results dir):
    mlflow imports, MLflow takes the URI, a server or database answers there (strict: else one
    line, exit 2; not strict, for a resume of a tracked run: a warning). uri None or False: no
    tracking; True or "": a SQLite store in `folder`. name: the experiment unless given."""
    if uri is None or uri is False:
        if experiment:
            raise UsageError("--mlflow-experiment needs --mlflow [URI]: it names the experiment to log to")
        return None
    try:
        import mlflow  # noqa: F401
    except ImportError:
        if not strict:
            log.warning("this run logged to MLflow, which is not installed here (%s): it goes on untracked", INSTALL)
            return None
        raise UsageError(f"--mlflow needs MLflow, which is not installed: {INSTALL}") from None
    if not isinstance(uri, (str, bool)):
        raise UsageError(f"--mlflow must be a tracking URI or True, got {type(uri).__name__}")
    default = uri is True or uri == ""
    target = Target(_normalise(str(folder) if default else uri, create=not default), experiment or name, default)
    if not default or (Path(target.uri.removeprefix("sqlite:///")).exists() and not strict):  # a resume's own store
        _quiet_mlflow()
        try:
            _client(target.uri).search_experiments(max_results=1)
        except Exception as exc:  # MlflowException, requests', SQLAlchemy's: whatever the store raises
            missing = getattr(exc, "name", None) if isinstance(exc, ImportError) else None
            if missing:  # SQLAlchemy's driver for the database (mysql://, postgresql://) is not installed
                driver = DRIVERS.get(missing.split(".")[0], missing)
                line = f"--mlflow {target.uri}: the database's Python driver is not installed (no module {missing!r})"
                if strict:
                    raise UsageError(f"{line}: pip install {driver}, or name a driver you have in the URI's scheme "
                                     "(mysql+pymysql://..., postgresql+psycopg2://...)") from None
            else:
                line = f"--mlflow {target.uri}: no tracking server or database answers there ({short(exc)})"
            if strict:
                raise UsageError(f"{line}: start it (mlflow server ...) or fix the URI") from None
            log.warning("%s; the search goes on and logs there once it answers", line)
    return target


def _normalise(uri: str, create: bool) -> str:
    """The URI as MLflow takes it, absolute (a --resume from another directory finds the same
    store). A folder (or file:) becomes a SQLite store in it: MLflow 3 refuses its old folder store
    unless MLFLOW_ALLOW_FILE_STORE is set, and recommends SQLite."""
    parsed = urlparse(uri)
    scheme = parsed.scheme.split("+")[0].lower()  # postgresql+psycopg2: postgresql
    # file:/abs/path is a file URI as much as file:///abs/path; http:/host and file:relative are typos
    if re.match(r"(https?|sqlite):(?!//)|file:(?!/)|(https?|sqlite)//", uri) or (not scheme and ":" in uri):
        raise UsageError(f"--mlflow {uri}: not a tracking URI; give http://host:port, sqlite:///path/{DB}, "
                         "file:///path or a folder")
    if scheme in ("", "file"):
        folder = Path(parsed.path if scheme else uri).expanduser().absolute()
        try:
            if create:
                folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"--mlflow {uri}: cannot make folder {folder} ({exc.strerror or exc})") from None
        return f"sqlite:///{folder / DB}"
    if scheme in ("http", "https"):
        try:
            ok = bool(parsed.hostname) and (parsed.port or 1) > 0
        except ValueError:  # a port that is not a number
            ok = False
        if not ok:
            raise UsageError(f"--mlflow {uri}: a server's URI is http(s)://HOST[:PORT], e.g. http://127.0.0.1:5000")
        return uri.rstrip("/")
    if scheme == "sqlite":
        path = uri.split(":///", 1)[1] if ":///" in uri else ""
        if not path or path == ":memory:":
            raise UsageError(f"--mlflow {uri}: give a database file, e.g. sqlite:///path/{DB}")
        db = Path(path).expanduser().absolute()
        if not db.parent.is_dir():
            raise UsageError(f"--mlflow {uri}: folder {db.parent} does not exist")
        return f"sqlite:///{db}"
    if scheme in ("postgresql", "mysql", "mssql", "databricks"):
        return uri
    raise UsageError(f"--mlflow {uri}: unknown scheme {parsed.scheme!r}; give http(s)://host:port, "
                     f"sqlite:///path/{DB}, postgresql://..., mysql://... or a folder")


def _quiet_mlflow() -> None:
    """MLflow's own retries off (Worker retries) and its requests short; no "View run" line on
    stdout per run. Process-wide, so only where the user has not set them."""
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", str(max(1, int(setting("TIMEOUT_S")))))
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")


def quiet_logs() -> None:
    """For the commands: MLflow's INFO lines (a new database's tables, its migrations) say nothing a
    user of tuning needs. MLflow sets its loggers' level when imported, from MLFLOW_LOGGING_LEVEL."""
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")
    for name in ("mlflow", "alembic"):
        logging.getLogger(name).setLevel(logging.WARNING)


def _client(uri: str):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri)


def short(exc: Exception) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 200 else text[:200] + "..."


def batches(metrics: list, per_batch: int = 1000):
    """MLflow takes at most 1000 metrics a call. Cut between epochs only, so an epoch lands whole or
    not at all (a log_batch is one transaction): a child's last step is then its last epoch logged."""
    batch = []
    for m in metrics:
        if len(batch) >= per_batch and m.step != batch[-1].step:
            yield batch
            batch = []
        batch.append(m)
    if batch:
        yield batch


class Worker:
    """A background thread that runs jobs in order, each tried RETRIES times; with `every`, `idle`
    runs whenever no job came for that long. A job that fails is counted, never raised."""

    def __init__(self, name: str, uri: str, idle=None, every: float | None = None, on_error=None):
        _quiet_mlflow()
        self.uri, self._client, self.idle, self.every, self.on_error = uri, None, idle, every, on_error
        self.failures, self.first_error, self._deadline, self._jobs = 0, None, None, queue.Queue()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)

    @property
    def client(self):
        # Made at first use, inside a job or a caller's try: a store that cannot be opened (a SQLite
        # file that is no database raises as the client is made) is a logging failure like any other.
        if self._client is None:
            self._client = _client(self.uri)
        return self._client

    def start(self) -> "Worker":
        self._thread.start()
        return self

    def submit(self, job) -> None:
        self._jobs.put(job)

    def _loop(self) -> None:
        while True:
            try:
                job = self._jobs.get(timeout=self.every)
            except queue.Empty:
                job = self.idle
            if job is None:
                return
            tries = max(1, int(setting("RETRIES")))
            for n in range(tries):
                try:
                    job()
                    break
                except Exception as exc:  # whatever the store raises: the search goes on regardless
                    if not self.failures:
                        log.warning("MLflow logging failed (%s); retrying in the background, the search goes on",
                                    short(exc))
                    self.failures, self.first_error = self.failures + 1, self.first_error or short(exc)
                    if self.on_error:
                        self.on_error()
                    if n + 1 == tries or (self._deadline and time.monotonic() + 0.5 * 2 ** n > self._deadline):
                        break
                    time.sleep(0.5 * 2 ** n)

    def close(self, timeout: float) -> None:
        """Runs what was submitted, for at most `timeout` s, then no more retries."""
        self._deadline = time.monotonic() + timeout
        self._jobs.put(None)
        self._thread.join(timeout)

    def log(self, run_id: str, metrics=(), params=None, tags=None) -> None:
        """log_batch within MLflow's limits: 100 params, 100 tags, 1000 metrics a call."""
        from mlflow.entities import Param, RunTag

        ps = [Param(k, str(v)[:6000]) for k, v in (params or {}).items()]
        ts = [RunTag(k, str(v)[:8000]) for k, v in (tags or {}).items()]
        for i in range(0, max(len(ps), len(ts)), 100):
            self.client.log_batch(run_id, params=ps[i:i + 100], tags=ts[i:i + 100])
        for batch in batches(list(metrics)):
            self.client.log_batch(run_id, metrics=batch)

    def experiment(self, target: Target) -> str:
        """The experiment's id, created where missing; a local store keeps its artifacts beside its
        database (MLflow's default is ./mlruns wherever the command runs)."""
        found = self.client.get_experiment_by_name(target.experiment)
        if found is not None:
            return found.experiment_id
        where = None
        if target.uri.startswith("sqlite:///"):
            where = (Path(target.uri[len("sqlite:///"):]).parent / "mlartifacts").as_uri()
        return self.client.create_experiment(target.experiment, artifact_location=where)

    def children(self, experiment_id: str, parent: str) -> list:
        runs, token = [], None
        while True:
            page = self.client.search_runs([experiment_id], f"tags.mlflow.parentRunId = '{parent}'",
                                           max_results=1000, page_token=token, order_by=["attributes.start_time ASC"])
            runs += list(page)
            token = page.token
            if not token:
                return runs
