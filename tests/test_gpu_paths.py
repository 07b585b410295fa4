"""What of the GPU paths runs without a GPU: fractional GPUs packed by a real Ray (one that
declares a GPU it does not have), the out-of-memory message of a trial sharing a GPU, the
resource checks, and --precision from the command line to the trials."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from conftest import ROOT
from tuning import api, inputs, run, spaces
from tuning.backend.trainables import oom_message

TESTS = Path(__file__).resolve().parent


def test_oom_in_a_shared_gpu_names_the_gpus_per_trial_fix():
    msg = oom_message({"batch_size": 512}, "CUDA out of memory. Tried to allocate 2.00 GiB\nmore", 0.25)
    assert msg == ("CUDA out of memory with config {'batch_size': 512}: this trial shares its GPU with up to 3 "
                   "other trial(s) (--gpus-per-trial 0.25): raise --gpus-per-trial (e.g. to 0.5) so fewer trials "
                   "share it, or lower batch_size (CUDA out of memory. Tried to allocate 2.00 GiB)")
    for whole in (1.0, 2.0, 0.0):  # a whole GPU (or none): nobody to share with
        msg = oom_message({"batch_size": 512}, "CUDA out of memory.", whole)
        assert "lower batch_size or give trials more GPU memory" in msg and "--gpus-per-trial" not in msg


def _cluster(cpus: float, gpus: float) -> dict:
    return {"nodes": [{"alive": True, "cpus": cpus, "gpus": gpus}]}


def _resources(space, cluster, gpus_per_trial=None):
    """(cpus, gpus, workers) per trial, as tuning.api checks and records them."""
    res, workers = inputs.resources(space, cluster, None, gpus_per_trial, None)
    return res.cpu, res.gpu, workers


def test_a_quarter_gpu_per_trial_is_accepted_on_one_gpu():
    space = spaces.load("cifar_asha")
    assert _resources(space, _cluster(16, 1), gpus_per_trial=0.25) == (1, 0.25, 1)
    assert _resources(space, _cluster(16, 1)) == (1, 1, 1)  # auto: a whole GPU each


@pytest.mark.parametrize("gpus,needle", [(2, "more than the 1 GPUs of the largest Ray node"),
                                         (1.5, "give a whole number"),
                                         (0.25, None)])
def test_gpus_per_trial_against_one_gpu(gpus, needle):
    space = spaces.load("cifar_asha")
    if needle is None:
        assert _resources(space, _cluster(16, 1), gpus)[1] == gpus
    else:
        with pytest.raises(api.UsageError, match=needle):
            _resources(space, _cluster(16, 1), gpus)


@pytest.fixture
def ray_with_one_gpu(monkeypatch):
    """A real local Ray that declares one GPU: Ray schedules GPU shares by that count alone."""
    import ray

    # Ray's workers import tests/gpu_helpers.py; they inherit this environment.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), str(ROOT), os.environ.get("PYTHONPATH", "")]))
    ray.init(address="local", num_cpus=2, num_gpus=1, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.mark.slow  # make test-all; default suite: a quarter GPU per trial is accepted
def test_quarter_gpu_trials_share_one_gpu_and_an_oom_fails_alone(ray_with_one_gpu, tmp_path):
    from tuning import backend

    space = spaces.Space(params={"mode": spaces.Choice(["a", "b", "c", "oom"])}, trainer="gpu_helpers:shares_a_gpu",
                         strategy="grid", max_epochs=1, fixed={"marker_dir": str(tmp_path)})
    spec = backend.RunSpec(space=space, strategy="grid", num_samples=1, max_epochs=1, seed=0, cpus_per_trial=0.5,
                           gpus_per_trial=0.25, source=None, results_dir=tmp_path / "results", progress=False)
    records, _ = backend.run(spec)
    by_mode = {r.config["mode"]: r for r in records}
    for mode in "abc":  # three trials on one GPU at once (the fourth failed at its start)
        assert by_mode[mode].status == "TERMINATED", by_mode[mode].error
        row = by_mode[mode].rows[-1]
        assert row["together"] is True and row["visible_gpus"] == "0"
    oom = by_mode["oom"]
    assert oom.status == "ERROR" and oom.failures == 1  # its one attempt (max_failures 0): not retried
    assert "CUDA out of memory with config {'mode': 'oom'}: this trial shares its GPU" in oom.error
    assert "raise --gpus-per-trial (e.g. to 0.5) so fewer trials share it" in oom.error


def _fails(capsys, argv, *needles):
    code = run.main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, err


def _space_file(tmp_path: Path, fixed: dict) -> Path:
    path = tmp_path / "tiny_space.py"
    path.write_text("from tuning.spaces import LogUniform, Space\n"
                    "SPACE = Space(params={'lr': LogUniform(1e-3, 1e-2)}, strategy='random', num_samples=1,\n"
                    f"              max_epochs=1, gpus_per_trial=0, fixed={fixed!r})\n")
    return path


def test_unknown_precision_is_one_line_and_exit_2(capsys, tmp_path):
    _fails(capsys, ["--space", "cifar_asha", "--precision", "fp16"], "--precision", "'fp16'")
    bad = _space_file(tmp_path, {"precision": "fp16"})
    _fails(capsys, ["--space", str(bad), "--results-dir", str(tmp_path / "r")], "fixed precision 'fp16' unknown",
           "auto, bf16, fp32")
    assert not (tmp_path / "r").exists()
    _fails(capsys, ["--space", "counting_ones", "--precision", "bf16"], "--precision is for the cifar trainer")
    # Searched, an unknown value failed each of its trials at run time; from Python the keyword is named.
    searched = tmp_path / "searched.py"
    searched.write_text("from tuning.spaces import Choice, LogUniform, Space\n"
                        "SPACE = Space(params={'lr': LogUniform(1e-3, 1e-2), 'precision': Choice(['fp32', 'fp16'])},"
                        " strategy='random', num_samples=2, max_epochs=1, gpus_per_trial=0)\n")
    _fails(capsys, ["--space", str(searched), "--results-dir", str(tmp_path / "s")],
           "precision searches 'fp16', which the cifar trainer does not know: use values of auto, bf16, fp32")
    assert not (tmp_path / "s").exists()
    import tuning

    with pytest.raises(tuning.TuningError, match=r"^precision 'fp16' unknown: use one of auto, bf16, fp32$"):
        tuning.search(space="cifar_random", precision="fp16", results_dir=tmp_path / "p")


@pytest.mark.slow  # minutes: make test-all
@pytest.mark.timeout(400)
def test_the_precision_flag_overrides_the_space_and_reaches_the_trials(tmp_path):
    space = _space_file(tmp_path, {"width": 4, "batch_size": 128, "precision": "fp32"})  # narrow: bf16 is slow here
    done = subprocess.run([sys.executable, "-m", "tuning.run", "--space", str(space), "--smoke", "--num-samples", "1",
                           "--max-epochs", "1", "--precision", "bf16", "--data-dir", str(tmp_path / "data"),
                           "--results-dir", str(tmp_path / "r")], cwd=ROOT, capture_output=True, text=True,
                          timeout=380)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    plan = json.loads((tmp_path / "r" / "run.json").read_text())
    assert plan["precision"] == "bf16" and plan["fixed"]["precision"] == "bf16"
    assert json.loads((tmp_path / "r" / "best_config.json").read_text())["fixed"]["precision"] == "bf16"
    assert pd.read_csv(tmp_path / "r" / "epochs.csv")["bf16"].astype(bool).all()
