"""MLflow tracking against a real tracking server (`mlflow server`, SQLite), started here: a search
as one parent run with a child per trial, read back through MLflow's client; a driver SIGKILLed
and resumed; the server stopped mid-run; a comparison; and the bad input refused in one line."""

import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pandas as pd
import pytest

import tuning
from cli_helpers import refused
from conftest import ROOT
from run_helpers import STEADY, TESTS, hold_mid_run, write_space
from tuning import run, tracking_store

# MLflow's usage telemetry stays off, as Ray's does (conftest): the suite never uses the network.
os.environ["MLFLOW_DISABLE_TELEMETRY"] = "true"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`mlflow server` on a free port, in its own process group (it starts uvicorn under it). It
    starts in the background (a minute on the loaded 2-core machine, while Ray starts too); `url`
    waits until /health answers."""

    def __init__(self, root: Path):
        self.root, self.ready, self.tries = root, False, 0
        self._start()

    def _start(self) -> None:
        self.tries += 1
        if self.tries > 1:
            self.log.close()
        self._url = f"http://127.0.0.1:{_free_port()}"
        self.log = open(self.root / "server.log", "w")
        # Its GenAI job runner (seven more processes) is of no use here and slows the start.
        env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", f"sqlite:///{self.root}/mlflow.db",
             "--default-artifact-root", str(self.root / "artifacts"), "--host", "127.0.0.1",
             "--port", self._url.rsplit(":", 1)[1], "--workers", "1"],
            stdout=self.log, stderr=subprocess.STDOUT, env=env, start_new_session=True)

    @property
    def url(self) -> str:
        deadline = time.monotonic() + 240
        while not self.ready:
            said = (self.root / "server.log").read_text()
            if self.proc.poll() is not None and self.tries < 3 and any(
                    m in said.lower() for m in ("address already in use", "connection in use")):
                self._start()  # the free port was taken before the server bound it (a Ray beside it)
                continue
            assert self.proc.poll() is None and time.monotonic() < deadline, said[-3000:]
            try:
                self.ready = urllib.request.urlopen(f"{self._url}/health", timeout=2).status == 200
            except OSError:
                time.sleep(0.5)
        return self._url

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.log.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    pytest.importorskip("mlflow", reason="make test installs the mlflow extra")
    s = Server(tmp_path_factory.mktemp("mlflow"))
    yield s
    s.stop()



def _client(uri):
    from mlflow.tracking import MlflowClient

    return MlflowClient(uri)


def _runs(uri: str, experiment: str) -> tuple[list, dict]:
    """(parent runs, {parent id: its child runs}) of an experiment."""
    c = _client(uri)
    exp = c.get_experiment_by_name(experiment)
    runs = c.search_runs([exp.experiment_id], max_results=1000)
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    return parents, {p.info.run_id: [r for r in runs if r.data.tags.get("mlflow.parentRunId") == p.info.run_id]
                     for p in parents}


def _steps(uri: str, run, metric: str = "loss") -> list[int]:
    return [m.step for m in _client(uri).get_metric_history(run.info.run_id, metric)]


def _env(**settings):
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
            **{f"TUNING_MLFLOW_{k}": str(v) for k, v in settings.items()}}


def _start(*args, **settings) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "tuning.run", *args], cwd=ROOT, env=_env(**settings),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)


def _wait(condition, proc=None, timeout=120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert proc is None or proc.poll() is None, proc.stdout.read()[-3000:]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.3)


# ---------------------------------------------------------------- a search, read back

def test_a_search_is_one_parent_run_with_a_nested_child_run_per_trial(server, ray_here, tmp_path):
    result = tuning.search(None, "counting_ones", strategy="hyperband", smoke=True, results_dir=tmp_path / "r",
                           mlflow=server.url, mlflow_experiment="core")
    assert result.status == "finished"
    parents, children = _runs(server.url, "core")
    assert len(parents) == 1
    parent = parents[0]
    kids = children[parent.info.run_id]
    assert result.record.mlflow.parent_run_id == parent.info.run_id  # run.json keeps it for --resume
    assert json.loads((tmp_path / "r" / "run.json").read_text())["mlflow"]["parent_run_id"] == parent.info.run_id
    trials = result.trials.set_index("trial_id")
    assert sorted(k.data.tags["trial_id"] for k in kids) == sorted(trials.index)  # one child per trial
    epochs = pd.read_csv(tmp_path / "r" / "epochs.csv")
    for kid in kids:
        tid = kid.data.tags["trial_id"]
        curve = epochs[epochs["trial_id"] == tid]
        assert _steps(server.url, kid) == curve["training_iteration"].tolist()  # every epoch once, step = epoch
        assert kid.info.status == "FINISHED"
        assert kid.data.tags["status"] == "TERMINATED"
        assert kid.data.tags["stopped_early"] == str(bool(trials.loc[tid, "stopped_early"])).lower()
        config = next(r["config"] for r in [json.loads(x) for x in (tmp_path / "r" / "results.jsonl").open()]
                      if r["trial_id"] == tid)
        assert kid.data.params == {k: str(v) for k, v in config.items()}
    # The parent: what was asked, where it came from, what it came to.
    assert parent.info.status == "FINISHED"
    p = parent.data.params
    assert (p["strategy"], p["seed"], p["num_samples"], p["max_epochs"]) == ("hyperband", "0", "9", "3")
    assert p["space"] == "counting_ones" and p["space.x0"].startswith("type=Uniform")
    assert p["cpus_per_trial"] == "1" and p["gpus_per_trial"] == "0"
    assert parent.data.tags["data"] == "benchmark:counting_ones" and parent.data.tags["git_commit"]
    assert parent.data.metrics["loss"] == pytest.approx(result.best.metrics["loss"])
    assert parent.data.tags["best_trial_id"] == result.best.trial_id
    assert parent.data.metrics["trials"] == len(trials)
    names = sorted(a.path for a in _client(server.url).list_artifacts(parent.info.run_id))
    assert names == ["best_config.json", "report.html", "trials.csv"]
    assert "MLflow: parent run " + parent.info.run_id in result.summary()


@pytest.mark.slow  # a second search and its extension: make test-all
def test_mlflow_alone_logs_to_sqlite_in_the_results_dir_and_add_samples_continues_the_parent(ray_here, tmp_path):
    pytest.importorskip("mlflow")
    folder = tmp_path / "r"
    first = tuning.search(None, "conditional_branches", strategy="random", num_samples=3, max_epochs=2, smoke=True,
                          results_dir=folder, mlflow=True)
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    assert f"open it with: mlflow ui --backend-store-uri {uri}" in first.summary()
    assert (folder / "mlartifacts").is_dir()  # beside the database, not ./mlruns wherever the command ran
    parents, children = _runs(uri, "conditional_branches")
    parent = parents[0].info.run_id
    kids = children[parent]
    for kid in kids:  # conditional parameters: a trial's inactive ones are not among its params
        tid = kid.data.tags["trial_id"]
        config = first.trials.set_index("trial_id").loc[tid]
        assert set(kid.data.params) == {k for k in config.index if k in first.record.params and pd.notna(config[k])}

    more = tuning.resume(folder, add_samples=2)
    assert more.status == "finished"
    parents, children = _runs(uri, "conditional_branches")
    assert [p.info.run_id for p in parents] == [parent]  # the same parent, continued
    assert sorted(k.data.tags["trial_id"] for k in children[parent]) == sorted(more.trials["trial_id"])
    for kid in children[parent]:
        steps = _steps(uri, kid)
        assert steps == sorted(set(steps)) and steps == list(range(1, len(steps) + 1))
    assert parents[0].data.tags["extensions"] == "1"


@pytest.mark.slow  # make test-all: two segments of 9 s of epochs
def test_tags_say_what_the_last_segment_found(ray_here, tmp_path):
    """A finished child was tagged failure=nan beside a failed one; a resume whose best reached the full
    budget kept the first segment's best_note."""
    pytest.importorskip("mlflow")
    folder = tmp_path / "r"
    space = tuning.Space(name="tags", params={"lr": tuning.Uniform(0.0, 1.0)},
                         trainer="user_trainers:slow_unless_it_fails", metric="loss", strategy="random",
                         max_epochs=90, num_samples=2, gpus_per_trial=0)
    first = tuning.search(None, space, points_to_evaluate=[{"lr": 0.9}, {"lr": 0.1}], max_failures=0,
                          time_budget="5s", results_dir=folder, mlflow=True)  # 9 s of epochs: none ends
    assert first.status == "time budget spent" and first.best.note
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    assert "best_note" in _runs(uri, space.name)[0][0].data.tags
    done = tuning.resume(folder, time_budget="10m")
    assert done.status == "finished" and not done.best.note
    (parent,), children = _runs(uri, space.name)
    assert "best_note" not in parent.data.tags
    tags = {k.data.tags["trial_id"]: k.data.tags for k in children[parent.info.run_id]}
    failed = set(done.trials.loc[done.trials["status"] == "ERROR", "trial_id"])
    assert len(failed) == 1 and len(tags) == 2
    assert all(("failure" in t) == (tid in failed) for tid, t in tags.items()), tags


