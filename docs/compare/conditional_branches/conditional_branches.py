"""experiments/conditional_branches.py as scaled for this folder's report (docs/comparisons.md says what was cut).
From the repository root: python -m tuning.compare docs/compare/conditional_branches/conditional_branches.py"""
import dataclasses

from tuning.compare import load_experiment

EXPERIMENT = dataclasses.replace(load_experiment("experiments/conditional_branches")[1],
                                 strategies=("random", "bohb", "tpe"))
