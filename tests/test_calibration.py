import math

import pandas as pd
import pytest

from tuning.trial import synthetic
from tuning.bench import calibration

# Hand-made learning curves (validation accuracy at epochs 1, 2, 3) of a 3 x 2 grid.
GOOD = {
    (1e-4, 64): [0.20, 0.40, 0.60],
    (1e-4, 256): [0.30, math.nan],  # diverged in epoch 2: counts as chance (0.10) from then on
    (1e-3, 64): [0.50, 0.60, 0.85],  # the best: in the band, at the middle learning rate
    (1e-3, 256): [0.55, 0.65, 0.80],  # 5 points below: batch size matters
    (1e-2, 64): [0.70, 0.72, 0.74],  # leads at epoch 2, ends third: curves cross
    (1e-2, 256): [0.65, 0.70, 0.72],
}


def epochs_table(curves: dict) -> pd.DataFrame:
    rows = [{"trial_id": f"t{i}", "lr": lr, "batch_size": bs, "epoch": e + 1, "accuracy": acc}
            for i, ((lr, bs), accs) in enumerate(curves.items()) for e, acc in enumerate(accs)]
    return pd.DataFrame(rows)


def write_run(directory, curves: dict) -> None:
    ep = epochs_table(curves)
    last = ep.groupby("trial_id").tail(1)
    last.assign(epochs=last["epoch"], status="TERMINATED").to_csv(directory / "trials.csv", index=False)
    ep.to_csv(directory / "epochs.csv", index=False)


def checks(v: dict) -> dict:
    return {name: ok for name, ok, _ in v["checks"]}


def test_verdicts_on_a_grid_that_meets_every_target():
    v = calibration.verdicts(epochs_table(GOOD), early_epoch=2)
    assert checks(v) == {"best in band": True, "worst far below": True, "best lr interior": True,
                         "batch size matters": True, "curves cross": True}
    assert v["passed"]
    final = v["curves"][3]
    assert final[(1e-4, 256)] == pytest.approx(0.10)  # the diverged trial, carried to the end
    # Pairs clearly ahead at epoch 2 and clearly behind at epoch 3 (leader first).
    assert sorted(v["crossings"]) == sorted([
        ((1e-2, 64), (1e-3, 64)), ((1e-2, 64), (1e-3, 256)), ((1e-2, 256), (1e-3, 64)),
        ((1e-2, 256), (1e-3, 256)), ((1e-3, 256), (1e-3, 64))])
    # 15 pairs, 5 of them discordant, no ties: tau = (10 - 5) / 15.
    assert v["kendall_tau"] == pytest.approx(1 / 3)


def test_verdicts_on_a_grid_that_misses_every_target():
    easy = {(lr, bs): [0.90 + 0.01 * i, 0.95 + 0.001 * i, 0.96 + 0.001 * i]
            for i, (lr, bs) in enumerate([(1e-4, 64), (1e-4, 256), (1e-3, 64), (1e-3, 256), (1e-2, 64),
                                          (1e-2, 256)])}
    v = calibration.verdicts(epochs_table(easy), early_epoch=2)
    assert checks(v) == {"best in band": False, "worst far below": False, "best lr interior": False,
                         "batch size matters": False, "curves cross": False}
    assert not v["passed"] and v["crossings"] == [] and v["kendall_tau"] == pytest.approx(1.0)


def test_a_flip_smaller_than_the_margin_is_not_a_crossing():
    early = pd.Series({"a": 0.700, "b": 0.69})
    assert calibration.crossings(early, pd.Series({"a": 0.80, "b": 0.85})) == []  # 1 point early
    final = pd.Series({"a": 0.80, "b": 0.85})
    assert calibration.crossings(early.replace(0.69, 0.675), final) == [("a", "b")]
    assert calibration.crossings(early.replace(0.69, 0.675), final - [0, 0.04]) == []  # 1 point late


def test_repeated_configurations_are_averaged():
    ep = pd.concat([epochs_table({(1e-3, 64): [0.5, 0.7]}),
                    epochs_table({(1e-3, 64): [0.6, 0.9]}).assign(trial_id="t9")])
    assert calibration.curves(ep).loc[(1e-3, 64)].tolist() == pytest.approx([0.55, 0.8])


def test_table_command_writes_the_report(tmp_path, capsys):
    write_run(tmp_path, GOOD)
    assert calibration.main(["table", str(tmp_path)]) == 0
    text = (tmp_path / "calibration.md").read_text()
    assert text == capsys.readouterr().out
    assert "| best lr interior | PASS |" in text and "| curves cross | PASS |" in text
    assert "| 0.001 | 64 | 50.0% | 60.0% | 85.0% | 4 | 1 |" in text  # ranks 4th at epoch 2, 1st at 3


def test_table_command_exits_1_when_a_check_fails(tmp_path):
    write_run(tmp_path, {k: v for k, v in GOOD.items() if k[0] != 1e-4})  # best lr now at an edge
    assert calibration.main(["table", str(tmp_path)]) == 1
    assert "| best lr interior | FAIL |" in (tmp_path / "calibration.md").read_text()


@pytest.mark.parametrize("setup, message", [
    (lambda d: None, "No such file"),
    (lambda d: [pd.DataFrame({"x": [1]}).to_csv(d / f, index=False) for f in ("trials.csv", "epochs.csv")],
     "lacks column"),
])
def test_bad_folders_are_one_line_and_exit_2(tmp_path, capsys, setup, message):
    setup(tmp_path)
    assert calibration.main(["table", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and err.startswith("tuning.bench.calibration: error:") and "\n" not in err
    assert not (tmp_path / "calibration.md").exists()


def test_proxy_trains_the_grid_and_writes_run_tables(tmp_path):
    # Real training, tiny: 2 x 1 configurations, 2 epochs on 200 images.
    ep = calibration.proxy(tmp_path / "run", train=200, val=100, epochs=2, lrs=[1e-3, 1e-2], batch_sizes=[64],
                           data_dir=tmp_path / "data", sizes=(500, 100))
    last_epoch = ep.groupby(["lr", "batch_size"])["epoch"].max()
    assert sorted(last_epoch.items()) == [((1e-3, 64), 2), ((1e-2, 64), 2)]
    assert ep["accuracy"].between(0, 1).all()
    trials = pd.read_csv(tmp_path / "run" / "trials.csv")
    assert trials["epochs"].tolist() == [2, 2] and set(trials["status"]) == {"TERMINATED"}
    assert len(calibration.read_run(tmp_path / "run")) == 4


def test_probe_command_reports_a_linear_model_near_chance(capsys):
    assert calibration.main(["probe", "--images", "1000"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"linear model on the pixels of 1000 synthetic v{synthetic.VERSION} images")
    assert "on the other 200" in out
    held_out = float(out.rsplit("%", 1)[0].rsplit(" ", 1)[1])
    assert held_out < 20


def test_examples_command_draws_a_png(tmp_path):
    png = tmp_path / "examples.png"
    assert calibration.main(["examples", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 50_000
