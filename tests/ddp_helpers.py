"""Rank functions for tests/test_ddp.py. They live in an importable module because spawned
ranks import the function they run by name."""

import time

import torch
import torch.distributed as dist


def sum_ranks(*, rank, world_size, device, on_epoch, value=1.0):
    """A tiny job: all ranks all_reduce, rank 0 reports once."""
    t = torch.tensor([value * (rank + 1)])
    dist.all_reduce(t)
    on_epoch({"sum": t.item()}, {"weights": t.clone()})
    return {"sum": t.item()}


def fail_on_rank_1(*, rank, world_size, device, on_epoch):
    if rank == 1:
        raise ValueError("boom on rank 1")
    dist.barrier()  # rank 0 would wait here forever for rank 1
    return {}


def stall_rank_1(*, rank, world_size, device, on_epoch):
    if rank == 1:
        time.sleep(600)  # alive but never joins the collective
    dist.barrier()
    return {}
