"""``python -m tuning.bench``: measure the service's costs, print a table, write bench.csv.

Every figure is measured in the same run on the same machine (the machine goes into
machine.json next to the CSV), and is a per-unit cost or a ratio, because absolute times on a
shared machine drift. Sections:

  ddp   epoch time at 1 vs 2 CPU ranks, the cost of starting a trial's ranks, and the share of
        a DDP step spent communicating
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F

from tuning import data, distributed, results, trainer

SECTIONS = ("ddp",)


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
    n_train, epochs, batch = (2048, 2, 256) if quick else (8192, 2, 256)
    src = data.prepare("synthetic", Path("data"), seed=0, synthetic_train=10_000, synthetic_test=1000)
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
        _row("ddp", "epoch_train_s_1_rank", one["train_time_s"], "s", detail),
        _row("ddp", "epoch_train_s_2_ranks", two["train_time_s"], "s", detail),
        _row("ddp", "speedup_2_ranks_vs_1", one["train_time_s"] / two["train_time_s"], "x", detail),
    ]
    starts = []
    for _ in range(2 if quick else 4):
        t = time.perf_counter()
        distributed.run(_noop_rank, {}, world_size=2)
        starts.append(time.perf_counter() - t)
    rows.append(_row("ddp", "rank_start_cost_per_trial", statistics.median(starts), "s",
                     f"spawn 2 gloo ranks, import torch, rendezvous, barrier, exit; median of {len(starts)}"))
    rows.append(_row("ddp", "run_overhead_2_ranks", two["wall_s"] - epochs * (two["train_time_s"] + two["eval_time_s"]),
                     "s", "a 2-rank training call's wall time outside its epochs"))

    steps = 5 if quick else 15
    got = []
    distributed.run(_step_times, dict(batch=batch, steps=steps, threads=max(1, cpus // 2)), world_size=2,
                    on_epoch=lambda m, s: got.append(m))
    ddp, no_sync, local = got[0]["ddp_step_s"], got[0]["no_sync_step_s"], got[0]["local_step_s"]
    step_detail = f"median of {steps} steps, batch {batch // 2} per rank, both ranks stepping at once"
    rows += [
        _row("ddp", "step_s_2_ranks", ddp, "s", step_detail),
        _row("ddp", "step_s_2_ranks_no_communication", local, "s", "plain BatchNorm, no DDP: compute alone"),
        _row("ddp", "grad_allreduce_share_of_step", (ddp - no_sync) / ddp, "fraction",
             "DDP step vs the same step under no_sync()"),
        _row("ddp", "syncbn_share_of_step", (no_sync - local) / ddp, "fraction",
             "global-batch BatchNorm statistics: no_sync() step vs no communication"),
    ]
    return rows


# ---------------------------------------------------------------- the CLI

def _row(section: str, metric: str, value: float, unit: str, detail: str) -> dict:
    return {"section": section, "metric": metric, "value": round(float(value), 4), "unit": unit, "detail": detail}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tuning.bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="smaller sizes: a minute or two")
    p.add_argument("--only", choices=SECTIONS, action="append", help="run only this section (repeatable)")
    p.add_argument("--out", default=None, help="results folder (default results/bench-<time>)")
    args = p.parse_args(argv)
    out = Path(args.out or f"results/bench-{time.strftime('%Y%m%d-%H%M%S')}")
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for section in args.only or SECTIONS:
        rows += {"ddp": bench_ddp}[section](args.quick)
    with open(out / "bench.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    (out / "machine.json").write_text(json.dumps(results.machine(), indent=2) + "\n")
    width = max(len(r["metric"]) for r in rows)
    for r in rows:
        print(f"{r['section']:<6} {r['metric']:<{width}} {r['value']:>10g} {r['unit']:<8} {r['detail']}")
    print(f"\nWritten: {out / 'bench.csv'}, {out / 'machine.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
