"""optuna-examples' pytorch_simple.py, ported to tuning: a multi-layer perceptron whose depth, widths,
dropouts, optimizer and learning rate are searched, the validation accuracy maximised, unpromising
trials pruned by the median rule. Optuna asks for the second and third layers' sizes only when
n_layers says they exist (define-by-run); here they are declared under when=. On scikit-learn's
digits (installed with it: no download) instead of FashionMNIST. docs/from-optuna.md walks through it
beside the original.

    python examples/from_optuna.py [--smoke]
    python -m tuning.run --space examples/from_optuna.py [--smoke]
"""

import sys

import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn

import tuning
from tuning import Choice, IntUniform, LogUniform, Space, Uniform

BATCHSIZE = 32  # Optuna's 128 over FashionMNIST's subset; digits has 1,347 training images
CLASSES = 10
_DATA = {}  # loaded once per process that unpickles the objective: milliseconds for digits


def get_digits() -> tuple[torch.Tensor, ...]:
    """Optuna's get_mnist(): the training and validation data."""
    if not _DATA:
        x, y = load_digits(return_X_y=True)
        xtr, xva, ytr, yva = train_test_split(x / 16.0, y, test_size=0.25, random_state=0, stratify=y)
        _DATA["split"] = tuple(torch.tensor(a, dtype=torch.float32 if a.ndim == 2 else torch.long)
                               for a in (xtr, ytr, xva, yva))
    return _DATA["split"]


def define_model(n_layers, units, dropouts) -> nn.Sequential:
    """Optuna's define_model(trial), given the values instead of asking the trial for them."""
    layers, in_features = [], 64
    for out_features, p in zip(units[:n_layers], dropouts[:n_layers]):
        layers += [nn.Linear(in_features, out_features), nn.ReLU(), nn.Dropout(p)]
        in_features = out_features
    layers += [nn.Linear(in_features, CLASSES), nn.LogSoftmax(dim=1)]
    return nn.Sequential(*layers)


def objective(*, n_layers, n_units_l0, dropout_l0, n_units_l1=None, dropout_l1=None, n_units_l2=None,
              dropout_l2=None, optimizer, lr, epochs, state=None, on_epoch, seed=0):
    """Optuna's objective(trial): the suggest_* calls are the keyword arguments (the deeper layers'
    default None where n_layers leaves them out); trial.report plus should_prune is on_epoch, which
    raises to end a trial the median rule prunes; the return value is not needed."""
    xtr, ytr, xva, yva = get_digits()
    torch.manual_seed(seed)
    model = define_model(n_layers, [n_units_l0, n_units_l1, n_units_l2], [dropout_l0, dropout_l1, dropout_l2])
    opt = getattr(torch.optim, optimizer)(model.parameters(), lr=lr)
    start = 0
    if state is not None:  # a retried trial goes on from its last epoch (Optuna starts it over)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        start = state["epoch"]
    for epoch in range(start, epochs):
        model.train()
        order = torch.randperm(len(xtr), generator=torch.Generator().manual_seed(seed * 10_000 + epoch))
        for i in range(0, len(order), BATCHSIZE):
            idx = order[i:i + BATCHSIZE]
            opt.zero_grad()
            nn.functional.nll_loss(model(xtr[idx]), ytr[idx]).backward()
            opt.step()
        model.eval()
        with torch.no_grad():
            accuracy = (model(xva).argmax(1) == yva).float().mean().item()
        on_epoch({"accuracy": accuracy}, {"model": model.state_dict(), "optimizer": opt.state_dict(),
                                          "epoch": epoch + 1})


SPACE = Space(
    params={
        "n_layers": IntUniform(1, 3),  # trial.suggest_int("n_layers", 1, 3)
        "n_units_l0": IntUniform(4, 128),  # trial.suggest_int("n_units_l{i}", 4, 128)
        "dropout_l0": Uniform(0.2, 0.5),  # trial.suggest_float("dropout_l{i}", 0.2, 0.5)
        # Optuna asks for layer i's size only inside `for i in range(n_layers)`: the same, declared.
        "n_units_l1": IntUniform(4, 128, when={"n_layers": [2, 3]}),
        "dropout_l1": Uniform(0.2, 0.5, when={"n_layers": [2, 3]}),
        "n_units_l2": IntUniform(4, 128, when={"n_layers": 3}),
        "dropout_l2": Uniform(0.2, 0.5, when={"n_layers": 3}),
        "optimizer": Choice(["Adam", "RMSprop", "SGD"]),  # trial.suggest_categorical("optimizer", [...])
        "lr": LogUniform(1e-5, 1e-1),  # trial.suggest_float("lr", 1e-5, 1e-1, log=True)
    },
    trainer=objective,
    strategy="median",  # Optuna's default pruner, MedianPruner; here Tune's median stopping rule
    metric="accuracy",
    mode="max",  # optuna.create_study(direction="maximize")
    max_epochs=10,  # EPOCHS = 10
    num_samples=100,  # study.optimize(objective, n_trials=100, timeout=600)
    gpus_per_trial=0,  # Optuna's DEVICE = torch.device("cpu")
)

if __name__ == "__main__":
    result = tuning.search(objective, SPACE, time_budget=600, smoke="--smoke" in sys.argv)
    trials = result.trials
    pruned = trials["stopped_early"].astype(bool)
    complete = (trials["status"] == "TERMINATED") & ~pruned
    print("Study statistics: ")
    print("  Number of finished trials: ", len(trials))
    print("  Number of pruned trials: ", int(pruned.sum()))
    print("  Number of complete trials: ", int(complete.sum()))
    print("Best trial:")
    print("  Value: ", result.best.metrics["accuracy"])  # study.best_trial.value
    print("  Params: ")
    for key, value in result.best.config.items():  # study.best_trial.params: inactive layers absent
        print(f"    {key}: {value}")
