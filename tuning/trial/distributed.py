"""Run a training function as a DistributedDataParallel job of `world_size` ranks on one machine.

The caller (a Tune trial) stays a supervisor: it spawns every rank as a child process, forwards
rank 0's per-epoch metrics and state to its own ``on_epoch`` (which reports to Tune and writes the
checkpoint), and owns the ranks' lifetime. Whatever ends the supervisor's call (the job finishing,
a rank failing, Tune stopping or pausing the trial by raising out of ``on_epoch``), every rank is
gone before the call returns. No Ray here: the trial adapter in tuning.backend calls this.

Why spawn from the trial, not Ray Train: starting 2 gloo ranks this way costs 3.5-3.8 s per trial
on this project's 2-core machine (tuning.bench, ddp section: rank_start_cost_per_trial in
docs/bench/bench.csv and docs/bench/2026-11-30/bench.csv), while Ray Train's TorchTrainer inside a Tune trial starts its own worker
actors and placement group for every trial (its cost is not measured here; docs/ddp.md). Ray
Train stays the route for ranks across nodes.
"""

from __future__ import annotations

import ctypes
import logging
import os
import queue
import signal
import sys
import time
import traceback
from datetime import timedelta
from typing import Callable

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

log = logging.getLogger(__name__)

# A rank waiting longer than this on rendezvous or on a collective has lost a peer: fail, don't hang.
TIMEOUT_S = float(os.environ.get("TUNING_DDP_TIMEOUT_S", "120"))
_POLL_S = 0.2


class RankFailed(RuntimeError):
    """A rank raised or died; the message carries its error."""


