"""Every bad input: one line naming the problem and the fix, exit code 2, no traceback, and
nothing already on disk changed."""

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import tuning
from cli_helpers import refused
from conftest import ROOT
from tuning.run import main

GOOD = '''
from tuning.spaces import Choice, LogUniform, Space
SPACE = Space(params={PARAMS}, metric="{METRIC}", max_epochs=2)
'''
SPACES = {
    "syntax_error": ("SPACE = Space(params={'lr': LogUniform(1e-4, 1e-2)}", "syntax error"),
    "unknown_distribution": (GOOD.replace("{PARAMS}", "{'lr': Normal(0, 1)}").replace("{METRIC}", "loss"),
                             "NameError: name 'Normal' is not defined"),
    "ray_distribution": ("from ray import tune\n" + GOOD.replace("{PARAMS}", "{'lr': tune.qloguniform(1e-4, 1e-2, 1e-4)}")
                         .replace("{METRIC}", "loss"), "Ray Tune distribution"),
    "lower_above_upper": (GOOD.replace("{PARAMS}", "{'lr': LogUniform(1e-2, 1e-4)}").replace("{METRIC}", "loss"),
                          "0 < low < high"),
    "log_of_zero": (GOOD.replace("{PARAMS}", "{'lr': LogUniform(0, 1e-2)}").replace("{METRIC}", "loss"),
                    "0 < low < high"),
    "empty_choice": (GOOD.replace("{PARAMS}", "{'batch_size': Choice([])}").replace("{METRIC}", "loss"),
                     "at least one value"),
    "duplicate_parameter": (GOOD.replace("{PARAMS}", "{'lr': LogUniform(1e-4, 1e-2), 'lr': LogUniform(1e-3, 1)}")
                            .replace("{METRIC}", "loss"), "parameter 'lr' is declared twice"),
    "metric_never_reported": (GOOD.replace("{PARAMS}", "{'lr': LogUniform(1e-4, 1e-2)}").replace("{METRIC}", "val_acc"),
                              "metric 'val_acc' is never reported"),
    "not_a_cifar_parameter": (GOOD.replace("{PARAMS}", "{'x': LogUniform(1e-4, 1e-2)}").replace("{METRIC}", "loss"),
                              "'x' is not a parameter of the built-in CIFAR trainer"),
    "grid_too_large": ("from tuning.spaces import Uniform, Space\n"
                       "SPACE = Space(params={f'x{i}': Uniform(0, 1, grid=3) for i in range(20)}, strategy='grid',"
                       " trainer='counting_ones')",
                       "3,486,784,401 trials is too large"),
}


