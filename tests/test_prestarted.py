"""Trial actors run in the worker processes Ray prestarted on a local Ray that tuning started
(tuning/backend/cluster.py, prestarted_workers), not in fresh ones, and still get Tune's
PL_DISABLE_FORK=1. A process of its own: the Ray must be one start_ray started."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent

SCRIPT = """
import json, sys, tempfile, time
from pathlib import Path
import psutil
from tuning import Space, Uniform, backend

backend.start_ray(num_cpus=2)

def workers():
    # An idle worker names itself ray::IDLE once it is up (Ray's process title).
    return {p.pid for p in psutil.Process().children(recursive=True) if " ".join(p.cmdline()).startswith("ray::IDLE")}

deadline = time.monotonic() + 60
while len(workers()) < 2 and time.monotonic() < deadline:
    time.sleep(0.2)
prestarted = workers()
space = Space(params={"lr": Uniform(0.0, 1.0)}, trainer="user_trainers:whereami", metric="score", mode="max",
              num_samples=2, max_epochs=1, gpus_per_trial=0)
rec = backend.recorder()
with tempfile.TemporaryDirectory() as d:
    backend.run(backend.RunSpec(space=space, strategy="random", num_samples=2, max_epochs=1, seed=0,
                                cpus_per_trial=1, gpus_per_trial=0, source=None, results_dir=Path(d),
                                progress=False, callbacks=[rec]))
print(json.dumps({"prestarted": sorted(prestarted),
                  "trials": [{"pid": r["pid"], "pl_disable_fork": r["pl_disable_fork"]} for r in rec.rows]}))
"""


def _trial_workers(env) -> dict:
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=240, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("shell", [{}, {"AWS_ACCESS_KEY_ID": "from-the-shell"}], ids=["plain", "aws-credentials"])
def test_trial_actors_run_in_the_workers_ray_prestarted_with_tunes_environment(shell):
    # Tune copies the driver's AWS credentials into each trial actor's runtime env; a CI machine that
    # had them set saw both trials in one fresh worker.
    from ray.tune.execution.class_cache import ENV_VARS_TO_PROPAGATE

    env = {k: v for k, v in os.environ.items() if k not in ENV_VARS_TO_PROPAGATE}
    env.update(shell, PYTHONPATH=os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    # Whether the raylet hands the first trial an idle worker or starts one is a race that only a
    # loaded machine has been seen to lose (once in CI, beside another test module: both trials in
    # a fresh worker). So up to three fresh Rays: without prestarted_workers() every one of them
    # starts a worker for the trials, as the trial actors' runtime env matches no idle worker.
    tries = []
    for _ in range(3):
        seen = _trial_workers(env)
        tries.append(seen)
        assert len(seen["prestarted"]) >= 2 and len(seen["trials"]) == 2, seen
        assert all(t["pl_disable_fork"] == 1 for t in seen["trials"]), seen
        if all(t["pid"] in seen["prestarted"] for t in seen["trials"]):
            return
    pytest.fail(f"no try ran its trials in the workers Ray prestarted: {tries}")
