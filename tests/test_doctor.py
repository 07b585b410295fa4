"""tuning.doctor as a user runs it: locally it passes and lists what Ray sees; pointed at a
cluster that is not there, it fails with one clear line. (Against a real 2-node cluster:
tests/test_cluster.py.)"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT
from tuning import doctor


def _doctor(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tuning.doctor", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)


def test_doctor_passes_locally_and_lists_the_resources(tmp_path):
    done = _doctor("--data-dir", str(tmp_path / "data"), "--results-dir", str(tmp_path / "results"))
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "local Ray: 1 node(s)" in out and " CPUs" in out and "object store" in out
    assert "no GPU: trials run on CPU" in out or "OK    gpu 0" in out
    assert "WARN  data         no CIFAR-10" in out  # an empty data dir: synthetic, said plainly
    assert "OK    live trial" in out and "FAIL" not in out
    assert "All checks passed." in out


def test_doctor_flags_an_unreachable_cluster(tmp_path):
    done = _doctor("--address", "127.0.0.1:1", "--no-live", "--json", str(tmp_path / "doctor.json"))
    assert done.returncode == 1
    fail = [line for line in done.stdout.splitlines() if line.startswith("FAIL")]
    assert fail == ["FAIL  ray          --address 127.0.0.1:1: no Ray cluster answers there (Connection refused); "
                    "start one with `ray start --head` on that machine, or fix the address"]
    assert "Traceback" not in done.stdout + done.stderr
    # The same lines as data (what gpucheck reads), the screen made from them.
    lines = json.loads((tmp_path / "doctor.json").read_text())
    assert [(line["status"], line["what"]) for line in lines if line["status"] == "FAIL"] == [("FAIL", "ray")]
    assert all(set(line) == {"status", "what", "detail", "fix"} for line in lines)
    assert doctor.render(lines) in done.stdout


@pytest.mark.slow  # make test-all; default suite: test_data checks checksums and corrupted files
def test_doctor_flags_a_corrupt_cifar10(tmp_path):
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    (folder / "data_batch_1").write_bytes(b"truncated")
    done = _doctor("--data-dir", str(tmp_path), "--no-live")
    assert done.returncode == 1
    assert "FAIL  data" in done.stdout and "data_batch_1 fails its md5 check" in done.stdout
    assert "data_batch_2, data_batch_3, data_batch_4, data_batch_5, test_batch, batches.meta missing" in done.stdout


def test_doctor_judges_a_data_dir_as_a_run_does(tmp_path):
    # A file passed here while tuning.run refused it; the batches folder itself is read from its parent.
    (tmp_path / "afile").write_text("")
    assert data_line(doctor.check_data(tmp_path / "afile")).startswith("FAIL data: ")
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    (folder / "batches.meta").write_bytes(b"not CIFAR")
    assert f"CIFAR-10 in {folder} is damaged" in data_line(doctor.check_data(folder))


def test_doctor_fails_data_and_results_dirs_a_run_would_refuse(tmp_path):
    """It said "All checks passed" for a damaged tarball, folders nothing can be written in, and a
    batches folder without batches.meta (whose fix, to unpack the tarball into it, nested the folder)."""
    (tmp_path / "tar").mkdir()
    (tmp_path / "tar" / "cifar-10-python.tar.gz").write_bytes(b"not a tarball")
    assert data_line(doctor.check_data(tmp_path / "tar")) == (
        f"FAIL data: {tmp_path / 'tar' / 'cifar-10-python.tar.gz'} fails its md5 check (corrupt or partial download)")
    folder = tmp_path / "no-meta" / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    (folder / "data_batch_1").write_bytes(b"x")
    line = data_line(doctor.check_data(folder))
    assert line.startswith(f"FAIL data: CIFAR-10 in {folder} is damaged") and "batches.meta" in line
    if Path("/proc").is_dir():  # a folder nothing can be made in, for root too
        assert data_line(doctor.check_data(Path("/proc/tuning-data"))).startswith(
            "FAIL data: no CIFAR-10 in /proc/tuning-data, and /proc cannot be written")
        assert data_line(doctor.check_disk(Path("/proc/tuning-results"))).startswith("FAIL disk: /proc cannot be written")


def data_line(lines: list[dict]) -> str:
    (line,) = lines
    return f"{line['status']} {line['what']}: {line['detail']}"



GPU_LINES = """
import json
from tuning import doctor
print(json.dumps(doctor.gpu_lines(0)))
"""


def test_gputil_failing_to_import_names_the_real_cause(tmp_path):
    """Python 3.12 removed distutils, which GPUtil 1.4.0 imports: there `import GPUtil` fails.
    Here the real GPUtil is imported with distutils made unimportable the same way (a module
    first on the path that raises what 3.12 raises), and the doctor must say that, not tell
    the user to put nvidia-smi on PATH."""
    import json
    import os

    stub = tmp_path / "distutils"
    stub.mkdir()
    (stub / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'distutils'\", name='distutils')\n")
    # setuptools' distutils shim would otherwise answer the import before the path is searched.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "SETUPTOOLS_USE_DISTUTILS": "stdlib"}
    done = subprocess.run([sys.executable, "-c", GPU_LINES], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    lines = {line["what"]: line for line in json.loads(done.stdout)}
    gputil = lines["gputil"]
    assert gputil["detail"] == ("GPUtil cannot be imported: No module named 'distutils' (Python 3.12 removed "
                                "distutils; tuning reads the GPUs through NVML instead)")
    assert "nvidia-smi" not in gputil["fix"] and "setuptools" in gputil["fix"]
    if "nvml" in lines:  # no NVIDIA driver here: NVML's own reason, not a guess
        assert lines["nvml"]["status"] == "WARN" and lines["nvml"]["detail"].startswith("NVML cannot read the GPUs: ")
        assert gputil["status"] == "WARN"
    else:  # a GPU machine: NVML lists the GPUs, and GPUtil's absence is no problem
        assert lines["gpu 0"]["detail"].endswith("(NVML)") and gputil["status"] == "OK"



def test_doctor_fails_what_a_run_would_refuse_or_wait_on_for_ever(tmp_path):
    # A results dir under a file passed ("All checks passed") while tuning.run refused it; a cluster
    # whose nodes have no CPU kept the live trial waiting without a word, for ever.
    (tmp_path / "afile").write_text("")
    assert data_line(doctor.check_disk(tmp_path / "afile" / "results")).startswith(f"FAIL disk: {tmp_path / 'afile'} is a file")
    no_cpu = {"resources": {"CPU": 0}, "nodes": [{"alive": True, "cpus": 0, "gpus": 0}]}
    assert data_line(doctor.check_live(None, no_cpu)) == (
        "FAIL live trial: not run: no node of the cluster has a CPU for a trial")


def test_a_json_file_that_cannot_be_written_is_refused_before_any_check_runs(tmp_path):
    """--json names a file written at the end: a folder that is a file, does not exist, or is the
    name itself is refused first, not after every check ran (18 s, and exit 2 hid their exit 1)."""
    (tmp_path / "afile").write_text("")
    for path, says in ((tmp_path / "afile" / "doc.json", f"{tmp_path / 'afile'} is a file, not a folder"),
                       (tmp_path / "no" / "doc.json", f"{tmp_path / 'no'} does not exist"),
                       (tmp_path, "is a folder: give a file name in it")):
        done = _doctor("--no-live", "--data-dir", str(tmp_path), "--json", str(path))
        assert done.returncode == 2 and "Traceback" not in done.stderr
        assert done.stdout == ""  # no check ran
        line, = done.stderr.strip().splitlines()
        assert line.startswith("tuning.doctor: error: argument --json") and says in line, line


def test_an_empty_folder_flag_is_refused_as_tuning_run_refuses_it():
    """--data-dir '' (a script's empty variable) checked the current folder and said all passed."""
    for flag in ("--data-dir", "--results-dir"):
        done = _doctor("--no-live", flag, "")
        assert done.returncode == 2 and done.stdout == ""
        assert done.stderr.strip().splitlines() == [f"tuning.doctor: error: {flag} '' names no folder: give one, "
                                                    "or leave it out"]
