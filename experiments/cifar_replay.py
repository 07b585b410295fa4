"""docs/calibration replayed under all five strategies: the full cifar_grid that run recorded (16
configurations x 16 epochs of the CIFAR trainer on the full synthetic data, 10.1 CPU-hours) serves
every evaluation from its learning curves (tuning/compare/recorded.py), so 50 strategy runs take minutes
instead of the days retraining would (experiments/cifar_strategies is the live comparison)."""

from tuning.compare import Experiment

EXPERIMENT = Experiment(
    space="replay:docs/calibration",  # its declaration (lr log-uniform, 4 batch sizes), metric (loss) and curves
    budget=16,  # 16 full trainings' worth of epochs per run: one grid's worth, what the recorded run cost
    seeds=tuple(range(10)),
    strategies=("grid", "random", "asha", "hyperband", "bohb"),
    max_epochs=16,  # every recorded epoch; rungs at 1, 2, 4, 8 for ASHA and Hyperband (reduction factor 2)
    # Smoke: 4 epochs (rungs 1, 2, 4), 2 seeds, 4 full evaluations: Hyperband's first bracket costs 2.
    smoke={"budget": 4, "seeds": 2, "max_epochs": 4},
    description="The cifar_grid run in docs/calibration (CIFAR trainer, full synthetic data, lr log-uniform in "
                "[1e-4, 1e-2] x batch size in {64, 128, 256, 512}, 16 epochs each), replayed from its recorded "
                "learning curves and epoch times; validation loss, regret against the best recorded configuration.",
)
