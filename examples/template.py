"""A trainer to start from: copy it, put your model and data in, keep the shape.

    python examples/template.py [--smoke]
"""

import sys

import torch
from sklearn.datasets import load_diabetes

import tuning
from tuning import LogUniform, Space


def train(*, lr, weight_decay, epochs, state=None, on_epoch, seed=0, device="cpu"):
    x, y = (torch.tensor(a, dtype=torch.float32) for a in load_diabetes(return_X_y=True, scaled=True))
    x, y = x.to(device), (y / y.std()).to(device)  # 442 patients, 10 features; targets in std units
    xtr, ytr, xva, yva = x[:350], y[:350], x[350:], y[350:]
    torch.manual_seed(seed)  # the same for every trial: configurations differ by their parameters, not luck
    model = torch.nn.Linear(10, 1).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    start = 0
    if state is not None:  # paused, retried or resumed: go on from the last epoch reported
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        start = state["epoch"]
    for epoch in range(start, epochs):  # `epochs` counts the restored ones too
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(xtr).squeeze(1), ytr).backward()
        opt.step()
        with torch.no_grad():
            val = torch.nn.functional.mse_loss(model(xva).squeeze(1), yva).item()  # a float, not a tensor
        on_epoch({"mse": val}, {"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": epoch + 1})


SPACE = Space(
    params={"lr": LogUniform(1e-3, 1.0),  # full-batch AdamW on 10 features: from slow to unstable
            "weight_decay": LogUniform(1e-5, 1e-1)},  # from none to enough to pull the weights in
    trainer=train, metric="mse", mode="min", max_epochs=50, num_samples=16, gpus_per_trial=0)

if __name__ == "__main__":
    result = tuning.search(train, SPACE, smoke="--smoke" in sys.argv)
    print(result.summary())
