"""experiments/paired_choices.py as scaled for this folder's report (docs/comparisons.md says what was cut).
From the repository root: python -m tuning.compare docs/compare/paired_choices/paired_choices.py"""
import dataclasses

from tuning.compare import load_experiment

EXPERIMENT = dataclasses.replace(load_experiment("experiments/paired_choices")[1], seeds=tuple(range(10)),
                                 strategies=("bohb", "tpe"), reference="tpe")
