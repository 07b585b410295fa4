"""tuning.report on synthetic comparison folders: no Ray, no training, seconds."""

import json

import numpy as np
import pandas as pd
import pytest

from report_helpers import assert_renders_in_chromium, needs_chromium
from tuning.report import analysis
from tuning.report import comparison as report

DIMS, MAX_T, BUDGET = 8, 3, 12  # counting ones with 8 dims; 3 iterations = 1 full evaluation


def _run_rows(strategy, seed, *, low, high, n_trials, stop_every=0, recompute=False, cifar=False):
    """One run's rows as compare.py reports them. Each trial's configuration scores q, drawn from
    [low, high) and capped at 1 (fraction of ones); its loss is -DIMS*q at full fidelity and worse
    at lower fidelity."""
    rng = np.random.default_rng(1000 * seed + len(strategy))
    rows, iters = [], 0
    for t in range(n_trials):
        q = min(1.0, rng.uniform(low, high))  # high > 1: some trials hit the optimum, regret 0
        last = 1 if stop_every and t % stop_every == 1 else MAX_T  # ASHA-like early stop
        for i in range(1, last + 1):
            iters += 1
            row = {"benchmark": "cifar" if cifar else "counting_ones", "strategy": strategy, "seed": seed,
                   "run_id": f"{strategy}-s{seed}", "trial_id": f"{strategy}_{t:03d}",
                   "training_iteration": i, "loss": -DIMS * q + (MAX_T - i), "full_fidelity": i == MAX_T,
                   "consumed_budget": iters / MAX_T, "wall_s": 0.4 * iters + 0.01 * t, "epoch": i}
            if cifar:
                row.update(loss=2.5 - 1.5 * q + 0.3 * (MAX_T - i), accuracy=0.3 + 0.5 * q,
                           lr=float(10 ** rng.uniform(-4, -2)), batch_size=int(rng.choice([64, 128, 256, 512])))
            else:
                row.update({f"x{k}": round(q, 3) for k in range(2)})
            rows.append(row)
            if recompute and t == 0 and i == 2:  # the trainer reported epoch 2 twice
                rows.append(dict(row))
    return rows


def make_dir(path, strategies=("random", "grid", "asha"), seeds=(0, 1, 2), *, cifar=False, parquet=False):
    """A comparison folder: random search, a grid that runs out at half the budget, and `asha`,
    clearly better than random (its configurations are drawn near the optimum)."""
    plan = {"random": {"low": 0.0, "high": 0.9, "n_trials": 12},
            "grid": {"low": 0.2, "high": 0.9, "n_trials": 6},
            "asha": {"low": 0.85, "high": 1.05, "n_trials": 18, "stop_every": 2, "recompute": True}}
    rows = [r for s in strategies for seed in seeds for r in _run_rows(s, seed, cifar=cifar, **plan[s])]
    path.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(path / "runs.csv", index=False)
    if parquet:
        pd.DataFrame(rows).to_parquet(path / "runs.parquet", index=False)
    params = ["lr", "batch_size"] if cifar else ["x0", "x1"]
    (path / "experiment.json").write_text(json.dumps({
        "name": "test", "benchmark": "cifar" if cifar else "counting_ones", "metric": "loss", "mode": "min",
        "budget": BUDGET, "max_t": MAX_T, "strategies": ["grid", "random", "asha", "bohb"],
        "seeds": list(seeds), "params": params, "optimum": None if cifar else -DIMS,
        "regret": None if cifar else "normalized_counting_ones", "dims": None if cifar else DIMS,
        "description": "A synthetic comparison written by the tests."}))
    (path / "provenance.json").write_text(json.dumps({
        "data": {"kind": "synthetic"}, "machine": {"cpus": 2}, "git_commit": "abc123", "argv": ["x"]}))
    return path


