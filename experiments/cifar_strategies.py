"""The CIFAR-10 trainer under all five strategies over the shared cifar_* parameter declaration."""

from tuning.compare import Experiment

EXPERIMENT = Experiment(
    space="cifar_asha",  # only its parameters and trainer matter: the strategy is each run's
    budget=32,  # 32 full trainings' worth of epochs per strategy run: twice the 4x4 grid
    seeds=(0, 1, 2),
    strategies=("grid", "random", "asha", "hyperband", "bohb"),
    max_epochs=9,  # rungs at 1, 3, 9 for BOHB (eta 3) and 1, 2, 4, 8 for ASHA (eta 2)
    # Smoke: 3 epochs (one BOHB rung), 3 full trainings, 2 seeds, synthetic data subset.
    smoke={"budget": 3, "seeds": 2, "max_epochs": 3},
    description="CIFAR-10 (or its synthetic stand-in): lr log-uniform in [1e-4, 1e-2], batch size "
                "in {64, 128, 256, 512}; validation loss after up to max_epochs epochs.",
)
