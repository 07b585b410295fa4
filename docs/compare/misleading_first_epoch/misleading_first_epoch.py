"""experiments/misleading_first_epoch.py as scaled for this folder's report (docs/comparisons.md says what was cut).
From the repository root: python -m tuning.compare docs/compare/misleading_first_epoch/misleading_first_epoch.py"""
import dataclasses

from tuning.compare import load_experiment

EXPERIMENT = dataclasses.replace(load_experiment("experiments/misleading_first_epoch")[1], seeds=tuple(range(10)),
                                 strategies=("bohb", "tpe"), reference="tpe")