def _tree(root: Path) -> dict:
    return {str(p.relative_to(root)): hashlib.md5(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def workdir(tmp_path):
    """A folder with earlier results in it, which no refusal may touch."""
    (tmp_path / "earlier").mkdir()
    (tmp_path / "earlier" / "trials.csv").write_text("trial_id,loss\na,1.0\n")
    return tmp_path


def _refused(capsys, argv, root: Path, *needles):
    before = _tree(root)
    err = refused(capsys, main, argv, *needles)
    assert _tree(root) == before  # nothing on disk changed
    return err


@pytest.mark.parametrize("case", SPACES)
def test_malformed_space(capsys, workdir, case):
    source, needle = SPACES[case]
    space = workdir / f"{case}.py"
    space.write_text(source)
    _refused(capsys, ["--space", str(space), "--strategy", "grid" if case == "grid_too_large" else "asha",
                      "--results-dir", str(workdir / "new")], workdir, needle)


# A numeric flag's value that makes no sense: tests/test_cli.py, for every command.
@pytest.mark.parametrize("argv,needles", [
    (["--space", "cifar_asha", "--strategy", "hill-climbing"], ["invalid choice: 'hill-climbing'"]),
    (["--space", "no_such_space"], ["no_such_space", "available spaces are", "cifar_asha"]),
    ([], ["--space is required"]),
    # Checked with pyarrow, as Ray opens it, before anything starts (an unknown scheme needs no network).
    (["--space", "counting_ones", "--storage-path", "nosuchscheme://bucket/x"],
     ["argument --storage-path: nosuchscheme://bucket/x cannot be opened (", "give a folder every node reaches"]),
    # A local one where no folder can be made: Ray started, then a traceback left run.json 'running'.
    (["--space", "counting_ones", "--storage-path", "/proc/no_store"], ["cannot write in /proc", "you can write"]),
    (["--space", "counting_ones", "--storage-path", f"{__file__}/store"], [f"{__file__} is a file, not a folder"]),
    # Growing a search (docs/growing-a-search.md).
    (["--space", "counting_ones", "--add-samples", "3"], ["--add-samples needs --resume DIR"]),
    (["--space", "counting_ones", "--warm-start-top", "2"], ["--warm-start-top needs --warm-start DIR"]),
    (["--space", "counting_ones", "--warm-start", "/no/such/run"],
     ["--warm-start: /no/such/run: no such folder; give the results dir of a tuning.run"]),
    (["--space", "counting_ones", "--strategy", "grid", "--warm-start", "/no/such/run"],
     ["grid search walks its fixed"]),
    (["--space", "counting_ones", "--strategy", "bohb", "--warm-start", "/no/such/run", "--warm-start-top", "2"],
     ["--warm-start-top: bohb's model learns from every earlier result", "drop --warm-start-top"]),
    # Each was ignored without a word, or '' taken as the current folder.
    (["--space", "fcnet", "--data", "cifar10"], ["--data is for the cifar trainer's images; fcnet trains"]),
    (["--space", "cifar_asha", "--data-dir", ""], ["--data-dir '' names no folder"]),
    # An empty number (a script's empty variable): the line ended in "got ".
    (["--space", "counting_ones", "--num-samples="], ["--num-samples must be a whole number, got ''"]),
    (["--space", "counting_ones", "--workers-per-trial", "2"],
     ["--workers-per-trial 2: counting_ones trains as one process (a benchmark, or a replay): drop it"]),
])
def test_bad_flags(capsys, workdir, argv, needles):
    _refused(capsys, argv + ["--results-dir", str(workdir / "new")], workdir, *needles)


@pytest.mark.parametrize("command,positional", [("run", []), ("compare", ["experiments/counting_ones"]),
                                                ("report", ["results"]), ("bench", []), ("doctor", [])])
def test_every_command_names_an_unknown_flag_in_one_line(command, positional):
    # A typo in a flag is the commonest bad input; argparse's own answer is the whole usage dump.
    done = subprocess.run([sys.executable, "-m", f"tuning.{command}", *positional, "--adress", "auto"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [f"tuning.{command}: error: unrecognized arguments: --adress auto (see --help)"]


def test_a_refusal_under_the_chosen_strategy_is_its_one_line_alone(tmp_path):
    """A space that names no strategy logged 'strategy adaptive (the space names none ...)' before a
    refusal found after Ray started: two lines where one was promised."""
    argv = ["--space", "zdt", "--cpus-per-trial", "999", "--results-dir", str(tmp_path / "r")]  # zdt names none
    done = subprocess.run([sys.executable, "-m", "tuning.run", *argv], cwd=ROOT, capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == 2 and not (tmp_path / "r").exists()
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "--cpus-per-trial 999 is more than" in lines[0], done.stderr


def test_address_auto_with_no_cluster_started_on_the_machine(tmp_path):
    # "auto" finds a cluster through RAY_ADDRESS or the address file `ray start` writes in RAY_TMPDIR
    # (here neither). Ray's own "auto" then joined any Ray process it found on the machine: another
    # user's local Ray, which a new-user trial's resumed run died with. Now refused, whatever runs.
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["RAY_TMPDIR"] = str(tmp_path)
    done = subprocess.run([sys.executable, "-m", "tuning.run", "--address", "auto", "--space", "counting_ones",
                           "--smoke", "--results-dir", str(tmp_path / "results")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr[-3000:]
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("tuning.run: error: --address auto: no cluster was started on this machine with `ray "
                           "start --head`") and "give --address HOST:PORT (the head's GCS port" in line
    assert "Traceback" not in done.stderr and not (tmp_path / "results").exists()


@pytest.mark.parametrize("address, needle", [
    ("http://127.0.0.1:8265", "without a scheme (ray:// is Ray Client, and http:// the dashboard"),
    ("WEB", "a web server answers there (Ray's dashboard and job server listen on 8265), not Ray's GCS"),
])
def test_an_address_that_is_no_gcs_is_refused_at_once(capsys, workdir, address, needle):
    # The dashboard's port (what `ray job submit` takes) answered the TCP probe, then ray.init retried
    # for ten minutes and more.
    import http.server
    import threading

    class Quiet(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):  # its own lines on stderr are not the command's
            pass

    class QuietServer(http.server.HTTPServer):
        def handle_error(self, request, client_address):  # a probe that hangs up mid-request: not the command's line
            pass

    web = QuietServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=web.serve_forever, daemon=True).start()
    try:
        given = address.replace("WEB", f"127.0.0.1:{web.server_port}")
        _refused(capsys, ["--space", "counting_ones", "--smoke", "--address", given, "--results-dir",
                          str(workdir / "new")], workdir, f"--address {given}: ", needle)
    finally:
        web.shutdown()


def _run_json(folder, status: str) -> None:
    from tuning.record import RunRecord

    RunRecord(space="cifar_asha", strategy="asha", seed=0, num_samples=2, max_epochs=2, status=status).write(folder)


def test_resume_of_a_missing_dir(capsys, workdir):
    _refused(capsys, ["--resume", str(workdir / "gone")], workdir, "no such folder")


def test_resume_of_a_dir_that_is_no_experiment(capsys, workdir):
    _refused(capsys, ["--resume", str(workdir / "earlier")], workdir, "not a tuning.run results dir")


@pytest.mark.parametrize("flags", [["--warm-start", "x"], ["--warm-start-top", "2"]])
def test_resume_refuses_the_flags_of_a_warm_start(capsys, workdir, flags):
    # A resumed run keeps its warm start; --warm-start-top alone was once ignored without a word.
    _run_json(workdir / "earlier", "interrupted")
    _refused(capsys, ["--resume", str(workdir / "earlier"), *flags], workdir,
             "--warm-start starts a new run: it cannot be given with --resume")


@pytest.mark.parametrize("flags, named", [(["--num-samples", "20"], "--num-samples would be ignored: drop it"),
                                          (["--seed", "3", "--max-epochs", "9"], "--max-epochs, --seed would be"),
                                          (["--max-failures", "2"], "--max-failures would be"),
                                          (["--space", "cifar_asha"], "--space would be"),
                                          (["--smoke"], "--smoke would be"),
                                          (["--data-dir", "./data"], "--data-dir would be")])
def test_resume_refuses_the_flags_it_would_ignore(capsys, workdir, flags, named):
    # A resume runs on with run.json's settings: --num-samples 20 once did nothing, without a word.
    # A flag is refused when named, whatever its value: `--data-dir ./data`, the default's value, passed.
    _run_json(workdir / "earlier", "interrupted")
    line = _refused(capsys, ["--resume", str(workdir / "earlier"), *flags], workdir, named)
    assert "use --add-samples N for more trials" in line


def test_a_warm_start_under_grid_names_every_strategy_that_takes_one(capsys, workdir):
    # It named four (random, asha, hyperband, bohb); median, adaptive and tpe take one too.
    _refused(capsys, ["--space", "counting_ones", "--strategy", "grid", "--warm-start", str(workdir / "earlier"),
                      "--results-dir", str(workdir / "r")], workdir,
             "grid search walks its fixed points", "use any other strategy (random, asha, median, hyperband, bohb, "
             "adaptive, tpe)")


def test_resume_of_a_finished_experiment(capsys, workdir):
    _run_json(workdir / "earlier", "finished")
    _refused(capsys, ["--resume", str(workdir / "earlier")], workdir,
             "finished already; its results are there (add --add-samples N to run N more trials in it)")
    # From Python in Python's words (it read "add add_samples N"), and a bad time budget named first
    # (it was told the run had finished).
    with pytest.raises(tuning.TuningError, match=r"there \(give add_samples=N to run N more trials in it\)$"):
        tuning.resume(workdir / "earlier")
    with pytest.raises(tuning.TuningError, match="^time_budget 'abc': give a positive duration"):
        tuning.resume(workdir / "earlier", time_budget="abc")


def test_results_dir_with_results_in_it(capsys, workdir):
    _refused(capsys, ["--space", "cifar_asha", "--results-dir", str(workdir / "earlier")], workdir,
             "not empty: choose a new --results-dir so no earlier result is overwritten (or --resume it if it")
    with pytest.raises(tuning.TuningError, match=r"choose a new results_dir .* \(or tuning.resume it if it is"):
        tuning.search(None, "counting_ones", results_dir=workdir / "earlier")


@pytest.mark.parametrize("call", [lambda: tuning.search(None, "counting_ones", results_dir=5),
                                  lambda: tuning.resume(5)])
def test_a_results_dir_that_is_no_path_is_refused_in_one_line(call):
    with pytest.raises(tuning.TuningError, match="^results_dir takes a folder's path, got 5$"):
        call()  # it was Path(5)'s TypeError


def test_results_dir_that_is_a_file_or_empty(capsys, workdir):
    _refused(capsys, ["--space", "cifar_asha", "--results-dir", str(workdir / "earlier" / "trials.csv")], workdir,
             "trials.csv is a file: choose a new --results-dir, a folder")  # was "is not empty ... --resume it"
    _refused(capsys, ["--space", "cifar_asha", "--results-dir", ""], workdir, "--results-dir '' names no folder")


def test_results_dir_that_cannot_be_written(capsys, workdir):
    blocker = workdir / "earlier" / "trials.csv"  # a file where a folder would have to go
    _refused(capsys, ["--space", "cifar_asha", "--results-dir", str(blocker / "results")], workdir,
             "cannot write to results dir", "--results-dir")


def test_results_dir_held_by_another_run(capsys, workdir):
    from filelock import FileLock

    _run_json(workdir / "earlier", "running")
    with FileLock(str(workdir / "earlier" / ".lock")):
        before = _tree(workdir)
        _refused(capsys, ["--resume", str(workdir / "earlier")], workdir, "in use by another tuning.run")
    assert _tree(workdir) == before


def _cifar_copy(synthetic_source, to: Path) -> Path:
    """Files in CIFAR-10's layout whose contents are not CIFAR-10's: what a bad download looks like."""
    shutil.copytree(Path(synthetic_source.root) / "cifar-10-batches-py", to / "cifar-10-batches-py")
    return to


def test_cifar10_files_that_fail_their_md5_are_named(capsys, workdir, synthetic_source):
    data_dir = _cifar_copy(synthetic_source, workdir / "data")
    _refused(capsys, ["--space", "cifar_asha", "--data", "cifar10", "--data-dir", str(data_dir),
                      "--results-dir", str(workdir / "new")], workdir, "data_batch_1, data_batch_2, data_batch_3",
             "fail their md5 check")


def test_partial_cifar10_names_the_missing_file(capsys, workdir, synthetic_source):
    data_dir = _cifar_copy(synthetic_source, workdir / "data")
    for f in (data_dir / "cifar-10-batches-py").iterdir():
        f.unlink()
    line = _refused(capsys, ["--space", "cifar_asha", "--data-dir", str(data_dir), "--results-dir",
                             str(workdir / "new")], workdir, "damaged: data_batch_1, data_batch_2")
    assert "test_batch, batches.meta missing: copy or download CIFAR-10 again" in line and "delete" not in line


def test_every_damaged_file_is_named_missing_or_corrupt(capsys, workdir, synthetic_source):
    # Once only the first problem was named: a missing test_batch hid behind data_batch_1's md5.
    data_dir = _cifar_copy(synthetic_source, workdir / "data")
    (data_dir / "cifar-10-batches-py" / "test_batch").unlink()
    line = _refused(capsys, ["--space", "cifar_asha", "--data-dir", str(data_dir), "--results-dir",
                             str(workdir / "new")], workdir, "test_batch missing")
    assert "data_batch_1, data_batch_2, data_batch_3, data_batch_4, data_batch_5, batches.meta fail their md5" in line


def test_the_batches_folder_itself_as_data_dir_is_read_from_its_parent(capsys, workdir, synthetic_source):
    # torchvision wants the folder above cifar-10-batches-py; given the folder itself, auto once wrote
    # synthetic data inside it and trained on that.
    data_dir = _cifar_copy(synthetic_source, workdir / "data")
    _refused(capsys, ["--space", "cifar_asha", "--data-dir", str(data_dir / "cifar-10-batches-py"),
                      "--results-dir", str(workdir / "new")], workdir, f"CIFAR-10 in {data_dir}/cifar-10-batches-py",
             "fail their md5 check")


def test_a_data_dir_that_is_a_file_is_refused(capsys, workdir):
    (workdir / "afile").write_text("")
    _refused(capsys, ["--space", "cifar_asha", "--data-dir", str(workdir / "afile"), "--results-dir",
                      str(workdir / "new")], workdir, "is a file: give the folder")


def test_cifar10_required_but_absent(capsys, workdir):
    # The suite sets TUNING_NO_DOWNLOAD=1: the refusal, not a download, on a machine with internet too.
    _refused(capsys, ["--space", "cifar_asha", "--data", "cifar10", "--data-dir", str(workdir / "nodata"),
                      "--results-dir", str(workdir / "new")], workdir,
             "CIFAR-10 not found", "downloads are off (TUNING_NO_DOWNLOAD=1)", "--data synthetic")


def test_data_dir_that_cannot_hold_synthetic_data(capsys, workdir):
    blocker = workdir / "earlier" / "trials.csv"  # a file where a folder would have to go
    _refused(capsys, ["--space", "cifar_asha", "--data", "synthetic", "--data-dir", str(blocker / "data"),
                      "--results-dir", str(workdir / "new")], workdir, "choose a writable --data-dir")
