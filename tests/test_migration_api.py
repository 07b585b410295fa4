"""What a user coming from Ray Tune or Optuna reaches for (issue 40): the names the docs use, the
refusals that point to our way, JSON values in files, conditional parameters, choices of any JSON
value, the best trial's checkpoint, tracebacks kept in the results folder, MLflow's times and Tune's
trial names. Real Ray, real runs, no mocks."""

import importlib
import json
import re
from pathlib import Path

import pytest

import tuning
from tuning import spaces

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


# ---------------------------------------------------------------- 1: every name the docs use exists

def _python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def test_every_name_the_readme_and_docs_use_from_tuning_exists():
    used = set()
    for path in [*DOCS, *sorted((ROOT / "examples").glob("*.py"))]:
        text = path.read_text()
        for names in re.findall(r"from tuning import ([A-Za-z_, ]+)", text):
            used |= {(path.name, n.strip()) for n in names.split(",") if n.strip()}
        code = text if path.suffix == ".py" else "\n".join(_python_blocks(text))
        used |= {(path.name, n) for n in re.findall(r"\btuning\.([A-Za-z_]\w*)", code)}
    assert used, "the docs name nothing from tuning: the pattern is wrong"
    missing = []
    for where, name in sorted(used):
        if not hasattr(tuning, name):
            try:
                importlib.import_module(f"tuning.{name}")  # a module: tuning.run, tuning.report
            except ImportError:
                missing.append(f"{where}: tuning.{name}")
    assert not missing


def test_every_parameter_type_the_readme_lists_is_exported_from_tuning():
    readme = (ROOT / "README.md").read_text()
    for name in spaces.PARAM_TYPES:
        assert f"`{name}`" in readme
        assert getattr(tuning, name) is spaces.PARAM_TYPES[name] and name in tuning.__all__
    from tuning import IntLogUniform  # noqa: F401  what issue 40's user wrote first


# ---------------------------------------------------------------- 2: log=True points to LogUniform

@pytest.mark.parametrize("make, twin", [
    (lambda: tuning.Uniform(1e-4, 1e-1, log=True), "LogUniform(0.0001, 0.1)"),
    (lambda: tuning.IntUniform(8, 256, log=True), "IntLogUniform(8, 256)"),
    (lambda: tuning.LogUniform(0.1, 1.0, log=False), "Uniform(0.1, 1.0)"),
    (lambda: tuning.IntLogUniform(8, 256, log=False), "IntUniform(8, 256)"),
])
def test_log_keyword_is_refused_naming_the_type_to_use(make, twin):
    with pytest.raises(tuning.SpaceError) as err:
        make()
    assert twin in str(err.value) and "\n" not in str(err.value)
    assert isinstance(err.value, tuning.TuningError)


def test_log_keyword_saying_what_the_type_is_anyway_is_accepted():
    assert tuning.Uniform(0, 1, log=False) == tuning.Uniform(0, 1)
    assert tuning.LogUniform(1e-3, 1, log=True) == tuning.LogUniform(1e-3, 1)
    assert "log" not in spaces.declarations({"lr": tuning.LogUniform(1e-3, 1, log=True)})["lr"]  # run.json as before
