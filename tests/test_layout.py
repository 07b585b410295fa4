"""The package's shape: no import circles, measurement kept off the run path, a non-editable
install that has every module and runs the commands the README gives, and a README that stays a
front door (issue 42)."""

import ast
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "tuning"


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports() -> dict[str, set[str]]:
    """Each module of tuning/ -> the modules of tuning/ it imports, anywhere in its body (a lazy
    import inside a function closes a circle as surely as one at the top)."""
    modules = {_module(p): p for p in PACKAGE.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = ".".join(package[:len(package) - node.level + 1] + [node.module or ""]).strip(".") \
                    if node.level else node.module
                found |= {f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names}
        graph[name] = {m for m in found if m in modules and m != name}
    return graph


def test_no_module_of_tuning_imports_itself_back_through_others():
    graph, cycles = _imports(), []

    def walk(node, path):
        for nxt in graph[node]:
            if nxt in path:
                cycles.append(path[path.index(nxt):] + [nxt])
            elif nxt not in done:
                walk(nxt, path + [nxt])
        done.add(node)

    done: set[str] = set()
    for start in sorted(graph):
        if start not in done:
            walk(start, [start])
    assert not cycles, f"import circles: {[' -> '.join(c) for c in cycles]}"
    assert {"tuning.report.comparison", "tuning.bench.measure", "tuning.spaces"} <= set(graph)  # the walk saw them


def test_the_run_path_never_imports_the_measurement_package():
    graph = _imports()

    def measuring(m: str) -> bool:
        return m == "tuning.bench" or m.startswith("tuning.bench.")  # not tuning.compare.benchmarks: a run's trainers

    reach = {m for m, deps in graph.items() if not measuring(m) and any(measuring(d) for d in deps)}
    assert not reach, f"{sorted(reach)} import tuning.bench: measurement code would load on every run"


def test_the_driver_modules_load_without_torch():
    # tuning.run once imported the CIFAR trainer for its --precision choices, and tuning.session the
    # data module: torch (3 s) in every command's driver, which only a CIFAR run's data needs.
    code = ("import sys, tuning.run, tuning.session, tuning.api, tuning.compare, tuning.backend; "
            "print(sorted(m for m in ('torch', 'torchvision') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"


@pytest.mark.timeout(240)
def test_a_non_editable_install_has_every_module_and_runs_the_commands(tmp_path):
    pytest.importorskip("setuptools", minversion="70.1")  # builds wheels itself from 70.1 (no `wheel` package)
    source = tmp_path / "source"  # a copy: setuptools builds in the source tree, and the checkout stays clean
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source)
    for name in ("tuning", "search_spaces"):
        shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet",
                            "--wheel-dir", str(tmp_path / "dist"), str(source)], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr[-2000:]
    wheel = next((tmp_path / "dist").glob("tuning-*.whl"))
    shipped = set(zipfile.ZipFile(wheel).namelist())
    ours = {str(p.relative_to(ROOT)) for d in ("tuning", "search_spaces") for p in (ROOT / d).rglob("*.py")}
    assert not ours - shipped, f"left out of the wheel: {sorted(ours - shipped)}"
    zipfile.ZipFile(wheel).extractall(tmp_path / "site")
    # Run from an empty folder with only the install on the path, so nothing comes from the checkout.
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site")}
    for command in (["tuning.report", "--help"], ["tuning.bench", "--help"], ["tuning.bench.gpucheck", "--help"],
                    ["tuning.run", "--help"]):
        done = subprocess.run([sys.executable, "-m", *command], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0 and "usage:" in done.stdout, (command, done.stderr[-1000:])
        where = subprocess.run([sys.executable, "-c", f"import {command[0]} as m; print(m.__file__)"], cwd=tmp_path,
                               env=env, capture_output=True, text=True, timeout=120)
        assert where.stdout.startswith(str(tmp_path / "site")), where.stdout + where.stderr


def test_the_readme_is_a_front_door_not_a_lab_book():
    """At most 200 lines, no commit hashes and no dates: the dated measurements live in docs/lab/.
    Its counts and versions are pyproject's and the code's."""
    from tuning import spaces

    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 200
    hashes = [w for w in re.findall(r"\b[0-9a-f]{7,40}\b", text) if re.search(r"[a-f]", w) and re.search(r"\d", w)]
    assert not hashes, f"commit hashes in the README: {hashes}"
    assert not re.search(r"\b20\d\d-\d\d-\d\d\b", text), "a dated entry in the README: it belongs in docs/lab/"
    counts = {6: "six", 7: "seven", 8: "eight", 9: "nine", 10: "ten"}
    assert f"{counts[len(spaces.STRATEGIES)]} strategies" in text and all(f"`{s}`" in text or s in text.lower()
                                                                       for s in spaces.STRATEGIES)
    floor = re.search(r'requires-python = ">=(3\.\d+)"', (ROOT / "pyproject.toml").read_text())[1]
    assert f"Python {floor} or newer" in text


# Ray's private API is used in one module, tuning/backend/rayinternals.py, written against one Ray
# version: an upgrade breaks nothing outside it (issue 42).
RAY_ROOM = "tuning/backend/rayinternals.py"
# Ray's private modules, by their path: ray._private, ray._raylet, ray._common, ray.*._internal, and
# ray.tune.execution (Tune's controller and actor cache, no public API).
PRIVATE_PATH = re.compile(r"\bray\._|\._private\b|\b_raylet\b|\._internal\b|\bray\.tune\.execution\b")
# Private attributes and methods of Ray's objects, read, written or overridden, that the room holds:
# TuneController's and its snapshot manager's, _TrainingRunMetadata's, CLIReporter's, OptunaSearch's,
# Tune's actor class cache's, then Tune's variant generator's and SearchGenerator's, its Hyperband,
# ASHA and median schedulers' and brackets', and TuneBOHB's.
RAY_PRIVATE_NAMES = {
    "_checkpoint_manager", "_trials_to_cache", "_should_force_sync_up", "_last_save_time", "_last_sync_time",
    "_get_trial_checkpoints", "_start_time", "_search_alg", "_session_str", "_TrainingRunMetadata",
    "DEFAULT_ENV_VARS", "_current_best_trial", "_parameter_columns", "_sort_by_metric", "_metric", "_mode",
    "_ot_trials", "_ot_study", "_completed_trials",
    "_TrialIterator", "_iterators", "_trial_generator", "_total_samples", "_uuid_prefix", "_random_state",
    "_Bracket", "_create_bracket", "_get_n0", "_get_r0", "_s_max_1", "_trial_info", "_hyperbands",
    "_process_bracket", "_live_trials", "_all_trials", "_cumul_r", "_rungs", "_brackets", "_metric_op",
    "_time_attr", "_max_t_attr", "_on_insufficient_samples", "_unpause_trial", "_stop_last_trials",
    "_BOHBJobWrapper", "_setup_bohb", "_bohb_config", "_set_trial_status",
}


def _private_ray_uses(path: Path) -> list[str]:
    """Where the code of `path` (its docstrings and comments left out) names Ray's private API."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):  # a docstring may say what Ray does; only code counts
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            body[0] = ast.Pass()
    found = [m[0] for m in PRIVATE_PATH.finditer(ast.unparse(tree))]
    methods = {f for c in ast.walk(tree) if isinstance(c, ast.ClassDef)
               for f in c.body if isinstance(f, ast.FunctionDef)}
    for node in ast.walk(tree):  # read or written, imported, or overridden in a subclass
        name = (node.attr if isinstance(node, ast.Attribute) else node.name if isinstance(node, ast.alias)
                else node.name if node in methods else None)
        if name in RAY_PRIVATE_NAMES:
            found.append(name)
    return found


def test_rays_private_api_is_used_in_one_module_only():
    uses = {str(p.relative_to(ROOT)): _private_ray_uses(p) for p in sorted(PACKAGE.rglob("*.py"))}
    outside = {f: u for f, u in uses.items() if u and f != RAY_ROOM}
    assert not outside, f"Ray's private API outside {RAY_ROOM}: {outside}"
    assert uses[RAY_ROOM]  # the check sees what it looks for


# One job per module, in at most 400 lines (issue 42): a module that grows past it is split by job
# (tuning/params.py apart from tuning/spaces.py, say), not cut at the line.
MAX_LINES = 400


def test_every_module_of_tuning_keeps_to_400_lines():
    sizes = {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in sorted(PACKAGE.rglob("*.py"))}
    over = {f: n for f, n in sizes.items() if n > MAX_LINES}
    assert not over, f"modules past {MAX_LINES} lines (split each by job): {over}"
    assert sizes["tuning/spaces.py"] > 100  # the check reads the files it means to


# The old names of moved modules, each the moved module itself under that name (sys.modules), so
# that what imports them there still works: tuning/backend imports these until it imports
# tuning.trial.* and tuning.compare.* (replay.py: tuning.compare.recorded, whose name it shares with
# backend/replay.py until then). mobench stays: trainers are named `tuning.mobench:<name>` in spaces,
# experiments and the run.json of committed comparisons.
# tuning.mobench: the trainer name ("tuning.mobench:<name>") that spaces, experiments and committed
# run.json files write for the multi-objective benchmarks, now tuning/compare/mobench.py.
ALIASES = {"tuning/mobench.py"}


def test_no_two_modules_share_a_name():
    """A module's name says which module is meant (issue 42): tuning/replay.py and backend/replay.py
    were two. Every package has its __init__ and may have a __main__."""
    by_name: dict[str, list[str]] = {}
    for p in sorted(PACKAGE.rglob("*.py")):
        if p.name not in ("__init__.py", "__main__.py") and str(p.relative_to(ROOT)) not in ALIASES:
            by_name.setdefault(p.stem, []).append(str(p.relative_to(ROOT)))
    shared = {name: paths for name, paths in by_name.items() if len(paths) > 1}
    assert not shared, f"modules sharing a name: {shared}"
    for alias in sorted(ALIASES):  # an alias is nothing more than the moved module under its old name
        text = (ROOT / alias).read_text()
        assert "sys.modules[__name__] = " in text and len(text.splitlines()) <= 10, alias
    import tuning.compare.mobench
    import tuning.mobench

    assert tuning.mobench is tuning.compare.mobench


def test_the_alone_step_collects_every_module_that_marks_a_test_alone():
    """`make test`'s last step (-m "alone and not slow") imports only the modules that mark a test
    alone (conftest.pytest_ignore_collect): one it passed over would never run, and make test would
    still pass (that step accepts "no tests ran")."""
    marked = {p.name for p in (ROOT / "tests").glob("test_*.py")
              if re.search(r"^\s*@pytest\.mark\.alone\b", p.read_text(), re.MULTILINE)}
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}  # not as an xdist worker
    proc = subprocess.run([sys.executable, "-m", "pytest", "-m", "alone", "--collect-only", "-q", "-p",
                           "no:cacheprovider"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    collected = {line.split("::")[0].removeprefix("tests/") for line in proc.stdout.splitlines() if "::" in line}
    assert marked and collected == marked, proc.stdout[-2000:]
