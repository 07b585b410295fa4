"""examples/multi_objective.py as a newcomer runs it (smoke-sized, from Python as a script): its
front is the feasible, non-dominated trials of what ran, and it prints that front."""

import json
import subprocess
import sys

import pandas as pd

from conftest import ROOT


def test_the_multi_objective_example_keeps_the_feasible_front(tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "examples" / "multi_objective.py"), "--smoke"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Pareto front (loss min, num_params min)" in done.stdout and "Traceback" not in done.stderr
    folder = next((tmp_path / "results").iterdir())
    trials = pd.read_csv(folder / "trials.csv", dtype={"trial_id": str})
    assert (trials["num_params"] == 75 * trials["hidden"] + 10).all()  # 64 x h + h, then h x 10 + 10: the trial's net
    assert (trials["feasible"] == (trials["accuracy"] >= 0.9)).all()
    ok = trials[trials["feasible"] & (trials["epochs"] == trials["epochs"].max())]
    points = {r["trial_id"]: (r["loss"], r["num_params"]) for _, r in ok.iterrows()}
    expected = {t for t, (a, b) in points.items()
                if not any(c <= a and d <= b and (c, d) != (a, b) for s, (c, d) in points.items() if s != t)}
    front = pd.read_csv(folder / "pareto.csv", dtype={"trial_id": str})
    assert expected and set(front["trial_id"]) == expected
    for trial_id in front["trial_id"]:  # the front is printed, one line a member
        assert trial_id in done.stdout.split("num_params  accuracy")[-1]
    best = json.loads((folder / "best_config.json").read_text())
    assert best["constraints"] == {"accuracy": [">=", 0.9]} and best["trial_id"] == front["trial_id"].iloc[0]
