"""Several objectives and a constraint: the net on scikit-learn's bundled digits (1,797 8x8 images,
no download) that trades validation loss against its size, among those at least 90 % accurate.
The run keeps the Pareto front in pareto.csv and result.pareto (docs/multi-objective.md).

    python examples/multi_objective.py [--smoke]                           # from Python: tuning.search
    python -m tuning.run --space examples/multi_objective.py [--smoke]     # the same from the command line
"""

import sys

import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from torch import nn

import tuning
from tuning import IntLogUniform, LogUniform, Space


def digits(seed: int = 0) -> tuple[torch.Tensor, ...]:
    """A fixed split: 1,347 images to train on, 450 to validate on."""
    x, y = load_digits(return_X_y=True)
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))
    x, y = torch.tensor(x / 16.0, dtype=torch.float32)[order], torch.tensor(y)[order]
    return x[:1347], y[:1347], x[1347:], y[1347:]


def train(*, hidden, lr, epochs, state=None, on_epoch, seed=0):
    """The trainer contract (docs/your-trainer.md), reporting both objectives and the constrained metric."""
    xtr, ytr, xva, yva = digits()
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, 10))
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    start = 0 if state is None else state["epoch"]
    if state is not None:  # a resumed trial goes on where it stopped
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
    for epoch in range(start, epochs):
        for idx in torch.randperm(len(xtr), generator=torch.Generator().manual_seed(seed * 1000 + epoch)).split(64):
            opt.zero_grad()
            F.cross_entropy(model(xtr[idx]), ytr[idx]).backward()
            opt.step()
        with torch.no_grad():
            logits = model(xva)
        on_epoch({"loss": F.cross_entropy(logits, yva).item(), "accuracy": (logits.argmax(1) == yva).float().mean().item(),
                  "num_params": sum(p.numel() for p in model.parameters())},
                 {"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": epoch + 1})


SPACE = Space(
    params={
        "hidden": IntLogUniform(2, 256),  # 2 units cannot tell ten digits apart; 256 is far past what 1,347 images need
        "lr": LogUniform(1e-3, 1e-1),  # Adam: 1e-3 learns slowly in 10 epochs, 1e-1 overshoots
    },
    trainer=train,
    objectives={"loss": "min", "num_params": "min"},  # the first breaks ties and names result.best
    constraints={"accuracy": (">=", 0.9)},  # a net below it is never on the front, however small
    strategy="tpe",  # Optuna's multi-objective TPE under MO-ASHA's brackets: some trials stop early
    num_samples=20,
    max_epochs=10,
    gpus_per_trial=0,  # a net this size trains faster on the CPU than it copies to a GPU
)

if __name__ == "__main__":
    result = tuning.search(train, SPACE, smoke="--smoke" in sys.argv)
    print(result.summary())
    print(result.pareto[["trial_id", "hidden", "lr", "loss", "num_params", "accuracy"]].to_string(index=False))
