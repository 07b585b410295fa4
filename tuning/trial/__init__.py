"""The trial side: what runs inside one trial's processes, with no Ray (tuning.backend adapts it).

    trainer       the CIFAR-10 model, its training loop (one DDP rank or one process), evaluation
    data          CIFAR-10 on disk, real or synthetic, decoded into the split's tensors
    datasplit     the training/validation split, and its one copy per node that processes share
    synthetic     the synthetic CIFAR-10 generator
    distributed   a trial's DDP ranks: spawn, rendezvous, rank 0's reports, lifetime
    forkserver    trial processes forked from one warm process per node (forkhost: that process)
    trialstate    a trial's state on disk and in its process's memory, without importing torch

Importing this package imports none of them: trainer and data bring torch (seconds), which the
driver and a trial's Ray process never need. Its public names load on first use.
"""

__all__ = ["train_cifar", "load_checkpoint", "load_train_val"]


def __getattr__(name: str):
    if name == "train_cifar":
        from tuning.trial import trainer

        return trainer.train_cifar
    if name == "load_checkpoint":
        from tuning.trial import trialstate

        return trialstate.load_checkpoint
    if name == "load_train_val":
        from tuning.trial import data

        return data.load_train_val
    raise AttributeError(f"module 'tuning.trial' has no attribute {name!r}")
