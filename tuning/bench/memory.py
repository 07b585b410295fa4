"""``python -m tuning.bench``'s memory sections: one trial's peak RSS and its growth, and the node's
memory (PSS and USS summed over the trial processes) with 1, 2 and 4 CIFAR trials at once."""

from __future__ import annotations

import dataclasses
import os
import re
import threading

from tuning import spaces
from tuning.trial import data, datasplit
from tuning.bench import harness
from tuning.bench.harness import row, run_tune, synthetic

MAX_STEPS = 20  # optimizer steps per node-memory trial: enough to reach the training peak


def bench_memory(quick: bool) -> list[dict]:
    epochs, n = (4, 512) if quick else (10, 1024)
    rec = run_tune(spaces.load("cifar_asha"), "random", num_samples=1, max_epochs=epochs, cpus=os.cpu_count() or 1,
                   source=synthetic(n), max_train=n, max_val=256)
    rss = [r["rss_mb"] for r in rec.rows]
    detail = f"one CIFAR trial, {epochs} epochs on {n:,} images"
    return [row("memory", "trial_peak_rss_mb", max(r["peak_rss_mb"] for r in rec.rows), "MB", detail),
            row("memory", "rss_growth_epoch2_to_last_mb", rss[-1] - rss[1], "MB", detail)]


# ---------------------------------------------------------------- node memory

_FIGURES = ("pss", "uss", "data", "store")


def _process_memory(pids) -> dict[str, float]:
    """PSS and USS (MB) of these processes together, and the PSS of their mappings of the node's
    data files (tuning.trial.datasplit.node_cache) and of Ray's object store (plasma). PSS counts a page shared
    by n processes as 1/n in each, so the sum over processes counts it once; RSS would count it n
    times. One pass over /proc/PID/smaps each (psutil's memory_maps took a third of a core here)."""
    out = dict.fromkeys(_FIGURES, 0.0)
    for pid in pids:
        kind = None
        with open(f"/proc/{pid}/smaps") as f:
            for line in f:
                if line.startswith("Pss:"):
                    mb = int(line.split()[1]) / 1024
                    out["pss"] += mb
                    if kind:
                        out[kind] += mb
                elif line.startswith(("Private_Clean:", "Private_Dirty:")):
                    out["uss"] += int(line.split()[1]) / 1024
                elif not line[0].isupper():  # a mapping's first line: "start-end perms offset dev inode [path]"
                    kind = "data" if f"/{datasplit.CACHE_DIR}/" in line else "store" if "plasma" in line else None
    return out


def _fork_servers(ours: set[int]) -> list:
    """The fork servers (tuning.trial.forkserver) of the local Ray this process started: detached, so
    not among its children, but each watches a raylet that is."""
    import psutil

    found = []
    for p in psutil.process_iter(["cmdline"]):
        watched = re.search(r"from tuning\.forkserver import serve\nserve\('.*', (\d+)\)", "\n".join(p.info["cmdline"] or []))
        try:
            if watched and int(watched[1]) in ours and p.parent().cmdline() != p.info["cmdline"]:  # not a forked trial
                found.append(p)
        except (psutil.Error, AttributeError):  # gone meanwhile, or no parent
            continue
    return found


class MemorySampler(threading.Thread):
    """Every `every_s`, the memory of each busy Ray worker process of this process's Ray (title
    "ray::...", not idle) with its own children (a trial's DDP ranks), and of each fork server with
    its children (the trials it forked): samples[i][pid] = _process_memory's figures, under the
    key ("fork server", pid) for a server. No Ray calls: processes by parentage and title, through
    psutil."""

    def __init__(self, every_s: float):
        super().__init__(daemon=True)
        self.every_s, self.samples, self._done = every_s, [], threading.Event()

    def run(self) -> None:
        import psutil

        me = psutil.Process()
        while not self._done.wait(self.every_s):
            sample = {}
            ours = me.children(recursive=True)  # the local Ray this process started, and nobody else's
            for p in ours:
                try:
                    title = (p.cmdline() or [""])[0]
                    if title.startswith("ray::") and not title.startswith("ray::IDLE"):
                        sample[p.pid] = _process_memory([p.pid, *(c.pid for c in p.children(recursive=True))])
                except (psutil.Error, OSError):  # gone meanwhile
                    continue
            for server in _fork_servers({p.pid for p in ours}):
                try:
                    sample[("fork server", server.pid)] = _process_memory(
                        [server.pid, *(c.pid for c in server.children(recursive=True))])
                except (psutil.Error, OSError):
                    continue
            self.samples.append(sample)

    def peak(self, pids: set[int]) -> dict[str, float]:
        """The sample where these processes and the fork servers together held the most (PSS),
        summed over them; "server" is the fork servers' share, with the trials they forked."""
        def total(s: dict) -> dict[str, float]:
            keys = [k for k in s if k in pids or isinstance(k, tuple)]
            out = {f: sum(s[k][f] for k in keys) for f in _FIGURES}
            out["server"] = sum(s[k]["pss"] for k in s if isinstance(k, tuple))
            return out

        return max(map(total, self.samples), key=lambda m: m["pss"], default=dict.fromkeys((*_FIGURES, "server"), 0.0))

    def stop(self) -> None:
        self._done.set()
        self.join()