def _die_with_parent() -> None:
    """Linux: the kernel kills this process when the thread that spawned it exits, so ranks never
    outlive a trial whose process was killed outright (SIGKILL leaves no chance to clean up)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # not Linux: the supervisor's own cleanup is all there is


def _rank_main(rank: int, fn: Callable, kwargs: dict, world_size: int, backend: str, device_type: str,
               threads: int, timeout_s: float, port_q, result_q, ack_q) -> None:
    """One rank: rendezvous, run fn, hand rank 0's epochs to the supervisor. Importable on purpose:
    spawn pickles functions by reference."""
    _die_with_parent()
    torch.set_num_threads(threads)
    timeout = timedelta(seconds=timeout_s)
    # Rank 0 binds port 0 and the OS picks a free port: no window in which another trial
    # starting at the same moment can take it, unlike "find a free port, then bind it".
    if rank == 0:
        store = dist.TCPStore("127.0.0.1", 0, world_size, is_master=True, timeout=timeout,
                              wait_for_workers=False)
        for _ in range(world_size - 1):
            port_q.put(store.port)
    else:
        store = dist.TCPStore("127.0.0.1", port_q.get(timeout=timeout_s), world_size, is_master=False,
                              timeout=timeout)
    device = torch.device(device_type, rank) if device_type == "cuda" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    try:
        dist.init_process_group(backend, store=store, rank=rank, world_size=world_size, timeout=timeout)

        def on_epoch(metrics: dict, state: dict) -> None:
            if rank != 0:  # rank 0 alone speaks for the job
                return
            # Clone to CPU: the queue shares tensor memory, and training goes on mutating the originals.
            snapshot = torch.utils._pytree.tree_map(
                lambda v: v.detach().to("cpu", copy=True) if isinstance(v, torch.Tensor) else v, state)
            result_q.put(("epoch", metrics, snapshot))
            ack_q.get()  # wait: no compute past an epoch the trial may not want

        metrics = fn(**kwargs, rank=rank, world_size=world_size, device=device, on_epoch=on_epoch)
        if rank == 0:
            result_q.put(("done", metrics, None))
    except BaseException as exc:
        # When one rank fails, its peers fail a moment later ("Connection closed by peer"); the
        # time stamp lets the supervisor name the rank that failed first, the real cause.
        result_q.put(("error", (time.time(), rank, traceback.format_exception(exc)), None))
        raise
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
        _leave(store, rank, world_size)
    _exit_now(result_q, port_q)  # only a rank that finished gets here: a failed one raises to its spawn wrapper


def _exit_now(*queues) -> None:
    """End a finished rank without the interpreter's teardown: about one rank exit in 20 aborted in
    it, after the job was done and the process group destroyed ("terminate called without an active
    exception", exit -6: a C++ thread still joinable when static objects are destroyed), and the
    trial failed. What the rank owes is sent first: its queued results, its output."""
    for q in queues:
        q.close()
        q.join_thread()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _leave(store, rank: int, world_size: int) -> None:
    """Rank 0 serves the TCPStore, so it exits last: a peer still tearing down when the store
    vanished once aborted ("terminate called without an active exception", exit -6)."""
    try:
        if rank == 0:
            store.wait([f"left/{r}" for r in range(1, world_size)], timedelta(seconds=10))
        else:
            store.set(f"left/{rank}", "1")
    except Exception:  # a peer that failed never says goodbye: the supervisor handles that
        pass


def run(fn: Callable, kwargs: dict, *, world_size: int, backend: str = "gloo", device_type: str = "cpu",
        threads: int = 1, on_epoch: Callable[[dict, dict], None] | None = None,
        timeout_s: float = TIMEOUT_S) -> dict:
    """Run ``fn(**kwargs, rank=, world_size=, device=, on_epoch=)`` on world_size spawned ranks and
    return rank 0's result. ``fn`` must be importable (a module-level function), and tensors in
    kwargs reach the ranks through shared memory, not copies."""
    ctx = mp.get_context("spawn")
    port_q, result_q, ack_q = ctx.Queue(), ctx.Queue(), ctx.Queue()
    procs = mp.start_processes(
        _rank_main, args=(fn, kwargs, world_size, backend, device_type, threads, timeout_s,
                          port_q, result_q, ack_q),
        nprocs=world_size, join=False, start_method="spawn")
    log.debug("started %d %s ranks: pids %s", world_size, backend, procs.pids())
    try:
        while True:
            try:
                kind, metrics, state = result_q.get(timeout=_POLL_S)
            except queue.Empty:
                if _failed(procs):
                    raise _diagnose(procs, result_q, []) from None
                continue
            if kind == "error":
                raise _diagnose(procs, result_q, [metrics]) from None
            if kind == "done":
                _join(procs, result_q, timeout_s)
                return metrics
            # world_size for any trainer's rows (the CIFAR trainer reports its own; a user's seldom does)
            metrics = {"world_size": world_size, **metrics, "rank_pids": ";".join(map(str, procs.pids()))}
            if on_epoch is not None:
                on_epoch(metrics, state)  # Tune stops or pauses the trial by raising here
            ack_q.put("go")
    finally:
        _terminate(procs)
        for q in (port_q, result_q, ack_q):
            q.close()
            q.cancel_join_thread()


def _failed(procs) -> bool:
    return any(p.exitcode not in (None, 0) for p in procs.processes)


def _diagnose(procs, result_q, errors: list) -> RankFailed:
    """The failure of the rank that failed first, with its traceback."""
    deadline = time.monotonic() + 1.0  # let the peers' follow-on errors arrive too
    while time.monotonic() < deadline:
        try:
            kind, payload, _ = result_q.get(timeout=0.1)
        except queue.Empty:
            continue
        if kind == "error":
            errors.append(payload)
    if errors:
        _, rank, tb = min(errors)
        last = [line for line in "".join(tb).splitlines() if line.strip()][-1]
        return RankFailed(f"rank {rank} failed: {last}\n{''.join(tb)}")
    dead = [(i, p.exitcode) for i, p in enumerate(procs.processes) if p.exitcode not in (None, 0)]
    return RankFailed("; ".join(f"rank {i} died with exit code {code}" for i, code in dead) or "a rank died")


def _join(procs, result_q, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if _failed(procs):
            raise _diagnose(procs, result_q, [])
        if all(not p.is_alive() for p in procs.processes):
            return
        time.sleep(_POLL_S)
    raise RankFailed(f"ranks did not exit within {timeout_s:g} s of finishing")


def _terminate(procs) -> None:
    """Every rank gone, whatever happened: SIGTERM, a moment's grace, then SIGKILL."""
    alive = [p for p in procs.processes if p.is_alive()]
    for p in alive:
        p.terminate()
    deadline = time.monotonic() + 1.0
    for p in alive:
        p.join(max(0.0, deadline - time.monotonic()))
        if p.is_alive():
            p.kill()
            p.join(1.0)
