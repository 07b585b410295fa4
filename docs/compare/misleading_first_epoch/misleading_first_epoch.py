"""experiments/misleading_first_epoch.py scaled down, as run for the report in this folder
(docs/comparisons.md says what was cut): the real experiment's budget with the strategies (and
seeds, reference) named below. From the repository root:

    python -m tuning.compare docs/compare/misleading_first_epoch/misleading_first_epoch.py --out results/compare/misleading_first_epoch

The file that ran loaded experiments/misleading_first_epoch.py by its absolute path on the development
machine; this copy finds it from the repository root and is otherwise the same."""
import dataclasses
import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "_full", Path(__file__).resolve().parents[3] / "experiments" / "misleading_first_epoch.py")
_full = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_full)
STRATEGIES = ("bohb", "tpe")
EXPERIMENT = dataclasses.replace(_full.EXPERIMENT, seeds=tuple(range(5)), strategies=STRATEGIES,
                                 reference="tpe")