def bench_node_memory(quick: bool) -> list[dict]:
    """1, 2 and 4 CIFAR trials of one epoch at once, all on the full data, each mode with a Ray of
    its own (the trial processes read TUNING_SHARED_DATA from the environment Ray started with):
    every process decoding its own copy (unshared), one copy per node (shared), then also torch
    held once per node, with each trial's training forked from the node's fork server (forked)."""
    from tuning import backend
    from tuning.trial import forkserver

    cpus = os.cpu_count() or 1
    if quick:
        source = harness.generated(2000, 200)
        counts, what = (1, 2), "2,000 synthetic images"
    elif data.has_cifar10(harness.DATA_DIR):
        source, counts, what = data.DataSource("cifar10", str(harness.DATA_DIR.absolute())), (1, 2, 4), "CIFAR-10"
    else:
        source = harness.generated(50_000)
        counts, what = (1, 2, 4), "50,000 synthetic images (CIFAR-10's format and size)"
    # Memory, not speed, is measured: a capped epoch loads and augments the whole split as a full one
    # does, and the six steps (1, 2, 4 trials, twice) take minutes here, not the ~90 min full epochs took.
    space = spaces.load("cifar_asha")
    space = dataclasses.replace(space, fixed={**space.fixed, "max_steps": MAX_STEPS})
    # --no-shared-data: unshared only; --no-fork-server: no forked mode
    modes = ("unshared",) if not datasplit.sharing_on() else ("unshared", "shared", "forked") if forkserver.enabled() \
        else ("unshared", "shared")
    rows = []
    try:
        for mode in modes:
            backend.stop_ray()
            switches = {datasplit.SHARED_ENV: "0" if mode == "unshared" else "1",
                        forkserver.ENV: "1" if mode == "forked" else "0"}
            peaks = {}
            with backend.environ(switches):  # trial processes inherit them from the Ray started in here
                for k in counts:
                    sampler = MemorySampler(0.5 if quick else 1.0)
                    sampler.start()
                    try:
                        rec = run_tune(space, "random", num_samples=k, max_epochs=1, cpus=cpus / k, source=source)
                    finally:
                        sampler.stop()
                    peaks[k] = sampler.peak({r["pid"] for r in rec.rows})
            for k, m in peaks.items():
                detail = (f"PSS of the trial processes together at their peak, {mode}: {k} CIFAR trial(s) of 1 epoch "
                          f"(capped at {MAX_STEPS} steps) "
                          f"at once on {what}, {cpus / k:g} CPUs each")
                rows += [row("node_memory", f"trials_pss_mb_{k}_{mode}", m["pss"], "MB", detail),
                         row("node_memory", f"trials_uss_mb_{k}_{mode}", m["uss"], "MB",
                             "USS at that moment: pages one process alone holds")]
            top = max(counts)
            rows += [row("node_memory", f"data_file_pss_mb_{top}_{mode}", peaks[top]["data"], "MB",
                         f"of trials_pss_mb_{top}_{mode}: the node's mapped data file (one copy for all)"),
                     row("node_memory", f"object_store_pss_mb_{top}_{mode}", peaks[top]["store"], "MB",
                         f"of trials_pss_mb_{top}_{mode}: Ray's object store mapped by the trials"),
                     row("node_memory", f"fork_server_pss_mb_{top}_{mode}", peaks[top]["server"], "MB",
                         f"of trials_pss_mb_{top}_{mode}: the node's fork server with the trials it forked"),
                     row("node_memory", f"added_per_trial_mb_{mode}", (peaks[top]["pss"] - peaks[1]["pss"]) / (top - 1),
                         "MB", f"(trials_pss_mb_{top} - trials_pss_mb_1) / {top - 1}, {mode}")]
    finally:
        backend.stop_ray()  # the next section's Ray starts with the environment as it was
    return rows
