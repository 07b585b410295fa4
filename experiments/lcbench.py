"""LCBench's real learning curves (tuning/compare/realbench.py): MLPs on OpenML tasks, seven parameters,
epochs 1..27, 50 full evaluations per run, every strategy and both peers. Six of the 29
development tasks, every fifth of the README's list from the first: chosen by that rule before
any result, so the strategies are not tuned to them. The held-out tasks are never run."""

from tuning.compare import Experiment
from tuning.compare.realbench import LCBENCH_TASKS

EXPERIMENT = Experiment(
    space="lcbench",
    budget=50,  # the setup: 50 full evaluations of 27 epochs
    seeds=tuple(range(10)),
    strategies=("grid", "random", "asha", "hyperband", "bohb", "adaptive", "tpe"),
    tasks=tuple(f"lcbench_{t}" for t in LCBENCH_TASKS[::5]),
    # Smoke: one task, one seed, 4 full evaluations (max_t 27: rungs 1, 3, 9, 27).
    smoke={"budget": 4, "seeds": 1, "tasks": 1},
    description="LCBench (YAHPO Gym's surrogate of real MLP learning curves), six development tasks; loss = "
                "100 - validation accuracy (%), regret in accuracy points against the best of 200,000 random "
                "configurations at epoch 27.",
)
