"""CIFAR-10, wide: what people tune on a convnet beyond the learning rate and batch size, with
momentum and Nesterov declared under SGD only. Eight dimensions, two of them conditional: the
space where a model-based strategy has something to learn that grid and random search cannot.

Under AdamW, momentum and nesterov are absent from the configuration and train_cifar's defaults
apply (AdamW does not use them)."""

from search_spaces._cifar import DIVERGED, FIXED, PARAMS
from tuning.spaces import Choice, IntLogUniform, LogUniform, Space, Uniform

SPACE = Space(
    params={
        # One range for both optimizers: AdamW's optimum sits near 1e-3 (_cifar.py), SGD's about ten
        # times higher; a decade beyond each keeps both optima inside. Grid: 3 log-spaced points.
        "lr": LogUniform(1e-4, 1e-1, grid=3),
        "batch_size": PARAMS["batch_size"],  # as every cifar_* space, for the reason given there
        # The two optimizers' usual values lie far apart: SGD's coupled L2 near 5e-4, AdamW's
        # decoupled decay (scaled by lr at each step) near 1e-2 to 1e-1; a decade beyond each.
        "weight_decay": LogUniform(1e-5, 1e-1, grid=2),
        "optimizer": Choice(["adamw", "sgd"]),
        # 0.9 is the usual CIFAR recipe. SGD's effective step is lr / (1 - momentum): 5x lr at 0.8,
        # 100x at 0.99, where short runs turn unstable; lower momentum acts mostly as a lower lr,
        # which lr's own range already covers.
        "momentum": Uniform(0.8, 0.99, grid=2, when={"optimizer": "sgd"}),
        "nesterov": Choice([True, False], when={"optimizer": "sgd"}),
        # Compute grows with width squared: 8 costs a quarter of the default 16, 32 four times it.
        # Comparisons count their budget in epochs, not compute, so wider nets would get their
        # extra compute free in that count. Doublings matter, not steps: log-uniform.
        "width": IntLogUniform(8, 32, grid=3),
        # 0.1 is the usual value (Szegedy et al. 2016, Inception v3). At 0.2 the target puts only
        # 82% on the true class, an underconfidence the plain validation cross-entropy penalises.
        "label_smoothing": Uniform(0.0, 0.2, grid=2),
        # Flip and 2-pixel translation pay off over many epochs and cost accuracy in the first
        # few, so their worth depends on the budget: a question for the search, not a default.
        "augment": Choice([True, False]),
    },
    # weight_decay and width are searched here, so only the precision stays fixed.
    fixed={k: v for k, v in FIXED.items() if k not in ("weight_decay", "width")},
    diverged_value=DIVERGED,
    metric="loss",  # plain cross-entropy whatever the label smoothing (train_cifar), so trials compare
    mode="min",
    strategy="bohb",
    # Two Hyperband iterations at eta 3 over 27 epochs (49 trials each, as cifar_bohb): eight
    # dimensions need more points than two before BOHB's model has enough on each budget.
    num_samples=98,
    max_epochs=27,  # rungs at 1, 3, 9 and 27 epochs with reduction factor 3
    reduction_factor=3,  # BOHB paper's eta: keep the best third at each rung
    cpus_per_trial=1,
    gpus_per_trial="auto",
)
