"""LCBench over all 29 development tasks (the benchmark README's list), for the mean rank over them:
the same setting as experiments/lcbench (seven parameters, epochs 1..27, 50 full evaluations, every
strategy and both peers), at 5 seeds a task so that the 29 fit in sittings of a few hours on two
cores. The six tasks experiments/lcbench runs at 10 seeds are in docs/compare/lcbench_dev as links to
their folders there, and are not run again. The held-out tasks are never run."""

from tuning.compare import Experiment
from tuning.compare.realbench import LCBENCH_TASKS

EXPERIMENT = Experiment(
    space="lcbench",
    budget=50,
    seeds=tuple(range(5)),
    strategies=("grid", "random", "asha", "hyperband", "bohb", "adaptive", "tpe"),
    tasks=tuple(f"lcbench_{t}" for t in LCBENCH_TASKS),
    smoke={"budget": 4, "seeds": 1, "tasks": 1},
    description="LCBench (YAHPO Gym's surrogate of real MLP learning curves), the 29 development tasks; loss = "
                "100 - validation accuracy (%), regret in accuracy points against the best of 200,000 random "
                "configurations at epoch 27.",
)
