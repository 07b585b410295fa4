"""``python -m tuning.bench``: measure the service's costs, print a table, write bench.csv.

Every figure is measured in the same run on the same machine (the machine goes into
machine.json next to the CSV), and is a per-unit cost or a ratio, because absolute times on a
shared machine drift. Sections:

  overhead   N trials of t seconds of CPU work through tuning.run's path: wall time / ideal; the
             same work through a plain tune.run(reuse_actors=True) beside it, Ray's own cost
  trial      per-trial overhead of the real CIFAR trainable (first trial in a process, later ones)
  throughput the trainer's training images/s against a bare PyTorch loop, at two batch sizes
  data       loading the split the first time and from the per-process cache; augmentation cost
  memory     a trial's peak RSS and its growth from epoch 2 to the last
  node_memory  1, 2 and 4 CIFAR trials at once on the full data: the trial processes' PSS and USS
             summed, with the shared data file's, the object store's and the fork server's share;
             each trial added beyond the first; with every trial decoding its own copy, then with
             one copy per node, then also with trials forked from the node's fork server
  scheduler  epochs recomputed under BOHB; trial-seconds spent in trials ASHA later stopped; what a
             pause and resume costs and what made it cheap; Hyperband's and BOHB's wall time
             against ASHA's (tuning/bench/sched.py)
  ddp        epoch time at 1 vs 2 CPU ranks, the cost of starting a trial's ranks, and the share
             of a DDP step spent communicating
  scale      200, 2,000 and 10,000 no-op trials through tuning.search and through a plain
             tune.run: per-trial cost per tenth of the run, the driver's peak RSS, the final
             report's time; BOHB's and TPE's time per proposal at 1,000 and 10,000 results
             (tuning/bench/scale.py)
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F

from tuning import cli, provenance, spaces
from tuning.trial import data, datasplit, distributed, forkserver, trainer
from tuning.bench import harness
from tuning.bench.harness import (OVERHEAD_KINDS, overhead_in_fresh_process, row, run_tune, synthetic,
                                  trainer_vs_bare, write_rows)
from tuning.bench.memory import bench_memory, bench_node_memory

# ---------------------------------------------------------------- overhead, trial, scheduler

def bench_overhead(quick: bool) -> list[dict]:
    """Ray's release test "bookkeeping overhead" at this machine's scale, ours beside a plain
    tune.run, each in its own fresh process."""
    n, t = (20, 0.2) if quick else (100, 0.5)
    cpus = os.cpu_count() or 1
    # Each kind twice, the rounds interleaved, the faster run kept: one stray stall in a 40 s run
    # moved a ratio by 1.1 here (ours 2.78 in one run, 1.65 in the next).
    runs = [{k: overhead_in_fresh_process(k, n, t) for k in OVERHEAD_KINDS} for _ in range(1 if quick else 2)]
    ours, logged, raw, raw_quiet = ({key: min(r[k][key] for r in runs) for key in runs[0][k]} for k in OVERHEAD_KINDS)
    ideal = n * t / cpus
    detail = (f"{n} trials x {t:g} s of CPU work on {cpus} CPUs; ideal {ideal:g} s; "
              f"each run in a fresh process, the faster of {len(runs)}")
    plain = "a plain tune.run(reuse_actors=True) of a function trainable, one result per trial, no checkpoint"
    return [row("overhead", "harness_overhead_ratio", ours["wall_s"] / ideal, "x", f"tune.run wall / ideal; {detail}"),
            row("overhead", "harness_overhead_ratio_loop", ours["loop_s"] / ideal, "x",
                f"first trial start to last result / ideal; {detail}"),
            row("overhead", "start_to_first_trial_s", ours["first_start_s"], "s",
                "tune.run called to the first trial running: a trial process starting, importing its trainable"),
            row("overhead", "harness_overhead_ratio_tune_logs", logged["wall_s"] / ideal, "x",
                f"the same with Tune's per-trial loggers on (tuning.run --tune-logs); {detail}"),
            row("overhead", "raw_tune_overhead_ratio", raw["wall_s"] / ideal, "x",
                f"the same work through {plain}, Tune's default loggers on; {detail}"),
            row("overhead", "raw_tune_overhead_ratio_loop", raw["loop_s"] / ideal, "x",
                f"first trial start to last result / ideal, {plain}; the peer of harness_overhead_ratio_loop"),
            row("overhead", "raw_tune_overhead_ratio_no_loggers", raw_quiet["wall_s"] / ideal, "x",
                f"the same, Tune's per-trial loggers off as ours are; {detail}"),
            row("overhead", "raw_tune_start_to_first_trial_s", raw["first_start_s"], "s",
                f"tune.run called to the first trial running, {plain}"),
            row("overhead", "harness_minus_raw_tune_overhead", (ours["wall_s"] - raw["wall_s"]) / ideal, "x",
                "harness_overhead_ratio - raw_tune_overhead_ratio: what our harness adds to plain Tune")]


def bench_trial(quick: bool) -> list[dict]:
    """Wall time of a 1-epoch CIFAR trial (Tune starting it to its result) minus its training
    and evaluation: what the trainable and Tune add. One trial at a time, so all share an actor."""
    k, n = (3, 512) if quick else (8, 1024)
    cpus = os.cpu_count() or 1
    rec = run_tune(spaces.load("cifar_asha"), "random", num_samples=k, max_epochs=1, cpus=cpus,
                   source=synthetic(n), max_train=n, max_val=256)
    rows = sorted(rec.rows, key=lambda r: rec.starts[r["trial_id"]])
    over = [1000 * (r["wall_s"] - rec.starts[r["trial_id"]] - r["train_time_s"] - r["eval_time_s"]) for r in rows]
    detail = f"{k} trials of 1 epoch on {n:,} images, one at a time in a reused actor"
    return [row("trial", "trial_overhead_first_ms", over[0], "ms", f"first trial in the process; {detail}"),
            row("trial", "trial_overhead_later_ms", statistics.median(over[1:]), "ms", f"median of later; {detail}")]


def bench_scale(quick: bool) -> list[dict]:
    from tuning.bench import scale  # its own module: thousands of trials, ours beside raw Tune's

    return scale.bench_scale(quick)


def bench_scheduler(quick: bool) -> list[dict]:
    from tuning.bench import sched  # its own module: the scheduler's costs, through Ray and HpBandSter

    return sched.bench_scheduler(quick)


# ---------------------------------------------------------------- the trainer alone

def bench_throughput(quick: bool) -> list[dict]:
    cpus = os.cpu_count() or 1
    n = 1024 if quick else 8192
    train, val = data.load_train_val(synthetic(n), max_train=n, max_val=256)
    rows = []
    for batch in (128, 512):
        got = trainer_vs_bare(train, val, batch=batch, epochs=3, threads=cpus)
        detail = f"{n} images, {cpus} threads, fastest of epochs 2-3"
        rows += [row("throughput", f"trainer_images_per_s_bs{batch}", got["trainer"], "img/s", detail),
                 row("throughput", f"bare_loop_images_per_s_bs{batch}", got["bare"], "img/s", detail),
                 row("throughput", f"throughput_ratio_bs{batch}", got["ratio"], "x", "trainer / bare loop")]
    return rows


def bench_data(quick: bool) -> list[dict]:
    n = 10_000 if quick else 50_000
    src = harness.generated(n)
    t = time.perf_counter()
    train, _ = data.read_train_val(src, shared=False)
    first = time.perf_counter() - t
    datasplit.node_cache(src).unlink(missing_ok=True)  # the node's copy, written anew: what a node's first trial pays
    t = time.perf_counter()
    data.read_train_val(src, shared=True)
    write = time.perf_counter() - t
    t = time.perf_counter()
    data.read_train_val(src, shared=True)
    mapped = time.perf_counter() - t
    data.load_train_val(src)
    t = time.perf_counter()
    data.load_train_val(src)
    cached = time.perf_counter() - t
    gen = torch.Generator().manual_seed(0)
    flips = torch.rand(len(train), generator=gen) < 0.5
    shifts = torch.randint(0, 2 * trainer.PAD + 1, (len(train), 2), generator=gen)
    t = time.perf_counter()
    for i in range(0, len(train), 256):
        trainer.augment(train.x[i:i + 256], flips[i:i + 256], shifts[i:i + 256])
    aug = time.perf_counter() - t
    detail = f"{len(train)} training images (synthetic, CIFAR-10's format and size)"
    return [row("data", "load_first_s", first, "s", f"read, md5-check, split, normalise; {detail}"),
            row("data", "load_node_copy_write_s", write, "s",
                "the same, then written to the node's data file and mapped: a node's first trial"),
            row("data", "load_node_copy_map_ms", 1000 * mapped, "ms",
                "the split mapped from the node's data file: every later trial process on the node"),
            row("data", "load_cached_ms", 1000 * cached, "ms", "the same call again in the same process"),
            row("data", "augment_per_epoch_s", aug, "s", f"flip + translate, batches of 256; {detail}")]


# ---------------------------------------------------------------- ddp

def _noop_rank(*, rank, world_size, device, on_epoch):
    """Nothing but what every DDP trial pays: spawn, import, rendezvous, one collective, exit."""
    dist.barrier()
    return {}


def _step_times(*, rank, world_size, device, on_epoch, batch: int, steps: int, threads: int):
    """Median step time of the CIFAR model on random data, on every rank at once (so all three
    share the machine alike): as DDP trains it; without the gradient all-reduce (no_sync); and
    with no communication at all (plain BatchNorm, no DDP)."""
    torch.manual_seed(0)
    torch.set_num_threads(threads)
    x = torch.randn(batch // world_size, 3, 32, 32).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 10, (batch // world_size,))

    def run(mode: str) -> float:
        model = trainer.make_model().to(memory_format=torch.channels_last)
        if mode == "local":
            for m in model.modules():
                if isinstance(m, trainer.SyncBatchNorm2d):
                    m.__class__ = torch.nn.BatchNorm2d  # the same layer without the statistics sync
        net = torch.nn.parallel.DistributedDataParallel(model) if mode != "local" else model
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        times = []
        for i in range(steps + 2):
            dist.barrier()  # start each step together, as training does
            t = time.perf_counter()
            if mode == "no_sync":
                with net.no_sync():
                    F.cross_entropy(net(x), y).backward()
            else:
                F.cross_entropy(net(x), y).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            if i >= 2:  # the first steps warm caches and build DDP's buckets
                times.append(time.perf_counter() - t)
        return statistics.median(times)

    out = {f"{mode}_step_s": run(mode) for mode in ("ddp", "no_sync", "local")}
    on_epoch(out, {})
    return out


def bench_ddp(quick: bool) -> list[dict]:
    rows = []
    cpus = os.cpu_count() or 1
    n_train, epochs, batch = (512, 2, 256) if quick else (8192, 2, 256)
    src = harness.generated(10_000)
    train, val = data.load_train_val(src, max_train=n_train, max_val=1000)
    kw = dict(lr=2e-3, batch_size=batch, epochs=epochs, train=train, val=val, seed=0)

    def last_epoch(world: int, threads: int) -> dict:
        seen = []
        t = time.perf_counter()
        if world == 1:
            torch.set_num_threads(threads)
            trainer.train_cifar(**kw, on_epoch=lambda m, s: seen.append(m))
        else:
            distributed.run(trainer.train_cifar, kw, world_size=world, threads=threads,
                            on_epoch=lambda m, s: seen.append(m))
        return {**seen[-1], "wall_s": time.perf_counter() - t}

    one = last_epoch(1, cpus)
    two = last_epoch(2, max(1, cpus // 2))
    detail = f"{n_train} images, global batch {batch}, {cpus} CPUs shared by the ranks; last of {epochs} epochs"
    rows += [
        row("ddp", "epoch_train_s_1_rank", one["train_time_s"], "s", detail),
        row("ddp", "epoch_train_s_2_ranks", two["train_time_s"], "s", detail),
        row("ddp", "speedup_2_ranks_vs_1", one["train_time_s"] / two["train_time_s"], "x", detail),
    ]
    starts = []
    for _ in range(1 if quick else 4):
        t = time.perf_counter()
        distributed.run(_noop_rank, {}, world_size=2)
        starts.append(time.perf_counter() - t)
    rows.append(row("ddp", "rank_start_cost_per_trial", statistics.median(starts), "s",
                    f"spawn 2 gloo ranks, import torch, rendezvous, barrier, exit; median of {len(starts)}"))
    rows.append(row("ddp", "run_overhead_2_ranks", two["wall_s"] - epochs * (two["train_time_s"] + two["eval_time_s"]),
                    "s", "a 2-rank training call's wall time outside its epochs"))

    steps = 3 if quick else 15
    got = []
    distributed.run(_step_times, dict(batch=batch, steps=steps, threads=max(1, cpus // 2)), world_size=2,
                    on_epoch=lambda m, s: got.append(m))
    ddp, no_sync, local = got[0]["ddp_step_s"], got[0]["no_sync_step_s"], got[0]["local_step_s"]
    step_detail = f"median of {steps} steps, batch {batch // 2} per rank, both ranks stepping at once"
    rows += [
        row("ddp", "step_s_2_ranks", ddp, "s", step_detail),
        row("ddp", "step_s_2_ranks_no_communication", local, "s", "plain BatchNorm, no DDP: compute alone"),
        row("ddp", "grad_allreduce_share_of_step", (ddp - no_sync) / ddp, "fraction",
            "DDP step vs the same step under no_sync()"),
        row("ddp", "syncbn_share_of_step", (no_sync - local) / ddp, "fraction",
            "global-batch BatchNorm statistics: no_sync() step vs no communication"),
    ]
    return rows


# ---------------------------------------------------------------- the CLI

# Each section's bench, in the order they run and are printed (--only picks among them).
SECTIONS = {"overhead": bench_overhead, "trial": bench_trial, "throughput": bench_throughput, "data": bench_data,
            "memory": bench_memory, "node_memory": bench_node_memory, "scheduler": bench_scheduler, "ddp": bench_ddp,
            "scale": bench_scale}


def main(argv: list[str] | None = None) -> int:
    p = cli.Parser(prog="python -m tuning.bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="smaller sizes: a few minutes")
    p.add_argument("--only", choices=SECTIONS, action="append", help="run only this section (repeatable)")
    p.add_argument("--out", default=None, help="results folder (default results/bench-<time>)")
    p.add_argument("--data-dir", default=str(harness.DATA_DIR), metavar="DIR",
                   help="where the benches generate synthetic CIFAR-10, and node_memory reads CIFAR-10 if it is "
                        "there (default ./data)")
    p.add_argument("--no-shared-data", action="store_true",
                   help=f"every trial decodes its own copy of the data ({datasplit.SHARED_ENV}=0), as before the "
                        "node's shared copy; node_memory then measures only that")
    p.add_argument("--no-fork-server", action="store_true",
                   help=f"every CIFAR trial imports torch in its own process ({forkserver.ENV}=0), as before the "
                        "node's fork server; node_memory then leaves out its forked mode")
    try:
        args = p.parse_args(argv)
        cli.check_folder_named("data_dir", args.data_dir)
        cli.check_folder_named("out", args.out)
        for flag, folder in (("--data-dir", args.data_dir), ("--out", args.out)):
            # found before minutes of sections, not after them (--out was a FileExistsError's traceback)
            path = Path(folder).expanduser() if folder else None
            bad = path is not None and next((p for p in (path, *path.parents) if p.is_file()), None)
            if bad:
                raise cli.UsageError(f"{flag} {folder}" + (" is a file" if bad == path else f": {bad} is a file")
                                     + ": give a folder")
    except cli.UsageError as exc:
        print(f"tuning.bench: error: {exc}", file=sys.stderr)
        return 2
    cli.quiet_libraries()
    harness.DATA_DIR = Path(args.data_dir).expanduser()
    if args.no_shared_data:  # before Ray starts: its trial processes inherit the environment
        os.environ[datasplit.SHARED_ENV] = "0"
    if args.no_fork_server:
        os.environ[forkserver.ENV] = "0"
    out = Path(args.out or f"results/bench-{time.strftime('%Y%m%d-%H%M%S')}")
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for section in args.only or SECTIONS:
        rows += SECTIONS[section](args.quick)
    write_rows(out / "bench.csv", rows)
    if "scale" in (args.only or SECTIONS):  # each run's per-tenth figures, beside the rows
        from tuning.bench import scale

        (out / "scale.json").write_text(json.dumps(scale.bench_scale.runs, indent=1) + "\n")
    # The commit too: a figure is only reproducible from the code that measured it.
    machine = {**provenance.machine(), "git_commit": provenance.git_commit()}
    (out / "machine.json").write_text(json.dumps(machine, indent=2) + "\n")
    width = max(len(r["metric"]) for r in rows)
    for r in rows:
        print(f"{r['section']:<10} {r['metric']:<{width}} {r['value']:>10g} {r['unit']:<8} "
              f"{r['goal'] or '':<10} {r['detail']}")
    print(f"\nWritten: {out / 'bench.csv'}, {out / 'machine.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