def _md_rows(md: str, first_header: str) -> dict:
    """Rows of the markdown table whose first header is `first_header`, by first cell."""
    lines = md.splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith(f"| {first_header} |"))
    header = [c.strip() for c in lines[start].strip("|").split("|")]
    rows = {}
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[cells[0]] = dict(zip(header, cells))
    return rows


def test_report_files_tables_and_exhausted_grid(tmp_path):
    out = report.write_report(make_dir(tmp_path / "cmp"))
    md, page = out["markdown"].read_text(), out["html"].read_text()
    assert (tmp_path / "cmp" / report.FIGURES["anytime"]).stat().st_size > 10_000
    assert page.count("data:image/png;base64,") == 1 and 'src="http' not in page and "<link" not in page
    final = _md_rows(md, "strategy")
    assert set(final) == {"grid", "random", "asha"}
    assert all(final[s]["n"] == "3" for s in final)
    assert final["asha"]["epochs recomputed"] == "3" and final["random"]["epochs recomputed"] == "0"
    assert final["random"]["trials per run"] == "12.0"
    assert "grid exhausted after 6 of 12 full evaluations in 3 of 3 runs" in md
    assert "grid exhausted" in page and "asha stopped early" not in md  # asha used its budget
    assert "clipped at 1e-06" in md and "Data (data.kind): synthetic" in md
    assert "| git_commit | abc123 |" in md


def test_incumbent_is_monotone_on_the_grid():
    rng = np.random.default_rng(0)
    n = 60
    run = pd.DataFrame({"consumed_budget": np.cumsum(rng.uniform(0, 1, n)), "value": rng.normal(size=n),
                        "full_fidelity": rng.uniform(size=n) < 0.5})
    grid = np.linspace(0, run["consumed_budget"].max() + 1, 300)
    inc = analysis.incumbent_on_grid(run, grid)
    defined = inc[~np.isnan(inc)]
    assert len(defined) > 200 and np.all(np.diff(defined) <= 0)
    assert np.isnan(inc[0])  # before the first full-fidelity result: undefined, not drawn
    assert np.all(np.isnan(inc[:np.argmax(~np.isnan(inc))]))
    assert defined[-1] == run.loc[run["full_fidelity"], "value"].min()
    # mode max: non-decreasing
    up = analysis.incumbent_on_grid(run, grid, sign=-1)
    assert np.all(np.diff(up[~np.isnan(up)]) >= 0)


def test_mean_curves_are_monotone_and_need_every_seed(tmp_path):
    runs, exp, _ = analysis.load(make_dir(tmp_path / "cmp"))
    grid = np.geomspace(0.1, BUDGET, 100)
    curves = analysis.anytime_curves(runs, ["random", "asha"], grid, "consumed_budget", 1)
    for c in curves.values():
        m = c["mean"][~np.isnan(c["mean"])]
        assert c["n"] == 3 and len(m) > 50 and np.all(np.diff(m) <= 1e-12)
        assert np.isnan(c["mean"][grid < 1]).all()  # no seed has a full evaluation before budget 1


def test_incumbent_ignores_low_fidelity_rows():
    run = pd.DataFrame({"consumed_budget": [1 / 3, 2 / 3, 1.0, 4 / 3, 2.0],
                        "value": [-100.0, -50.0, -1.0, -99.0, -2.0],
                        "full_fidelity": [False, False, True, False, True]})
    inc = analysis.incumbent_on_grid(run, [0.5, 1.0, 1.5, 2.0])
    assert np.isnan(inc[0]) and list(inc[1:]) == [-1.0, -1.0, -2.0]


def test_cli_regenerates_the_same_report_from_runs_csv(tmp_path, capsys):
    d = make_dir(tmp_path / "cmp", parquet=True)
    first = report.write_report(d)["markdown"].read_text()  # from runs.parquet
    for name in ["report.md", "report.html", "runs.parquet", *report.FIGURES.values()]:
        (d / name).unlink(missing_ok=True)
    assert report.main([str(d)]) == 0
    again = (d / "report.md").read_text()  # from runs.csv alone
    assert _md_rows(again, "strategy") == _md_rows(first, "strategy")
    assert again == first
    assert (d / report.FIGURES["anytime"]).exists() and (d / "report.html").exists()


