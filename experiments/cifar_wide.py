"""The CIFAR trainer over cifar_wide (eight parameters, momentum and Nesterov under SGD only) under
every strategy: where cifar_strategies' two dimensions let every strategy find the best of the 4x4
grid, this space leaves a model-based strategy something to learn."""

from tuning.compare import Experiment

EXPERIMENT = Experiment(
    space="cifar_wide",  # only its parameters and trainer matter: the strategy is each run's
    # Twice cifar_strategies' budget: four times its dimensions. Grid never runs out here (1,440
    # valid points, walked last parameter fastest), so it spends its budget on a corner of the space.
    budget=64,
    seeds=(0, 1, 2),
    strategies=("grid", "random", "asha", "hyperband", "bohb", "tpe"),
    max_epochs=9,  # rungs at 1, 3, 9 for BOHB, Hyperband and TPE (eta 3) and 1, 2, 4, 8 for ASHA (eta 2)
    # For a GPU machine or a cluster (--address), as cifar_strategies. Full size: 6 strategies x 3
    # seeds x 64 full trainings x 9 epochs = 10,368 epochs of 45,000 images. Not measured at this
    # size. For scale: at width 16 an epoch took a median 131.7 s on the 2-core development machine,
    # two trials at once (docs/comparisons.md); widths 8 to 32 cost a quarter to four times that
    # compute.
    # Smoke: 1 seed, 2 full trainings of 3 epochs (one Hyperband rung at eta 3) per strategy, on
    # compare's smoke data (2,000 synthetic training images).
    smoke={"budget": 2, "seeds": 1, "max_epochs": 3},
    description="CIFAR-10 (or its synthetic stand-in), eight parameters: lr log-uniform in [1e-4, 1e-1], "
                "batch size in {64, 128, 256, 512}, weight decay log-uniform in [1e-5, 1e-1], AdamW or SGD "
                "(momentum in [0.8, 0.99] and Nesterov or not, under SGD only), width 8-32 log-uniform, "
                "label smoothing in [0, 0.2], augmentation on or off; validation loss after up to "
                "max_epochs epochs.",
)
