"""experiments/conditional_branches.py scaled down, as run for the report in this folder
(docs/comparisons.md says what was cut): the real experiment's budget with the strategies (and
seeds, reference) named below. From the repository root:

    python -m tuning.compare docs/compare/conditional_branches/conditional_branches.py --out results/compare/conditional_branches

The file that ran loaded experiments/conditional_branches.py by its absolute path on the development
machine; this copy finds it from the repository root and is otherwise the same."""
import dataclasses
import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "_full", Path(__file__).resolve().parents[3] / "experiments" / "conditional_branches.py")
_full = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_full)
STRATEGIES = ("random", "bohb", "tpe")
EXPERIMENT = dataclasses.replace(_full.EXPERIMENT, strategies=STRATEGIES)
