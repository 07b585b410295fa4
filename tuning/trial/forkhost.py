"""The fork server's own process (tuning.trial.forkserver starts one per node and connects trials to it):
it imports torch and the trainer once, then forks a child per trial process that connects; each
child runs that trial's jobs and relays their messages. No Ray, and no thread or torch operation
before a fork (tuning.trial.forkserver says why).
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import logging
import os
import pickle
import queue
import signal
import socket
import sys
import threading
import time
import traceback
from multiprocessing.connection import Connection
from typing import Any

log = logging.getLogger(__name__)

PRELOAD = ("torch", "torch._dynamo", "tuning.trial.trainer", "tuning.trial.data", "tuning.trial.trialstate")
IDLE_EXIT_S = 300.0  # a server nobody asked for a fork this long gives its memory back
_POLL_S = 1.0


class _Abandoned(BaseException):
    """Raised out of a job's send() when the trial no longer wants it: BaseException, so that a
    trainer's `except Exception` does not swallow it."""


def serve(path: str, watch_pid: int) -> None:
    """Import what trials need, then fork a child per connection until `watch_pid` (the raylet)
    is gone or nobody connected for IDLE_EXIT_S."""
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError as exc:  # a node without torch still runs its users' plain trainers
            log.warning("fork server: %s not preloaded (%s)", name, exc)
    # Objects made so far move out of the collector's sight: a collection in a child would
    # otherwise write to (and so copy) every page holding one of them.
    gc.freeze()
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps the children
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(64)
    server.settimeout(_POLL_S)
    mine = os.stat(path).st_ino
    last, children = time.monotonic(), set()
    try:
        while alive(watch_pid):
            children = {pid for pid in children if alive(pid)}  # a kept child may idle for hours
            if not children and time.monotonic() - last > IDLE_EXIT_S:
                break
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            last = time.monotonic()
            try:
                pid = os.fork()
            except OSError as exc:  # out of memory or processes: this trial fails, the server stays
                log.error("fork server: cannot fork a trial's process: %s", exc)
                conn.close()
                continue
            if pid == 0:
                server.close()
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the trainer may wait for children of its own
                code = 1
                try:
                    code = _child(conn)
                finally:
                    for stream in (sys.stdout, sys.stderr):  # os._exit does not flush
                        with contextlib.suppress(Exception):
                            stream.flush()
                    os._exit(code)
            children.add(pid)
            conn.close()
    finally:
        with contextlib.suppress(OSError):
            if os.stat(path).st_ino == mine:  # not a newer server's socket
                os.unlink(path)
                # The lock file stays: an actor may hold it, or be about to open it, right now.
                if not os.path.getsize(path + ".log"):
                    os.unlink(path + ".log")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, someone else's
        return True


def _child(sock: socket.socket) -> int:
    """Jobs of one trial process, one after the other: take over its stdout and stderr, and per
    job its environment, working dir and sys.path, run the job and relay. Exit when the trial's
    process is gone (its end of the socket closes), or after a job that failed."""
    _, fds, _, _ = socket.recv_fds(sock, 16, 2)
    for target, fd in zip((1, 2), fds):
        os.dup2(fd, target)
        os.close(fd)
    sys.stdout.reconfigure(line_buffering=True)  # made for the server's log file: block-buffered
    conn = Connection(sock.detach())
    conn.send(os.getpid())
    inbox: queue.Queue = queue.Queue()
    threading.Thread(target=_read, args=(conn, inbox), daemon=True).start()

    def send(kind: str, payload: Any) -> None:
        conn.send((kind, payload))
        if inbox.get() == "stop":
            raise _Abandoned

    while True:
        try:
            message = inbox.get()
            if isinstance(message, BaseException):  # the job could not be unpickled here
                raise message
            job, env, cwd, path = message
            os.environ.clear()
            os.environ.update(env)
            os.chdir(cwd)
            sys.path[:] = path
            conn.send(("done", job(send)))
        except _Abandoned:  # its frames, and the model in them, go with the exception
            conn.send(("abandoned", None))
        except BaseException as exc:  # noqa: BLE001 (everything goes back to the trial)
            conn.send(("error", (_portable(exc), "".join(traceback.format_exception(exc)))))
            return 1  # its state is unknown: the next job gets a new child


def _read(conn: Connection, inbox: queue.Queue) -> None:
    while True:
        try:
            inbox.put(conn.recv())
        except (EOFError, OSError):  # the trial's process ended: so does this one, mid-step or not
            os._exit(1)
        except Exception as exc:  # a message that does not unpickle here (a job's module missing)
            inbox.put(exc)


# Modules whose exceptions the trial's process unpickles without importing torch (tuning.contract
# holds DataError, which tuning.trial.data raises, for that reason).
_PORTABLE = ("builtins", "tuning.cli", "tuning.contract", "tuning.trial.forkserver", __name__)


def _portable(exc: BaseException) -> BaseException:
    """The exception itself where the trial's process can unpickle it without importing torch,
    else a RuntimeError with its type and message."""
    if type(exc).__module__ in _PORTABLE:
        with contextlib.suppress(Exception):
            return pickle.loads(pickle.dumps(exc))
    return RuntimeError(f"{type(exc).__name__}: {exc}")