@pytest.mark.parametrize("setup", ["no-runs", "no-dir", "bad-json"])
def test_bad_dir_exits_2_with_one_line(tmp_path, capsys, setup):
    d = make_dir(tmp_path / "cmp")
    if setup == "no-runs":
        (d / "runs.csv").unlink()
    elif setup == "no-dir":
        d = tmp_path / "nothing-here"
    else:
        (d / "experiment.json").write_text("{not json")
    capsys.readouterr()
    assert report.main([str(d)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err and err.startswith("tuning.report: error:")
    if setup != "bad-json":  # tuning.report takes a run's folder too: the line says so
        assert "pass a run's results dir (it holds run.json) or the folder python -m tuning.compare wrote" in err


def test_mann_whitney_finds_the_better_strategy(tmp_path):
    out = report.write_report(make_dir(tmp_path / "cmp", seeds=range(6)))
    tests = out["tests"].set_index("strategy")
    assert tests.loc["asha", "p"] < 0.05 and tests.loc["asha", "delta_median"] < 0
    md = out["markdown"].read_text()
    sig = _md_rows(md, "strategy")  # first table with that header is the final table
    assert sig["asha"]["n"] == "6"
    assert float(_sig_rows(md)["asha"]["p (Mann-Whitney U, two-sided)"]) < 0.05
    assert "asha: final regret lower than random search's" in md and "better than random" in md
    assert out["table"].set_index("strategy").loc["asha", "speedup"] > 1


def _sig_rows(md):
    return _md_rows(md[md.index("## Significance"):], "strategy")


def test_three_seeds_say_the_test_cannot_reach_significance(tmp_path):
    md = report.write_report(make_dir(tmp_path / "cmp"))["markdown"].read_text()
    assert "cannot give p below 0.1" in md
    assert set(_sig_rows(md)) == {"grid", "asha"}


def test_without_random_the_comparisons_are_marked_unavailable(tmp_path):
    md = report.write_report(make_dir(tmp_path / "cmp", strategies=("grid", "asha")))["markdown"].read_text()
    assert "columns are not available" in md and "Not computed: no random search runs." in md
    assert _md_rows(md, "strategy")["asha"]["speed-up vs random"] == "n/a"


def test_cifar_report_plots_loss_and_the_lr_batch_scatter(tmp_path):
    out = report.write_report(make_dir(tmp_path / "cmp", strategies=("random", "asha"), cifar=True))
    md, page = out["markdown"].read_text(), out["html"].read_text()
    assert (tmp_path / "cmp" / report.FIGURES["scatter"]).exists()
    assert page.count("data:image/png;base64,") == 2
    assert "No known optimum" in md and "regret" not in _md_rows(md, "strategy")["asha"]
    best = _md_rows(md[md.index("## What was found"):], "strategy")
    assert {"lr", "batch_size", "accuracy", "loss"} <= set(best["asha"])


@needs_chromium
@pytest.mark.parametrize("cifar", [False, True])
def test_html_renders_in_headless_chromium(tmp_path, cifar):
    d = make_dir(tmp_path / "cmp", cifar=cifar)
    assert_renders_in_chromium(report.write_report(d)["html"], tmp_path)


def test_a_missing_whole_number_is_an_empty_cell_in_both_formats():
    """A conditional integer parameter's column is pandas' nullable Int64: the run report's trials
    table printed <NA> where the parameter was inactive."""
    from tuning.report import render

    table = pd.DataFrame({"layers": pd.array([2, None], dtype="Int64"), "optimizer": ["sgd", "adam"]})
    md, page = render.render_markdown([("table", table)]), render.render_html([("table", table)], "t")
    assert "<NA>" not in md and "&lt;NA&gt;" not in page
    assert "|  | adam |" in md and "<td></td><td>adam</td>" in page
