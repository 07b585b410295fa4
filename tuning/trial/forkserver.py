"""Trial processes forked from one warm process per node (a fork server), so that torch is held once.

Why: a CIFAR trial's own process held about 716 MB more per trial than the trial before it, even
with the data mapped once per node (docs/performance.md, "One copy of the data per node"). Most of
it was not the trial's: `import torch` alone is about 470 MB of private pages per process
(anonymous memory, and the relocated pages of torch's libraries). Here one process per node
imports torch and the trainer once and forks a child per trial; a child shares those pages with it
copy-on-write and holds privately only what it writes: the model, the optimizer, the batches.
The Ray actor that runs the trial never imports torch. It relays the child's epochs to Tune; when Tune stops or pauses the trial
the child drops the job and waits for the Ray process's next trial. A fork costs milliseconds
where a fresh process's torch import costs seconds, so trials also start sooner.

Linux and macOS only (os.fork); TUNING_FORK_SERVER=0 keeps every trial in its own process, as
before (tuning.bench compares both). The trial's side is here; the server's process, in
tuning.trial.forkhost. No Ray here: tuning.backend.trainables decides which trials
run here, and names the node and the process whose end ends the server (the raylet).

The server starts no thread of its own and runs no torch operation before it forks: a child of a
process with OpenMP threads can hang, and a fork copies only the forking thread. (numpy's OpenBLAS
pool is the one thread its imports start; OpenBLAS handles fork itself.)
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import select
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from multiprocessing.connection import Connection
from typing import Any, Callable

from tuning.trial import forkhost

log = logging.getLogger(__name__)

ENV = "TUNING_FORK_SERVER"  # 0: every trial process imports torch itself (as before)
START_TIMEOUT_S = 120.0  # importing torch with every core busy took up to 10 s here


class ChildDied(RuntimeError):
    """The forked trial process ended without a result or an error: killed (out of memory?) or crashed."""


class RemoteTraceback(Exception):
    """The traceback of an exception raised in the forked process, as its cause (as concurrent.futures does)."""

    def __str__(self) -> str:
        return self.args[0]


def enabled() -> bool:
    return hasattr(os, "fork") and hasattr(socket, "send_fds") and os.environ.get(ENV, "").strip() != "0"


def address(node_key: str) -> str:
    """The server's socket for `node_key` (one Ray job on one node: jobs may bring different code).
    Hashed: a Unix socket's path has at most 107 bytes."""
    folder = os.path.join(tempfile.gettempdir(), f"tuning-fork-{os.getuid()}")  # with its lock and log files
    os.makedirs(folder, mode=0o700, exist_ok=True)
    # The trial sends its environment (keys, tokens) there and unpickles what comes back: on a
    # shared machine the folder must be this user's alone, not one another user made first.
    st = os.lstat(folder)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022:  # others may not write
        raise RuntimeError(f"{folder} is not a private folder of this user (owner {st.st_uid}, mode "
                           f"{stat.S_IMODE(st.st_mode):o}): remove it, or set TMPDIR to a folder of your own")
    return os.path.join(folder, hashlib.sha1(node_key.encode()).hexdigest()[:16] + ".sock")


# ---------------------------------------------------------------- the trial's side


# The child this process's last job ran in, kept for its next one: Tune reuses a trial's actor for
# the next trial, and a kept child has its data mapped and its first-step costs (copy-on-write
# faults, oneDNN's kernels) behind it, where a new fork pays them again (tuning.bench, trial section).
_KEPT: dict[str, tuple[Connection, int | None]] = {}


def run(job: Callable[[Callable[[str, Any], None]], Any], on_message: Callable[[str, Any], None], *,
        node_key: str, watch_pid: int) -> Any:
    """Run `job(send)` in a process forked from this node's server (started here if it is not
    running), and return what it returns. Each `send(kind, payload)` in the child calls
    `on_message(kind, payload)` here and waits for it: no compute past an epoch the trial may not
    want. A job that returns, or that on_message ends by raising (Tune stopping or pausing the
    trial), leaves its child idle for this process's next job; after an error the child is gone
    before this returns; if this process dies, the child ends itself. `job` travels
    by pickle: a module-level function or a partial of one."""
    conn, child = _KEPT.pop(node_key, (None, None))
    if conn is not None and not _idle(child):  # it died meanwhile (the OOM killer?): a new one
        _drop(conn, child, kill=False)
        conn = None
    if conn is None:
        conn = _connect(address(node_key), watch_pid)
        child = None
    keep = False
    try:
        try:
            if child is None:
                if not conn.poll(START_TIMEOUT_S):
                    raise EOFError("no answer")
                child = _handle(conn.recv())
            conn.send((job, dict(os.environ), os.getcwd(), list(sys.path)))
        except (EOFError, OSError) as exc:  # the server could not fork (out of memory?) or was exiting
            raise ChildDied(f"the node's fork server did not start the trial's process ({exc or type(exc).__name__}); "
                            f"its log: {address(node_key)}.log; {ENV}=0 runs trials without it") from None
        while True:
            try:
                kind, payload = conn.recv()
            except (EOFError, OSError):
                raise ChildDied("the trial's process died without a result: killed, out of memory, "
                                "or crashed (see the trial's log)") from None
            if kind == "done":
                keep = True
                return payload
            if kind == "error":
                exc, tb = payload
                raise exc from RemoteTraceback(tb)
            try:
                on_message(kind, payload)
            except BaseException:
                # Tune ends a trial (stopped, paused, or at its last epoch: SystemExit) by raising
                # here: the child drops the job where it waits, and stays for the next one. Tune's
                # exception goes on whatever the child does meanwhile.
                try:
                    conn.send("stop")
                    keep = conn.poll(10.0) and conn.recv() == ("abandoned", None)
                except (EOFError, OSError):
                    keep = False
                raise
            try:
                conn.send("go")
            except OSError:
                raise ChildDied("the trial's process died between epochs: killed, out of memory, or crashed") from None
    finally:
        if keep:
            _KEPT[node_key] = (conn, child)
        else:
            _drop(conn, child, kill=True)


