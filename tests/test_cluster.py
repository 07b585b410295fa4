"""The same commands on a real multi-node Ray cluster: Ray's own ray.cluster_utils.Cluster on this
machine, a head and a second node of 1 CPU each, joined with --address as a user joins theirs."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import pytest

from conftest import ROOT
from run_helpers import (STEADY, TESTS, check_resumed, check_tables, hold_mid_run, logged_epochs, snapshot,
                         write_space)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def cluster():
    from ray.cluster_utils import Cluster

    # The nodes' worker processes import the test trainers (tests/faulty.py) like a user's own module.
    before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(TESTS), before or ""])
    port = _free_port()
    c = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "include_dashboard": True, "dashboard_host": "127.0.0.1", "dashboard_port": port})
    c.add_node(num_cpus=1)
    c.wait_for_nodes()
    c.dashboard_url = f"http://127.0.0.1:{port}"
    yield c
    c.shutdown()
    if before is None:
        os.environ.pop("PYTHONPATH", None)
    else:
        os.environ["PYTHONPATH"] = before


def _cli(module: str, *args, timeout=600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.slow  # make test-all; default suite: test_smoke.py runs the same command on one node
def test_smoke_run_spreads_over_both_nodes(cluster, tmp_path):
    # --storage-path: the folder every node reaches (here both nodes share this machine's disk).
    results, shared = tmp_path / "results", tmp_path / "shared"
    done = _cli("tuning.run", "--address", cluster.address, "--space", "cifar_asha", "--smoke", "--num-samples", "4",
                "--results-dir", str(results), "--data-dir", str(tmp_path / "data"), "--storage-path", str(shared))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    trials = pd.read_csv(results / "trials.csv")
    assert len(trials) == 4 and (trials["status"] == "TERMINATED").all()
    assert trials["node_id"].nunique() == 2  # one CPU per node: trials ran on both
    assert (trials["peak_rss_mb"] > 0).all()
    assert json.loads((results / "run.json").read_text())["address"] == cluster.address
    # Tune's experiment and the checkpoints went to the storage path, in the run's own folder.
    own = shared / json.loads((results / "run.json").read_text())["storage_name"]
    assert own.name.startswith("results-") and list(own.glob("experiment_state-*.json"))
    assert len(list(own.glob("*/checkpoint_*"))) >= 4
    assert not (results / "tune").exists()
    assert json.loads((results / "best_config.json").read_text())["test_accuracy"] is not None  # read back from storage


@pytest.mark.slow  # minutes: make test-all
def test_killed_driver_resumes_on_the_cluster(cluster, tmp_path):
    results, gate, max_epochs = tmp_path / "results", tmp_path / "gate", 4
    space = write_space(tmp_path, STEADY.format(strategy="asha", epochs=max_epochs, rf=2, gate=str(gate)))
    proc = subprocess.Popen([sys.executable, "-m", "tuning.run", "--address", cluster.address, "--space", str(space),
                             "--results-dir", str(results)], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    hold_mid_run(proc, results, gate)
    os.killpg(proc.pid, signal.SIGKILL)  # the driver dies; the cluster lives on, as on a real one
    proc.wait()
    time.sleep(2)
    progress, known = logged_epochs(results), snapshot(results)
    assert known, "no readable experiment snapshot after the kill"
    assert any(st == "TERMINATED" for st, _ in known.values())

    gate.unlink()
    done = _cli("tuning.run", "--resume", str(results), "--address", cluster.address)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    trials, _ = check_tables(results, 6, max_epochs)
    assert check_resumed(results, progress, known)  # finished trials not rerun, the others went on
    assert trials["node_id"].nunique() == 2


@pytest.mark.slow  # minutes: make test-all
def test_doctor_on_the_cluster(cluster):
    done = _cli("tuning.doctor", "--address", cluster.address)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"cluster at {cluster.address}: 2 node(s), 2 CPUs" in done.stdout
    assert "OK    live trial" in done.stdout


@pytest.mark.slow  # minutes: make test-all
def test_job_submit_runs_the_smoke_experiment(cluster, tmp_path):
    # The README's workflow: the job's driver runs on the head and joins the cluster by --address auto.
    ray_cli = Path(sys.executable).with_name("ray")
    results = tmp_path / "results"
    for _ in range(6):  # the dashboard answers before its job agent is up: Ray says to try again later
        done = subprocess.run([str(ray_cli), "job", "submit", "--address", cluster.dashboard_url, "--",
                               sys.executable, "-m", "tuning.run", "--address", "auto", "--space", "counting_ones",
                               "--smoke", "--results-dir", str(results)], cwd=ROOT, capture_output=True, text=True,
                              timeout=300)
        if "No available agent to submit job" not in done.stderr:
            break
        time.sleep(5)
    assert done.returncode == 0 and "succeeded" in done.stdout + done.stderr, done.stdout[-3000:] + done.stderr
    trials = pd.read_csv(results / "trials.csv")
    assert len(trials) == 8 and (trials["status"] == "TERMINATED").all()



@pytest.mark.slow  # minutes: make test-all
def test_token_auth_the_right_token_joins_a_wrong_one_is_one_clear_line(tmp_path):
    # A head as `ray start --head` starts one on a real machine (not cluster_utils): with a token
    # in its HOME, Ray 2.60 turns token authentication on. Its own HOME and temp dir keep this
    # machine's token and the other tests' Ray apart.
    import ray

    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_AUTH", "RAY_ADDRESS"))}
    env["HOME"] = str(tmp_path)
    ray_cli, port = str(Path(sys.executable).with_name("ray")), _free_port()
    subprocess.run([ray_cli, "get-auth-token", "--generate"], env=env, check=True, capture_output=True, timeout=60)
    session = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # short: Ray's socket paths live under it
    head = subprocess.Popen([ray_cli, "start", "--head", "--block", f"--port={port}", "--num-cpus=1",
                             "--include-dashboard=false", f"--temp-dir={session}"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        address = f"{ray.util.get_node_ip_address()}:{port}"
        # The token in ~/.ray/auth_token, HOST:PORT named: Ray alone would join without it. The
        # live check runs a real trial, whose worker must call back to the driver with the token.
        done = subprocess.run([sys.executable, "-m", "tuning.doctor", "--address", address], cwd=ROOT,
                              env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr[-3000:]
        assert f"OK    ray          cluster at {address}" in done.stdout and "OK    live trial" in done.stdout
        # A wrong token: one line says what to fix, at once (ray.init alone retries for 20 s).
        done = subprocess.run([sys.executable, "-m", "tuning.run", "--address", address, "--space", "counting_ones",
                               "--smoke", "--results-dir", str(tmp_path / "results")], cwd=ROOT, capture_output=True,
                              env={**env, "RAY_AUTH_TOKEN": "not-the-token"},
                              text=True, timeout=120)
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
        assert done.stderr.strip().splitlines() == [(
            f"tuning.run: error: --address {address}: the cluster refused this driver's auth token (missing or "
            "wrong); put the head's `ray get-auth-token` in ~/.ray/auth_token, RAY_AUTH_TOKEN_PATH or RAY_AUTH_TOKEN")]
        assert not (tmp_path / "results").exists()  # refused before anything was written
        # Auth turned off on this side: the line names that, not the token.
        done = subprocess.run([sys.executable, "-m", "tuning.doctor", "--address", address, "--no-live"], cwd=ROOT,
                              env={**env, "RAY_AUTH_MODE": "disabled"}, capture_output=True, text=True, timeout=120)
        assert done.returncode == 1 and "RAY_AUTH_MODE=disabled here keeps this driver from sending one" in done.stdout
    finally:
        os.killpg(head.pid, signal.SIGKILL)  # `ray start --block` and the head's processes with it
        head.wait(timeout=60)
        shutil.rmtree(session, ignore_errors=True)
