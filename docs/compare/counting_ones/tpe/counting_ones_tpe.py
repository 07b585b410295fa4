"""experiments/counting_ones.py with TPE alone, for docs/comparisons.md's table (the other five
strategies' runs are in the report one folder up; TPE came later).
From the repository root: python -m tuning.compare docs/compare/counting_ones/tpe/counting_ones_tpe.py"""
import dataclasses

from tuning.compare import load_experiment

EXPERIMENT = dataclasses.replace(load_experiment("experiments/counting_ones")[1], strategies=("tpe",), reference="tpe")