def test_a_store_that_cannot_be_opened_is_a_logging_failure_not_a_crash(tmp_path):
    """The client was made as the worker was, outside any try: a SQLite file that is no database
    raised there, after run.json had counted a resume's added trials, which then never ran."""
    pytest.importorskip("mlflow")
    (tmp_path / "mlflow.db").write_text("not a database")
    worker = tracking_store.Worker("t", f"sqlite:///{tmp_path / 'mlflow.db'}").start()  # no raise
    worker.submit(lambda: worker.client.search_experiments(max_results=1))
    worker.close(10)
    assert worker.failures >= 1 and "file is not a database" in worker.first_error


@pytest.mark.slow  # make test-all: three runs, each resume its own process (a minute and more)
def test_a_store_damaged_or_lost_between_resumes_loses_no_trial(ray_here, tmp_path):
    """A resume whose SQLite store was no database raised as the client was made, after run.json had
    counted the trials it added, which then never ran; one whose store was gone warned at every sync
    that the parent was not found and logged nothing."""
    pytest.importorskip("mlflow")
    folder = tmp_path / "r"
    space = tuning.Space(name="lost", params={"lr": tuning.Uniform(0.0, 1.0)}, trainer="user_trainers:scored",
                         metric="score", mode="max", strategy="random", max_epochs=2, num_samples=2, gpus_per_trial=0)
    tuning.search(None, space, results_dir=folder, mlflow=True)

    # Each resume its own process, as from the command line: MLflow keeps one database connection
    # per URI in a process, which would still read the file as it was.
    def resume_one_more() -> str:
        done = subprocess.run([sys.executable, "-m", "tuning.run", "--resume", str(folder), "--add-samples", "1"],
                              cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout + done.stderr

    (folder / "mlflow.db").write_text("not a database")
    assert "MLflow logging failed" in resume_one_more()
    assert len(pd.read_csv(folder / "trials.csv")) == 3
    # A store that lost the parent: warned once, then a new parent with every trial, where every
    # later sync once warned that the run was not found and logged nothing.
    (folder / "mlflow.db").unlink()
    out = resume_one_more()
    assert "is not in" in out and "a new parent run logs the whole search" in out and "logging failed" not in out
    (parent,), children = _runs(f"sqlite:///{folder}/./mlflow.db", space.name)  # another URI: a new connection
    assert sorted(k.data.tags["trial_id"] for k in children[parent.info.run_id]) == sorted(
        pd.read_csv(folder / "trials.csv", dtype={"trial_id": str})["trial_id"])


def test_a_run_cut_short_logs_no_child_run_for_a_trial_that_never_started(ray_here, tmp_path):
    """A spent time budget (as Ctrl-C) leaves trials waiting: each gets its child run once it runs,
    not a KILLED one without a metric now."""
    pytest.importorskip("mlflow")
    # Epochs that sleep, not spin: under the other test worker's load, trials took over 3 s to start
    # (the budget was 3 s, no trial ran), and a 10 s budget of sleeping costs no CPU. 30 trials of 2 s
    # on 2 CPUs take 30 s: some are always left waiting.
    space = tuning.Space(params={"lr": tuning.Uniform(0.0, 1.0)}, trainer="faulty:steady",
                         fixed={"sleep_s": 1.0}, num_samples=30, max_epochs=2, gpus_per_trial=0)
    result = tuning.search(None, space, strategy="random", time_budget=10, seed=0, results_dir=tmp_path / "r",
                           mlflow=True)
    assert result.status == "time budget spent"
    ran = set(result.trials.loc[result.trials["epochs"] > 0, "trial_id"])
    assert ran and len(ran) < len(result.trials)
    parents, children = _runs(f"sqlite:///{tmp_path / 'r' / 'mlflow.db'}", "steady")
    assert {k.data.tags["trial_id"] for k in children[parents[0].info.run_id]} == ran


# ---------------------------------------------------------------- crash and resume

@pytest.mark.slow  # two runs of tuning.run: make test-all
@pytest.mark.timeout(600)
def test_sigkill_then_resume_keeps_one_parent_and_logs_no_trial_or_epoch_twice(server, tmp_path):
    results, gate = tmp_path / "results", tmp_path / "gate"
    space = write_space(tmp_path, STEADY.format(strategy="asha", epochs=4, rf=2, gate=str(gate)))
    proc = _start("--space", str(space), "--results-dir", str(results), "--mlflow", server.url,
                  "--mlflow-experiment", "killed", EVERY_S=0.5)
    hold_mid_run(proc, results, gate)
    # Until a held trial's first epochs are logged: three steps of trials that had finished said nothing
    # of a trial going on after the kill (the check below then failed on a run that was right).
    held = lambda: any(0 < len(_steps(server.url, k)) < 4  # noqa: E731
                       for k in sum(_runs(server.url, "killed")[1].values(), []))
    _wait(held, proc)
    os.killpg(proc.pid, signal.SIGKILL)  # the driver and its Ray: nothing of the tracker's memory survives
    proc.wait()
    before = {k.data.tags["trial_id"]: _steps(server.url, k) for k in sum(_runs(server.url, "killed")[1].values(), [])}
    parent = json.loads((results / "run.json").read_text())["mlflow"]["parent_run_id"]

    gate.unlink()
    done = subprocess.run([sys.executable, "-m", "tuning.run", "--resume", str(results)], cwd=ROOT,
                          env=_env(EVERY_S=0.5), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    parents, children = _runs(server.url, "killed")
    assert [p.info.run_id for p in parents] == [parent] and parents[0].info.status == "FINISHED"
    kids = children[parent]
    epochs = pd.read_csv(results / "epochs.csv")
    assert sorted(k.data.tags["trial_id"] for k in kids) == sorted(epochs["trial_id"].unique())  # none twice
    went_on = 0
    for kid in kids:
        tid = kid.data.tags["trial_id"]
        steps = _steps(server.url, kid)
        assert steps == epochs[epochs["trial_id"] == tid]["training_iteration"].tolist(), (tid, steps)
        went_on += 0 < len(before.get(tid, [])) < len(steps)
    assert went_on, before  # a trial logged before the kill went on after it, without a repeat


# ---------------------------------------------------------------- a comparison

@pytest.mark.slow  # a comparison of two strategies: make test-all
@pytest.mark.timeout(600)
def test_a_comparison_is_one_parent_with_a_run_per_strategy_and_seed(server, tmp_path):
    exp = tmp_path / "two.py"
    exp.write_text("from tuning.compare import Experiment\nEXPERIMENT = Experiment(space='counting_ones', budget=2, "
                   "seeds=(0,), strategies=('random', 'asha'), max_epochs=3, peers=())\n")
    done = subprocess.run([sys.executable, "-m", "tuning.compare", str(exp.with_suffix("")), "--out",
                           str(tmp_path / "out"), "--mlflow", server.url], cwd=ROOT, env=_env(),
                          capture_output=True, text=True, timeout=500)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "MLflow: parent run" in done.stdout
    parents, children = _runs(server.url, "compare-two")
    assert len(parents) == 1 and parents[0].data.tags["tuning.kind"] == "comparison"
    kids = children[parents[0].info.run_id]
    assert sorted(k.data.tags["run_id"] for k in kids) == ["asha-s0", "random-s0"]
    assert all(k.data.metrics["results"] > 0 and _steps(server.url, k, "incumbent_loss") for k in kids)
    names = {a.path for a in _client(server.url).list_artifacts(parents[0].info.run_id)}
    assert {"report.html", "report.md"} <= names


# ---------------------------------------------------------------- bad input: one line, exit 2

@pytest.mark.timeout(60)  # refused at once: with MLflow's own retries and timeouts it took minutes
def test_an_unreachable_server_is_refused_before_anything_starts(capsys, tmp_path):
    pytest.importorskip("mlflow")
    folder = tmp_path / "r"
    # Bound but not listening, for the whole call: connections are refused, and no other process
    # (another test's Ray or server) can take the port meanwhile and answer.
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{held.getsockname()[1]}"
        refused(capsys, run.main, ["--space", "counting_ones", "--smoke", "--results-dir", str(folder),
                                   "--mlflow", url], f"--mlflow {url}: no tracking server or database answers there")
    assert not folder.exists()  # checked before the results dir (and so before Ray)


def test_a_database_without_its_driver_is_told_to_install_it(capsys, tmp_path):
    """It was told no server answers there, and to start one."""
    pytest.importorskip("mlflow")
    if importlib.util.find_spec("MySQLdb"):
        pytest.skip("mysqlclient is installed here")
    refused(capsys, run.main, ["--space", "counting_ones", "--smoke", "--results-dir", str(tmp_path / "r"),
                               "--mlflow", "mysql://u:p@127.0.0.1:1/db"],
            "the database's Python driver is not installed (no module 'MySQLdb'): pip install mysqlclient")
    assert not (tmp_path / "r").exists()


def test_a_file_uri_with_one_slash_is_the_folder_it_names(tmp_path):
    from tuning import tracking_store

    for uri in (f"file:{tmp_path}/mlruns", f"file://{tmp_path}/mlruns", str(tmp_path / "mlruns")):
        assert tracking_store._normalise(uri, create=True) == f"sqlite:///{tmp_path / 'mlruns' / tracking_store.DB}"


@pytest.mark.parametrize("uri,needle", [
    ("http//127.0.0.1:5000", "not a tracking URI"),
    ("http:/127.0.0.1:5000", "not a tracking URI"),
    ("file:mlruns", "file:///path or a folder"),
    ("http://", "a server's URI is http(s)://HOST[:PORT]"),
    ("http://host:port", "a server's URI is http(s)://HOST[:PORT]"),
    ("ftp://host/x", "unknown scheme 'ftp'"),
    ("sqlite:////no/such/folder/mlflow.db", "folder /no/such/folder does not exist"),
    ("sqlite://", "give a database file"),
])
def test_a_malformed_uri_is_refused(capsys, tmp_path, uri, needle):
    pytest.importorskip("mlflow")
    refused(capsys, run.main, ["--space", "counting_ones", "--results-dir", str(tmp_path / "r"), "--mlflow", uri],
            f"--mlflow {uri}: ", needle)
    assert not (tmp_path / "r").exists()


def test_a_used_results_dir_is_refused_before_a_new_mlflow_store_is_made(capsys, tmp_path):
    pytest.importorskip("mlflow")
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "kept.txt").write_text("an earlier result")
    refused(capsys, run.main, ["--space", "counting_ones", "--results-dir", str(tmp_path / "r"),
                               "--mlflow", str(tmp_path / "store")], "already exists and is not empty")
    assert not (tmp_path / "store").exists()  # the refusal leaves no new store behind either
    assert [p.name for p in (tmp_path / "r").iterdir()] == ["kept.txt"]


def test_a_results_dir_that_cannot_be_written_is_refused_before_a_new_mlflow_store_is_made(capsys, tmp_path):
    pytest.importorskip("mlflow")
    (tmp_path / "file").write_text("a file where a folder would have to go")
    refused(capsys, run.main, ["--space", "counting_ones", "--results-dir", str(tmp_path / "file" / "r"),
                               "--mlflow", str(tmp_path / "store")], "cannot write to results dir")
    assert not (tmp_path / "store").exists()


def test_a_refused_mlflow_store_leaves_no_results_dir(capsys, tmp_path):
    pytest.importorskip("mlflow")
    (tmp_path / "store").write_text("a file where the store's folder would have to go")
    (tmp_path / "mine").mkdir()  # the user's, empty: reached through "..", it is not one this run made
    refused(capsys, run.main, ["--space", "counting_ones", "--results-dir", str(tmp_path / "new" / ".." / "mine" / "r"),
                               "--mlflow", str(tmp_path / "store")], "--mlflow")
    refused(capsys, run.main, ["--space", "counting_ones", "--results-dir", str(tmp_path / "new" / "r"),
                               "--mlflow", str(tmp_path / "store")], "--mlflow")
    assert not (tmp_path / "new").exists()  # nor the parent folder made for it
    assert (tmp_path / "mine").is_dir() and not any((tmp_path / "mine").iterdir())


def test_an_experiment_without_mlflow_is_refused(capsys, tmp_path):
    refused(capsys, run.main, ["--space", "counting_ones", "--results-dir", str(tmp_path / "r"),
                               "--mlflow-experiment", "x"], "--mlflow-experiment needs --mlflow")


def test_without_mlflow_installed_the_flag_is_refused_naming_the_install_command(tmp_path):
    argv = ["--space", "counting_ones", "--results-dir", str(tmp_path / "r"), "--mlflow"]
    code = f"import sys; sys.modules['mlflow'] = None; from tuning import run; sys.exit(run.main({argv!r}))"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr[-3000:]
    assert done.stderr.strip().splitlines() == [
        "tuning.run: error: --mlflow needs MLflow, which is not installed: pip install 'tuning[mlflow]'"]


def test_epochs_are_never_split_across_batches():
    from types import SimpleNamespace

    metrics = [SimpleNamespace(step=s, key=k) for s in range(1, 8) for k in "abc"]
    batches = list(tracking_store.batches(metrics, per_batch=4))
    assert sum(batches, []) == metrics
    assert all(b[0].step != prev[-1].step for prev, b in zip(batches, batches[1:]))


# ---------------------------------------------------------------- last: it stops the module's server

@pytest.mark.slow  # a second search against a server stopped under it: make test-all
@pytest.mark.timeout(600)
def test_a_server_stopped_mid_run_neither_stops_the_search_nor_loses_its_files(server, ray_here, tmp_path,
                                                                              monkeypatch):
    """Stops the module's server: keep it the last test here that uses one."""
    for name, value in {"EVERY_S": 0.5, "RETRIES": 2, "TIMEOUT_S": 2, "FLUSH_S": 15}.items():
        monkeypatch.setenv(f"TUNING_MLFLOW_{name}", str(value))  # a down server costs seconds, not minutes
    results, gate = tmp_path / "results", tmp_path / "gate"
    gate.touch()  # no epoch starts until the server is gone
    space = write_space(tmp_path, STEADY.format(strategy="random", epochs=2, rf=2, gate=str(gate)))
    url = server.url

    def stop_the_server_mid_run():
        try:
            _wait(lambda: list(tmp_path.glob("gate.held-*")))  # the parent run is open, a trial waits at epoch 1
            server.stop()
        finally:
            gate.unlink()

    stopper = threading.Thread(target=stop_the_server_mid_run)
    stopper.start()
    result = tuning.search(None, str(space), results_dir=results, mlflow=url, mlflow_experiment="stopped")
    stopper.join()
    assert result.status == "finished" and server.proc.poll() is not None
    trials = pd.read_csv(results / "trials.csv")
    assert len(trials) == 6 and (trials["status"] == "TERMINATED").all() and (trials["epochs"] == 2).all()
    assert len(pd.read_csv(results / "epochs.csv")) == 12
    assert (results / "report.html").stat().st_size and (results / "best_config.json").is_file()
    line = next(ln for ln in result.summary().splitlines() if ln.startswith("MLflow logging failed"))
    assert f"experiment 'stopped' at {url} holds only part of this search" in line, line
    assert line.endswith("its files are complete")
    assert json.loads((results / "run.json").read_text())["mlflow"]["parent_run_id"]
