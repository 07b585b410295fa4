"""LCBench with two objectives (tuning.compare.mobench): validation accuracy (%, max) against the training
time (s) the surrogate predicts for the epochs trained (min), over LCBench's seven parameters. The
task is the trainer, "tuning.mobench:mo_lcbench_<OpenML task id>", one of the 29 development tasks."""

from search_spaces.lcbench import SPACE as _LCBENCH

SPACE = _LCBENCH.replace(trainer="tuning.mobench:mo_lcbench_3945", objectives={"accuracy": "max", "time_s": "min"},
                         metric="accuracy", mode="max")
