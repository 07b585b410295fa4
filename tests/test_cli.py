"""Bad input: one line naming what is wrong and how to fix it, exit 2, no traceback, nothing lost."""

import argparse

import pytest

from cli_helpers import refused
from tuning.run import build_parser, main


@pytest.fixture
def results(tmp_path):
    return str(tmp_path / "results")


def test_unknown_space_lists_available(capsys, results):
    refused(capsys, main, ["--space", "cifar_nope", "--results-dir", results], "cifar_nope", "cifar_asha")


@pytest.mark.parametrize("flag,value", [("--num-samples", "0"), ("--num-samples", "-3"),
                                        ("--max-epochs", "0"), ("--seed", "-1")])
def test_non_positive_counts(capsys, results, flag, value):
    refused(capsys, main, ["--space", "cifar_asha", flag, value, "--results-dir", results], flag, value)


def test_missing_space_flag(capsys):
    refused(capsys, main, [], "--space")


def test_cifar10_without_the_data(capsys, tmp_path, results):
    refused(capsys, main, ["--space", "cifar_asha", "--data", "cifar10", "--data-dir", str(tmp_path / "empty"),
                           "--results-dir", results], "CIFAR-10 not found", "downloads are off (TUNING_NO_DOWNLOAD=1)",
            "--data synthetic")


def test_results_dir_that_cannot_be_written(capsys, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    refused(capsys, main, ["--space", "cifar_asha", "--results-dir", str(blocker / "results")],
            "cannot write to results dir", "--results-dir")


def test_results_dir_with_earlier_results_is_left_alone(capsys, tmp_path):
    earlier = tmp_path / "earlier"
    earlier.mkdir()
    (earlier / "trials.csv").write_text("precious")
    refused(capsys, main, ["--space", "cifar_asha", "--results-dir", str(earlier)], "not empty")
    assert (earlier / "trials.csv").read_text() == "precious"


def test_more_gpus_than_ray_sees(capsys, tmp_path, ray_2cpus):
    results = tmp_path / "results"
    refused(capsys, main, ["--space", "cifar_asha", "--smoke", "--gpus-per-trial", "1",
                           "--data-dir", str(tmp_path / "data"), "--results-dir", str(results)],
            "--gpus-per-trial 1", "0 GPUs")
    assert not results.exists()  # refused before anything was written


def test_more_cpus_than_ray_sees(capsys, tmp_path, ray_2cpus):
    refused(capsys, main, ["--space", "cifar_asha", "--smoke", "--cpus-per-trial", "3",
                           "--data-dir", str(tmp_path / "data"), "--results-dir", str(tmp_path / "r")],
            "--cpus-per-trial 3", "2 CPUs")


def test_help_explains_every_flag(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    out = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    flags = [a for a in build_parser()._actions if a.option_strings and a.dest != "help"]
    assert len(flags) >= 18
    for action in flags:  # every flag the parser takes, each with its explanation
        assert action.help and action.help != argparse.SUPPRESS, action.option_strings
        for flag in action.option_strings:
            assert flag in out
        explanation = " ".join(action.help.split()) % {"default": action.default}
        assert explanation in out, action.option_strings


def test_workers_per_trial_must_split_the_batch_sizes(capsys, tmp_path, ray_2cpus):
    refused(capsys, main, ["--space", "cifar_asha", "--smoke", "--workers-per-trial", "3", "--cpus-per-trial", "2",
                           "--data-dir", str(tmp_path / "data"), "--results-dir", str(tmp_path / "r")],
            "do not all split evenly over 3 ranks")


def test_workers_per_trial_is_for_cpu_trials(capsys, tmp_path, ray_2cpus):
    refused(capsys, main, ["--space", "cifar_asha", "--smoke", "--workers-per-trial", "2", "--gpus-per-trial", "0.5",
                           "--data-dir", str(tmp_path / "data"), "--results-dir", str(tmp_path / "r")],
            "--workers-per-trial 2 is for CPU trials")


def test_zero_workers(capsys, tmp_path, ray_2cpus):
    refused(capsys, main, ["--space", "cifar_asha", "--smoke", "--workers-per-trial", "0",
                           "--data-dir", str(tmp_path / "data"), "--results-dir", str(tmp_path / "r")],
            "--workers-per-trial must be at least 1")


def test_a_storage_folder_is_made_absolute_for_tune(tmp_path, monkeypatch):
    from tuning import cli

    monkeypatch.chdir(tmp_path)
    assert cli.storage_path("shared/tune") == str(tmp_path / "shared" / "tune")  # Tune refuses relative paths
    assert cli.storage_path("file:///mnt/shared") == "file:///mnt/shared"