def _idle(pidfd: int | None) -> bool:
    """A kept child still there (where there is no pidfd to ask: assumed; a dead one shows as ChildDied)."""
    return pidfd is None or not select.select([pidfd], [], [], 0)[0]


def _drop(conn: Connection, pidfd: int | None, kill: bool) -> None:
    conn.close()  # a child waiting for its next message sees the end of the socket and exits
    if pidfd is not None:
        _reap(pidfd, kill)


def _handle(pid: int) -> int | None:
    """A handle on the child that a reused pid cannot fool (Linux's pidfd), or None where there is none."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def _reap(pidfd: int, kill: bool) -> None:
    """Wait (a few seconds at most) until the child is gone, killing it first if it may still be busy."""
    try:
        if kill:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        select.select([pidfd], [], [], 5.0)  # readable once the process has exited
    finally:
        os.close(pidfd)


def _connect(path: str, watch_pid: int) -> Connection:
    """A connection to the server at `path`, with this process's stdout and stderr handed over
    (so the trial's output stays the trial's); the first trial on a node starts the server."""
    sock = _dial(path)
    if sock is None:
        with open(path + ".lock", "w") as lock:  # one starter per node; the others wait, then dial
            fcntl.flock(lock, fcntl.LOCK_EX)
            sock = _dial(path) or _start(path, watch_pid)
    socket.send_fds(sock, [b"fds"], [1, 2])
    return Connection(sock.detach())


def _dial(path: str) -> socket.socket | None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
        return sock
    except (FileNotFoundError, ConnectionRefusedError):  # none yet, or a dead server's socket file
        sock.close()
        return None


def _start(path: str, watch_pid: int) -> socket.socket:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    # Detached (forked twice, in a session of its own): Ray kills a worker's child processes when the
    # worker exits, and this server must outlive the trial that started it. Its sys.path is this
    # process's (a Ray job's working dir); its own output goes to a file, not to this trial's
    # output (which may be a pipe someone reads to its end); each child takes its own trial's.
    code = ("import json, os, sys\n"
            "pid = os.fork()\n"
            "if pid:\n    print(pid, flush=True)\n    os._exit(0)\n"
            "os.dup2(2, 1)\n"
            "sys.path[:0] = json.loads(os.environ.pop('TUNING_FORK_PATH'))\n"
            f"from tuning.trial.forkhost import serve\nserve({path!r}, {watch_pid})\n")
    try:
        with open(path + ".log", "ab") as out:
            launcher = subprocess.run([sys.executable, "-c", code], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                      stderr=out, start_new_session=True, check=True, timeout=60,
                                      env={**os.environ, "TUNING_FORK_PATH": json.dumps(sys.path)})
        server = int(launcher.stdout)
    except (subprocess.SubprocessError, OSError, ValueError) as exc:
        raise RuntimeError(f"the fork server did not start ({type(exc).__name__}; see {path}.log); set {ENV}=0 "
                           "to run trials without it") from exc
    log.info("started the node's fork server (pid %d) at %s", server, path)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        sock = _dial(path)
        if sock is not None:
            return sock
        if not forkhost.alive(server):
            raise RuntimeError(f"the fork server exited before it listened (its error is in {path}.log); "
                               f"set {ENV}=0 to run trials without it")
        time.sleep(0.05)
    os.kill(server, signal.SIGKILL)
    raise RuntimeError(f"the fork server did not listen within {START_TIMEOUT_S:g} s; set {ENV}=0 to run "
                       "trials without it")


# ---------------------------------------------------------------- a CIFAR trial's job


def cifar_trial(send: Callable[[str, Any], None], *, kwargs: dict, checkpoints: list[str], source,
                max_train: int | None, max_val: int | None, threads: int) -> dict:
    """train_cifar in the forked process: restore from the newest readable checkpoint of
    `checkpoints`, then per epoch write the checkpoint into a fresh directory here (the trial's
    process holds no torch to write it) and send ("epoch", (metrics, directory)); the receiver
    owns the directory from then on."""
    import torch

    from tuning.trial import trainer, trialstate
    from tuning.trial.data import load_train_val

    state, epochs = trialstate.load_newest(checkpoints)
    send("restored", epochs)
    torch.set_num_threads(threads)
    train, val = load_train_val(source, max_train, max_val)

    def on_epoch(metrics: dict, state: dict) -> None:
        directory = tempfile.mkdtemp(prefix="tuning-epoch-")
        try:
            trialstate.write_checkpoint(state, directory)
        except BaseException:
            shutil.rmtree(directory, ignore_errors=True)
            raise
        # Tune's "pid" is the trial's Ray process; this one trained, and its memory is the trial's
        # (the trainer's own figures win; a diverged epoch comes without them).
        send("epoch", ({**trialstate.memory(), **metrics, "trainer_pid": os.getpid()}, directory))

    return trainer.train_cifar(**kwargs, state=state, train=train, val=val, device="cpu", on_epoch=on_epoch)
