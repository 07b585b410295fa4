"""Trials forked from the node's fork server (tuning.trial.forkserver): real forks, real torch training."""

import functools
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

import fork_jobs
from tuning.trial import forkserver, trainer
from tuning.trial.data import load_train_val

pytestmark = pytest.mark.skipif(not forkserver.enabled(), reason="no os.fork here")


@pytest.fixture(scope="module")
def node_key():
    """One server for the module's tests (its start imports torch: seconds); it ends with this process."""
    return uuid.uuid4().hex


def _gone(pid: int, within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def test_a_job_runs_in_a_forked_child_with_torch_already_imported(node_key):
    got = []
    result = forkserver.run(functools.partial(fork_jobs.report_twice, tag="a"), lambda k, p: got.append((k, p)),
                            node_key=node_key, watch_pid=os.getpid())
    assert result == {"tag": "a"}
    assert [k for k, _ in got] == ["epoch", "epoch"]
    child = got[0][1]["pid"]
    assert child != os.getpid() and got[1][1]["pid"] == child
    assert got[0][1]["torch_preloaded"]  # the server's import, not the job's
    # The next trial of this process (a reused actor) runs in the same child, already warm.
    again = []
    forkserver.run(functools.partial(fork_jobs.report_twice, tag="b"), lambda k, p: again.append(p),
                   node_key=node_key, watch_pid=os.getpid())
    assert again[0]["pid"] == child


def _pid_of_next_job(node_key) -> int:
    got = []
    forkserver.run(functools.partial(fork_jobs.report_twice, tag="e"), lambda k, p: got.append(p["pid"]),
                   node_key=node_key, watch_pid=os.getpid())
    return got[0]


def test_a_failed_job_or_a_dead_child_is_not_reused(node_key):
    child = _pid_of_next_job(node_key)
    with pytest.raises(ValueError):
        forkserver.run(fork_jobs.fail, lambda k, p: None, node_key=node_key, watch_pid=os.getpid())
    assert _gone(child, 5.0)  # a failed job's child exits: its state is unknown
    fresh = _pid_of_next_job(node_key)
    assert fresh != child
    os.kill(fresh, signal.SIGKILL)  # dies while idle, as the OOM killer may pick it
    assert _gone(fresh, 5.0)
    assert _pid_of_next_job(node_key) not in (fresh, child)


def test_a_trial_stopped_between_epochs_drops_its_job_and_its_child_waits_for_the_next(node_key):
    seen = []

    def stop(kind, payload):  # as Tune stops or pauses a trial: by raising out of the report
        seen.append(payload)
        raise SystemExit(0)

    with pytest.raises(SystemExit):
        forkserver.run(functools.partial(fork_jobs.report_twice, tag="c"), stop, node_key=node_key,
                       watch_pid=os.getpid())
    assert len(seen) == 1 and seen[0]["tag"] == "c"  # nothing trained past the epoch it was stopped at
    got = []
    forkserver.run(functools.partial(fork_jobs.report_twice, tag="d"), lambda k, p: got.append(p),
                   node_key=node_key, watch_pid=os.getpid())
    assert got[0]["tag"] == "d" and got[0]["pid"] == seen[0]["pid"] and len(got) == 2


def test_errors_come_back_with_their_type_and_the_childs_traceback(node_key):
    with pytest.raises(ValueError, match="does not split") as info:
        forkserver.run(fork_jobs.fail, lambda k, p: None, node_key=node_key, watch_pid=os.getpid())
    assert isinstance(info.value.__cause__, forkserver.RemoteTraceback)
    assert "fork_jobs.py" in str(info.value.__cause__)


def test_a_child_that_dies_is_an_error_not_a_hang(node_key):
    with pytest.raises(forkserver.ChildDied, match="died without a result"):
        forkserver.run(fork_jobs.die, lambda k, p: None, node_key=node_key, watch_pid=os.getpid())


def test_the_child_ends_when_the_trials_process_is_killed(tmp_path, node_key):
    pid_file = tmp_path / "pid"
    code = ("import functools, os, sys; sys.path[:0] = [%r]; import fork_jobs; from tuning.trial import forkserver; "
            "forkserver.run(functools.partial(fork_jobs.hang, pid_file=%r), print, node_key=%r, watch_pid=os.getpid())"
            % (str(Path(fork_jobs.__file__).parent), str(pid_file), node_key))
    caller = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 60
        while not pid_file.exists() or not pid_file.read_text():
            assert time.monotonic() < deadline and caller.poll() is None
            time.sleep(0.05)
        child = int(pid_file.read_text())
    finally:
        caller.send_signal(signal.SIGKILL)  # as the OOM killer ends a trial's process
        caller.wait()
    assert _gone(child, 5.0)


def test_the_server_ends_with_the_process_it_watches(tmp_path):
    watched = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    key = uuid.uuid4().hex
    try:
        forkserver.run(functools.partial(fork_jobs.report_twice, tag="d"), lambda k, p: None, node_key=key,
                       watch_pid=watched.pid)
        assert Path(forkserver.address(key)).exists()
    finally:
        watched.kill()
        watched.wait()
    deadline = time.monotonic() + 10
    while Path(forkserver.address(key)).exists():  # the server removes its socket as it exits
        assert time.monotonic() < deadline
        time.sleep(0.1)


def test_a_folder_another_user_could_have_made_is_refused(tmp_path, monkeypatch):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    folder = tmp_path / f"tuning-fork-{os.getuid()}"
    folder.mkdir(mode=0o777)
    folder.chmod(0o777)  # as a folder made first by someone else, writable by all
    with pytest.raises(RuntimeError, match="not a private folder"):
        forkserver.address("key")
    folder.chmod(0o700)
    assert forkserver.address("key").startswith(str(folder))


def test_the_caller_never_imports_torch(synthetic_source):
    # A trial's Ray process: it relays a CIFAR trial's epochs without torch in its own memory.
    code = ("import functools, os, sys; from tuning.trial import forkserver; from tuning.contract import DataSource; "
            f"job = functools.partial(forkserver.cifar_trial, kwargs=dict(lr=1e-3, batch_size=64, epochs=1, seed=0, "
            f"max_steps=2), checkpoints=[], source=DataSource({synthetic_source.kind!r}, {synthetic_source.root!r}), "
            "max_train=256, "
            "max_val=128, threads=1); "
            f"got = []; forkserver.run(job, lambda k, p: got.append(k), node_key={uuid.uuid4().hex!r}, "
            "watch_pid=os.getpid()); "
            "print(got, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[-1] == "False" and "'epoch'" in out.stdout


def _forked_cifar(node_key, source, checkpoints, epochs):
    """(messages, metrics per epoch) of a forked CIFAR trial; checkpoint directories are kept."""
    messages = []
    job = functools.partial(forkserver.cifar_trial, kwargs=dict(lr=2e-3, batch_size=64, epochs=epochs, seed=3),
                            checkpoints=checkpoints, source=source, max_train=256, max_val=128, threads=1)
    forkserver.run(job, lambda k, p: messages.append((k, p)), node_key=node_key, watch_pid=os.getpid())
    return messages


@pytest.fixture
def cleanup():
    """Directories the forked trials wrote their checkpoints to: the receiver owns them."""
    messages = []
    yield messages
    for kind, payload in messages:
        if kind == "epoch":
            shutil.rmtree(payload[1], ignore_errors=True)


_VARYING = {"train_time_s", "eval_time_s", "images_per_s", "rss_mb", "peak_rss_mb", "trainer_pid", "latency_ms"}


def test_a_forked_trial_trains_exactly_as_in_its_own_process(node_key, synthetic_source, cleanup):
    import torch

    messages = _forked_cifar(node_key, synthetic_source, [], epochs=2)
    cleanup += messages
    assert messages[0] == ("restored", 0)
    forked = [{k: v for k, v in m.items() if k not in _VARYING} for _, (m, _) in messages[1:]]
    train, val = load_train_val(synthetic_source, 256, 128)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        here = []
        trainer.train_cifar(lr=2e-3, batch_size=64, epochs=2, seed=3, train=train, val=val,
                            on_epoch=lambda m, s: here.append({k: v for k, v in m.items() if k not in _VARYING}))
    finally:
        torch.set_num_threads(threads)
    assert forked == here and len(here) == 2


def test_a_forked_trial_resumes_from_its_checkpoint(node_key, synthetic_source, cleanup):
    first = _forked_cifar(node_key, synthetic_source, [], epochs=1)
    cleanup += first
    (_, (metrics, checkpoint)) = first[1]
    assert metrics["trainer_pid"] != os.getpid() and (Path(checkpoint) / "state.pt").exists()
    resumed = _forked_cifar(node_key, synthetic_source, [checkpoint], epochs=2)
    cleanup += resumed
    assert resumed[0] == ("restored", 1)
    assert [m["epoch"] for _, (m, _) in resumed[1:]] == [2]  # epoch 1 not trained again
