import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# The suite never uses the network, with internet access or without: no CIFAR-10 download
# (tuning.trial.data), no Ray usage-stats report. Set in the environment, so every subprocess (tuning.run,
# `ray start`, Ray's workers) inherits it; tests/test_data.py checks a data prepare opens no socket.
os.environ["TUNING_NO_DOWNLOAD"] = "1"
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"

# `make test` runs the modules on two pytest-xdist workers, a module at a time (--dist loadfile, so
# that a module's Ray and its runs stay in one process), in this order: the longest first, so that
# the last module to start is a short one and neither worker idles while the other finishes a
# minutes-long end-to-end run. The order is by each module's seconds in `make test ARGS=--durations=0`
# (both workers busy, so the seconds include the other worker's load), 2026-12-07 on the 2-core
# development machine; modules under 15 s follow in their own order.
LONGEST_FIRST = ("test_real_experiments.py", "test_concurrency.py", "test_api.py", "test_compare.py", "test_smoke.py",
                 "test_reliability.py", "test_progress.py", "test_growth.py", "test_examples.py", "test_cifar_mo.py",
                 "test_objectives.py", "test_migration_strategies.py", "test_migration_api.py", "test_doctor.py",
                 "test_runreport.py", "test_points.py", "test_hyperband.py", "test_mo_strategies.py",
                 "test_strategies.py", "test_mo_report.py", "test_mo_input.py", "test_tracking.py", "test_replay.py",
                 "test_bad_input.py", "test_prestarted.py", "test_conditions.py", "test_mo_example.py",
                 "test_report_conditions.py", "test_rayinternals.py", "test_snapshots.py", "test_ddp.py",
                 "test_tpe_async.py")


def pytest_ignore_collect(collection_path, config):
    """`make test`'s last step (-m "alone ...") imports only the modules that mark a test alone:
    collecting all of them took 10 s of a single process after the parallel part."""
    if (config.getoption("markexpr", "") or "").startswith("alone") and collection_path.suffix == ".py" \
            and collection_path.name.startswith("test_") and "mark.alone" not in collection_path.read_text():
        return True
    return None


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: a module keeps its order
    if os.environ.get("PYTEST_XDIST_WORKER"):  # tests marked alone run after the workers (Makefile)
        alone = [item for item in items if item.get_closest_marker("alone")]
        if alone:
            config.hook.pytest_deselected(items=alone)
            items[:] = [item for item in items if not item.get_closest_marker("alone")]


@pytest.fixture(scope="session")
def synthetic_source(tmp_path_factory):
    """A small synthetic CIFAR-10 in the real on-disk layout, shared by the session's tests."""
    from tuning.trial import data

    return data.prepare("synthetic", tmp_path_factory.mktemp("data"), seed=0,
                        synthetic_train=2500, synthetic_test=500)


@pytest.fixture(scope="module")
def ray_2cpus():
    """A real local Ray, started as tuning starts one (tuning.backend.start_ray: ray.init(address="local",
    num_cpus=2, ...), its workers with Tune's trial environment), shared by a module's tests (a
    start costs seconds); shut down afterwards."""
    from tuning import backend

    backend.start_ray(num_cpus=2)
    yield
    backend.stop_ray()


def run_cli(*args, cwd=None, timeout=600) -> subprocess.CompletedProcess:
    """`python -m tuning.run ...` in a real subprocess, as a user runs it."""
    return subprocess.run([sys.executable, "-m", "tuning.run", *args], cwd=cwd or ROOT,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def ray_here():
    """A local Ray whose workers import the test trainers (tests/ on their PYTHONPATH: Ray's
    workers get the driver's cwd and script dir, not other sys.path entries): searches in a module
    use it and leave it running."""
    from tuning import backend

    tests = str(Path(__file__).resolve().parent)
    before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([tests, before or ""])
    backend.start_ray(num_cpus=2)  # as tuning starts it (ray_2cpus)
    yield
    backend.stop_ray()
    if before is None:
        os.environ.pop("PYTHONPATH", None)
    else:
        os.environ["PYTHONPATH"] = before
