"""Ray Tune's cifar10_pytorch.py, ported to tuning: a small torch net, ASHA on the validation loss,
a checkpoint every epoch, then the best trial's checkpoint loaded and tested on held-out images.
On scikit-learn's digits (1,797 8x8 images, installed with it: no download) instead of CIFAR-10.
docs/from-ray-tune.md walks through it beside the original.

    python examples/from_ray_tune.py [--smoke]
    python -m tuning.run --space examples/from_ray_tune.py [--smoke]    # the search alone, no test
"""

import sys

import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn

import tuning
from tuning import Choice, LogUniform, Space

_DATA = {}  # loaded once per process that unpickles the trainer (Ray's example: a FileLock around the download)


def load_data() -> dict:
    """Train, validation and test splits, as Ray's example splits CIFAR-10's train set 80/20 and
    keeps its test set for the end."""
    if not _DATA:
        x, y = load_digits(return_X_y=True)
        x = torch.tensor(x / 16.0, dtype=torch.float32)
        y = torch.tensor(y, dtype=torch.long)
        rest, test = train_test_split(range(len(y)), test_size=0.2, random_state=0, stratify=y)
        train, val = train_test_split(rest, test_size=0.2, random_state=0, stratify=y[rest])
        _DATA.update({name: (x[idx], y[idx]) for name, idx in (("train", train), ("val", val), ("test", test))})
    return _DATA


class Net(nn.Module):
    """Ray's Net(l1, l2): two hidden layers whose widths are searched; on 64 pixels, not 32x32x3."""

    def __init__(self, l1=120, l2=84):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(64, l1), nn.ReLU(), nn.Linear(l1, l2), nn.ReLU(), nn.Linear(l2, 10))

    def forward(self, x):
        return self.layers(x)


def train_digits(*, l1, l2, lr, batch_size, epochs, state=None, on_epoch, seed=0, device="cpu"):
    """Ray's train_cifar(config): the config's keys are keyword arguments; tune.get_checkpoint() is
    `state`; tune.report(metrics, checkpoint=...) is on_epoch(metrics, state)."""
    (xtr, ytr), (xva, yva) = load_data()["train"], load_data()["val"]
    torch.manual_seed(seed)
    net = Net(l1, l2).to(device)
    optimizer = torch.optim.SGD(net.parameters(), lr=lr, momentum=0.9)
    start = 0
    if state is not None:  # Ray: if tune.get_checkpoint(): ... load net_state_dict and optimizer_state_dict
        net.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = state["epoch"]
    for epoch in range(start, epochs):  # Ray: for epoch in range(start_epoch, 10); here the budget is passed
        order = torch.randperm(len(xtr), generator=torch.Generator().manual_seed(seed * 10_000 + epoch))
        net.train()
        for i in range(0, len(order), batch_size):
            idx = order[i:i + batch_size]
            loss = nn.functional.cross_entropy(net(xtr[idx].to(device)), ytr[idx].to(device))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        net.eval()
        with torch.no_grad():
            logits = net(xva.to(device))
            val_loss = nn.functional.cross_entropy(logits, yva.to(device)).item()
            accuracy = (logits.argmax(1) == yva.to(device)).float().mean().item()
        # Ray: pickle the dict into a temporary folder, Checkpoint.from_directory(it), tune.report(...).
        on_epoch({"loss": val_loss, "accuracy": accuracy},
                 {"model": net.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch + 1})


def test_accuracy(net, device="cpu") -> float:
    """The best trial's model on the images no trial saw."""
    x, y = load_data()["test"]
    net.eval()
    with torch.no_grad():
        return (net(x.to(device)).argmax(1) == y.to(device)).float().mean().item()


SPACE = Space(
    params={
        "l1": Choice([4, 8, 16, 32, 64, 128, 256]),  # Ray: tune.choice([2**i for i in range(9)]); 1, 2 too few
        "l2": Choice([4, 8, 16, 32, 64, 128, 256]),
        "lr": LogUniform(1e-4, 1e-1),  # Ray: tune.loguniform(1e-4, 1e-1); SGD with momentum 0.9
        "batch_size": Choice([8, 16, 32, 64]),  # Ray: 2, 4, 8, 16 on CIFAR; 8 is 144 steps an epoch here
    },
    trainer=train_digits,
    strategy="asha",  # Ray: ASHAScheduler(max_t=10, grace_period=1, reduction_factor=2) with random search
    metric="loss",
    mode="min",
    max_epochs=10,  # Ray: max_num_epochs=10
    grace_period=1,
    reduction_factor=2,
    num_samples=10,  # Ray: num_samples=10
    cpus_per_trial=1,  # Ray: resources_per_trial={"cpu": 2, "gpu": gpus_per_trial}
    gpus_per_trial=0,  # a net this size trains faster on the CPU than it copies to a GPU
)

if __name__ == "__main__":
    result = tuning.search(train_digits, SPACE, smoke="--smoke" in sys.argv)
    best = result.best  # Ray: result.get_best_trial("loss", "min", "last")
    print(f"Best trial config: {best.config}")
    print(f"Best trial final validation loss: {best.metrics['loss']}")
    print(f"Best trial final validation accuracy: {best.metrics['accuracy']}")
    state = tuning.load_checkpoint(best.checkpoint)  # Ray: best_checkpoint.to_directory(), then pickle.load
    best_trained_model = Net(best.config["l1"], best.config["l2"])
    best_trained_model.load_state_dict(state["model"])
    print(f"Best trial test set accuracy: {test_accuracy(best_trained_model)}")
