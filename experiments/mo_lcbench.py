"""LCBench with two objectives (tuning.compare.mobench): validation accuracy against training time, as
YAHPO Gym's surrogate predicts both. The six development tasks experiments/lcbench.py runs (every
fifth of the README's list), 50 full evaluations of 27 epochs, 10 seeds. The held-out tasks are
never run."""

from tuning.compare import Experiment
from tuning.compare.mobench import reference
from tuning.compare.realbench import LCBENCH_TASKS

TASKS = tuple(f"mo_lcbench_{t}" for t in LCBENCH_TASKS[::5])

EXPERIMENT = Experiment(
    space="mo_lcbench",
    budget=50,
    seeds=tuple(range(10)),
    strategies=("random", "asha", "hyperband", "bohb", "adaptive", "tpe"),
    tasks=TASKS,
    # Per task: the 10th-percentile accuracy and 90th-percentile time of 20,000 random
    # configurations at epoch 27 (tuning/benchdata/mo_reference.json).
    reference_point={t: reference(t) for t in TASKS},
    smoke={"budget": 3, "seeds": 1, "tasks": 1, "max_epochs": 3},
    description="LCBench (YAHPO Gym's surrogate), six development tasks: validation accuracy (%, max) against "
                "training time (s, min). The true front is unknown: hypervolume, no regret.",
)
