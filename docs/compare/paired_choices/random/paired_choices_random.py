"""experiments/paired_choices.py, random search alone over the same ten seeds: the peer BOHB's
p against random search in docs/comparisons.md is computed from (with ../finals.csv).
From the repository root: python -m tuning.compare docs/compare/paired_choices/random/paired_choices_random.py"""
import dataclasses

from tuning.compare import load_experiment

EXPERIMENT = dataclasses.replace(load_experiment("experiments/paired_choices")[1], seeds=tuple(range(10)),
                                 strategies=("random",), reference="random")
