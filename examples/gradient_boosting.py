"""Tune a model that is not a neural network: scikit-learn's HistGradientBoostingClassifier on the
bundled breast-cancer data (569 samples, no download), under ASHA with boosting iterations as the
budget. A resumed trial goes on boosting from its saved model (warm_start), not from scratch.

    python examples/gradient_boosting.py [--smoke]                           # from Python
    python -m tuning.run --space examples/gradient_boosting.py [--smoke]     # from the command line
"""

import sys

from sklearn.datasets import load_breast_cancer
from sklearn.ensemble import HistGradientBoostingClassifier
from sklearn.metrics import log_loss, roc_auc_score
from sklearn.model_selection import train_test_split

import tuning
from tuning import Choice, IntUniform, LogUniform, Space, Uniform

ROUNDS_PER_EPOCH = 10  # one "epoch" of the budget is ten boosting iterations


def train(*, learning_rate, max_leaf_nodes, l2_regularization, min_samples_leaf, epochs, state=None, on_epoch,
          seed=0):
    x, y = load_breast_cancer(return_X_y=True)
    xtr, xva, ytr, yva = train_test_split(x, y, test_size=0.3, random_state=0, stratify=y)
    if state is None:
        model = HistGradientBoostingClassifier(
            learning_rate=learning_rate, max_leaf_nodes=max_leaf_nodes, l2_regularization=l2_regularization,
            min_samples_leaf=min_samples_leaf, early_stopping=False, warm_start=True, random_state=seed,
            max_iter=0)
        start = 0
    else:  # warm_start: fitting again with a larger max_iter adds trees to the saved ones
        model, start = state["model"], state["epoch"]
    for epoch in range(start, epochs):
        model.set_params(max_iter=(epoch + 1) * ROUNDS_PER_EPOCH)
        model.fit(xtr, ytr)
        p = model.predict_proba(xva)[:, 1]
        on_epoch({"log_loss": log_loss(yva, p), "auc": roc_auc_score(yva, p), "trees": model.n_iter_},
                 {"model": model, "epoch": epoch + 1})  # the checkpoint pickles the fitted model


SPACE = Space(
    params={
        "learning_rate": LogUniform(0.01, 0.5),  # scikit-learn's default 0.1 sits in the middle, in log
        "max_leaf_nodes": Choice([7, 15, 31, 63]),  # its default 31; 569 samples rarely need more
        "l2_regularization": Uniform(0.0, 2.0),  # from none to strong for values of this size
        "min_samples_leaf": IntUniform(5, 40),  # its default 20, halved and doubled
    },
    trainer=train,
    strategy="asha",
    metric="log_loss",
    mode="min",
    max_epochs=20,  # up to 200 trees
    grace_period=2,  # ASHA's first rung at 20 trees: fewer barely separate the configurations
    reduction_factor=3,
    num_samples=30,
    gpus_per_trial=0,
)

if __name__ == "__main__":
    result = tuning.search(train, SPACE, smoke="--smoke" in sys.argv)
    print(result.summary())
