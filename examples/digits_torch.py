"""Tune a small PyTorch network on scikit-learn's bundled digits (1,797 8x8 images, installed with
scikit-learn: no download), under BOHB with epochs as the budget.

    python examples/digits_torch.py [--smoke]                           # from Python: tuning.search
    python -m tuning.run --space examples/digits_torch.py [--smoke]     # the same from the command line
"""

import sys

import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn

import tuning
from tuning import Choice, LogUniform, Space

_DATA = {}  # filled on first use in each process that unpickles the trainer: milliseconds for digits


def data() -> tuple[torch.Tensor, ...]:
    if not _DATA:
        x, y = load_digits(return_X_y=True)
        xtr, xva, ytr, yva = train_test_split(x / 16.0, y, test_size=0.25, random_state=0, stratify=y)
        _DATA["split"] = tuple(torch.tensor(a, dtype=torch.float32 if a.ndim == 2 else torch.long)
                               for a in (xtr, ytr, xva, yva))
    return _DATA["split"]


def train(*, lr, hidden, weight_decay, batch_size, epochs, state=None, on_epoch, seed=0):
    """The trainer contract (docs/your-trainer.md): keyword hyperparameters, `epochs` in all, the
    last `state` to go on from, and on_epoch(metrics, state) after every epoch."""
    xtr, ytr, xva, yva = data()
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, 10))
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    start = 0
    if state is not None:  # a paused, resumed or retried trial goes on where it stopped
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        start = state["epoch"]
    for epoch in range(start, epochs):
        order = torch.randperm(len(xtr), generator=torch.Generator().manual_seed(seed * 10_000 + epoch))
        model.train()
        for i in range(0, len(order), batch_size):
            idx = order[i:i + batch_size]
            loss = nn.functional.cross_entropy(model(xtr[idx]), ytr[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
        model.eval()
        with torch.no_grad():
            logits = model(xva)
            metrics = {"loss": nn.functional.cross_entropy(logits, yva).item(),
                       "accuracy": (logits.argmax(1) == yva).float().mean().item()}
        on_epoch(metrics, {"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": epoch + 1})


SPACE = Space(
    params={
        "lr": LogUniform(1e-4, 3e-1),  # AdamW: 1e-4 barely moves in 27 epochs, 3e-1 overshoots
        "hidden": Choice([8, 16, 32, 64, 128]),  # 8 underfits ten classes; 128 is past what 1,347 images need
        "weight_decay": LogUniform(1e-6, 1e-1),  # from none to enough to hurt a net this small
        "batch_size": Choice([16, 64, 256]),  # 84 steps an epoch down to 6
    },
    trainer=train,
    strategy="bohb",
    metric="accuracy",
    mode="max",
    max_epochs=27,  # 3^3: Hyperband's rungs at 1, 3, 9 and 27 epochs with reduction factor 3
    reduction_factor=3,
    num_samples=40,
    gpus_per_trial=0,  # a net this size trains faster on the CPU than it copies to a GPU
)

if __name__ == "__main__":
    result = tuning.search(train, SPACE, smoke="--smoke" in sys.argv, results_dir=None)
    print(result.summary())
