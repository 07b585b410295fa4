"""Conditional parameters (tuning/conditions.py): declarations refused when they cannot mean
anything, grid over the valid combinations only, every strategy's trials without inactive
parameters (a trainer that fails on one), BOHB's model on mixed active sets, and warm start and
extension carrying absent values. Real Ray, real runs."""

import itertools
import json

import numpy as np
import pandas as pd
import pytest

import tuning
from tuning import conditions, growth, spacejson, spaces
from tuning.backend.bohb import configspace
from tuning.spaces import Choice, IntLogUniform, IntUniform, LogUniform, Space, SpaceError, Uniform


def branch_params(grid=2):
    return {
        "optimizer": Choice(["adamw", "sgd"]),
        "lr": Uniform(0.0, 1.0, grid=1),
        "momentum": Uniform(0.8, 0.99, grid=grid, when={"optimizer": "sgd"}),
        "nesterov": Choice([True, False], when={"optimizer": "sgd"}),
        "width": IntLogUniform(4, 32, grid=2),
    }


def branch_space(**kw) -> Space:
    return Space(**{**dict(params=branch_params(), trainer="user_trainers:branches", metric="loss", mode="min",
                           num_samples=9, max_epochs=3, reduction_factor=3, gpus_per_trial=0), **kw})


def valid(config: dict) -> bool:
    sgd = config["optimizer"] == "sgd"
    return all((k in config) == sgd for k in ("momentum", "nesterov")) and {"lr", "width"} <= set(config)


# ---------------------------------------------------------------- declarations


@pytest.mark.parametrize("params, fixed, needle", [
    ({"x": Uniform(0, 1, when={"y": 1})}, {}, "'y', which is not a parameter"),
    ({"y": Choice([1, 2]), "x": Uniform(0, 1, when={"y": 3})}, {}, "a value 'y' cannot take"),
    ({"a": Choice([1, 2], when={"b": 1}), "b": Choice([1, 2], when={"a": 1})}, {}, "cycle (a -> b -> a)"),
    ({"x": Uniform(0, 1, when={"w": 16})}, {"w": 16}, "which is fixed to 16"),
    ({"lr": Uniform(0, 1), "x": Uniform(0, 1, when={"lr": 0.5})}, {}, "conditions test equality"),
])
def test_a_declaration_that_cannot_mean_anything_is_refused(params, fixed, needle):
    with pytest.raises(SpaceError) as err:
        Space(params=params, fixed=fixed, trainer="counting_ones")
    assert needle in str(err.value) and ("parameter 'x'" in str(err.value) or "parameter 'a'" in str(err.value))


def test_a_condition_with_no_values_is_refused_before_bohb_meets_it():
    # when={"y": []} once passed, then crashed BOHB's ConfigSpace with an IndexError after Ray started
    # (and left the parameter never active under the other strategies, without a word).
    with pytest.raises(SpaceError, match=r"when=\{'y': \[\]\} lists no values: the parameter would never be active"):
        Space(params={"y": Choice([1, 2]), "x": Uniform(0, 1, when={"y": []})}, trainer="counting_ones")


@pytest.mark.parametrize("when", [{"opt": "adam", "momentum": 0.9}, {"momentum": 0.9, "opt": ["adam", "rmsprop"]}])
def test_nested_conditions_that_contradict_each_other_are_refused(when):
    # momentum exists only under sgd, so a parameter that needs adam and a momentum was accepted and never active.
    params = {"opt": Choice(["sgd", "adam", "rmsprop"]), "momentum": Choice([0.0, 0.9], when={"opt": "sgd"}),
              "nesterov": Choice([False, True], when=when)}
    with pytest.raises(SpaceError, match=r"parameter 'nesterov': no configuration makes it active \(when=\{"):
        Space(params=params, trainer="counting_ones")
    ok = Space(params={**params, "nesterov": Choice([False, True], when={**when, "opt": ["sgd", "adam"]})},
               trainer="counting_ones")
    assert conditions.never_active(ok.params) == []


def test_conditions_nested_through_an_integer_parent_are_reachable_unless_they_contradict():
    params = {"a": IntUniform(1, 9), "b": IntUniform(1, 5, when={"a": 1}), "c": Uniform(0, 1, when={"b": 3}),
              "d": Uniform(0, 1, when={"a": [2, 3]})}
    assert conditions.never_active(params) == []
    assert conditions.never_active({**params, "e": Uniform(0, 1, when={"a": 2, "b": 3})}) == ["e"]


@pytest.mark.parametrize("values", [np.int64(2), range(2, 4), np.arange(2, 4), [np.int64(2)]])
def test_numpy_integers_and_ranges_name_a_parents_values(values):
    # np.int64(2) was refused as "a value 'n' cannot take: use one of integers 1..3".
    space = Space(params={"n": IntUniform(1, 3), "x": Uniform(0, 1, when={"n": values})}, trainer="counting_ones")
    assert all(type(v) is int for v in space.params["x"].when["n"]) and 2 in space.params["x"].when["n"]


def test_a_condition_no_grid_point_meets_is_said_before_a_grid_search():
    space = Space(params={"n": IntLogUniform(1, 64), "x": Uniform(0, 1, when={"n": 8}),
                          "y": Uniform(0, 1, when={"n": [4, 8]})}, trainer="counting_ones")
    assert space.params["n"].grid_values() == [1, 4, 16, 64]
    (line,) = spaces.never_on_the_grid(space)  # y holds at n = 4
    assert line.startswith("x is never active under grid search: its condition n in [8] holds at none of n's grid")


def test_a_bad_condition_in_a_space_file_exits_2_in_one_line(tmp_path, capsys):
    from tuning import run

    from cli_helpers import refused

    file = tmp_path / "bad.py"
    file.write_text("from tuning.spaces import Choice, Space, Uniform\n"
                    "SPACE = Space(params={'optimizer': Choice(['adamw', 'sgd']),\n"
                    "                      'momentum': Uniform(0.8, 0.99, when={'optimizer': 'rmsprop'})},\n"
                    "              trainer='counting_ones')\n")
    refused(capsys, run.main, ["--space", str(file), "--results-dir", str(tmp_path / "r")],
            "parameter 'momentum'", "'rmsprop'", "['adamw', 'sgd']")
    assert not (tmp_path / "r").exists()


def test_conditions_survive_the_run_record():
    space = branch_space()
    back = spacejson.from_json(json.loads(json.dumps(spacejson.to_json(space))))
    assert back == space and back.params["momentum"].when == {"optimizer": ("sgd",)}


# ---------------------------------------------------------------- grid


def test_grid_yields_exactly_the_valid_combinations():
    params = {**branch_params(grid=3), "depth": IntUniform(1, 3, when={"optimizer": ["sgd", "adamw"]}),
              "dampening": Choice([0.0, 0.5], when={"optimizer": "sgd", "nesterov": False})}
    values = {k: p.grid_values() for k, p in params.items()}
    # Brute force: every combination of the full product with inactive values blanked, deduplicated.
    expected = set()
    for combo in itertools.product(*values.values()):
        config = dict(zip(values, combo))
        kept = conditions.drop_inactive(params, config)
        expected.add(tuple(sorted(kept.items(), key=lambda kv: kv[0])))
    walked = [tuple(sorted(c.items(), key=lambda kv: kv[0])) for c in conditions.grid(params, values)]
    assert len(walked) == len(set(walked)) == len(expected) == conditions.grid_size(params, values)
    assert set(walked) == expected
    # adamw: 1 lr x 2 widths x 3 depths; sgd: x 3 momenta x (nesterov: 1 + no nesterov: 2 dampenings)
    assert len(walked) == 6 + 6 * 3 * 3


def test_int_log_uniform():
    p = IntLogUniform(8, 512, grid=4)
    assert p.grid_values() == [8, 32, 128, 512]
    assert spaces.contains(p, 100) and not spaces.contains(p, 100.5) and not spaces.contains(p, 600)
    cs = configspace(Space(params={"w": p}, trainer="counting_ones"), seed=0)
    draws = [cs.sample_configuration()["w"] for _ in range(400)]
    assert all(8 <= d <= 512 and float(d).is_integer() for d in draws)
    assert np.median(draws) < 100  # log-uniform: the median is near sqrt(8 * 512) = 64, not 260
    with pytest.raises(SpaceError, match="0 < low < high"):
        IntLogUniform(0, 8)


# ---------------------------------------------------------------- BOHB's model


def test_bohb_model_fits_mixed_active_sets_and_never_proposes_an_inactive_parameter():

    from tuning.backend import bohb
    from tuning.backend.bohb import VectorisedBOHB

    # The conditional parameter first: HpBandSter's imputation skipped column 0.
    params = {"a_momentum": Uniform(0.0, 1.0, when={"optimizer": "sgd"}), "optimizer": Choice(["adamw", "sgd"]),
              "lr": LogUniform(1e-4, 1e-1)}
    cs = configspace(Space(params=params, trainer="counting_ones"), seed=0)
    np.random.seed(0)
    model = VectorisedBOHB(cs)
    rng = np.random.default_rng(0)
    for _ in range(40):
        c = dict(cs.sample_configuration())
        loss = abs(np.log10(c["lr"]) + 2) + (c.get("a_momentum", 1.0) if c["optimizer"] == "sgd" else 0.5)
        bohb.observe(model, c, loss + 0.01 * rng.normal(), 1)
    fitted = model.kde_models[1]
    sgd = cs["optimizer"].to_vector("sgd")
    j_opt, j_mom = list(cs.keys()).index("optimizer"), list(cs.keys()).index("a_momentum")
    for kde in fitted.values():  # fitted on the points as they were: NaN exactly where inactive
        assert (np.isnan(kde.data[:, j_mom]) == (kde.data[:, j_opt] != sgd)).all()
        assert not np.isnan(kde.data[:, j_opt]).any()
        dens = kde.pdf(kde.data)
        assert np.isfinite(dens).all() and (dens > 0).all()
    assert np.isnan(fitted["bad"].data).any()  # mixed active sets: adamw's points lack momentum
    proposals = [model.get_config(1) for _ in range(60)]
    assert sum(info["model_based_pick"] for _, info in proposals) > 30
    assert all(("a_momentum" in c) == (c["optimizer"] == "sgd") for c, _ in proposals)


def test_bohb_density_over_a_conditional_space_sums_to_one_with_mixed_active_sets():
    """Each point's kernel is a density over the configurations, whichever parameters it had: summed
    over the choice's values and integrated over the parameters each value makes active, the model's
    density is 1. A parameter a point lacks takes the prior there, and one the evaluated
    configuration lacks drops out; imputing or scoring absent values would break the sum."""
    from tuning.backend.kde import MixedKDE

    # Columns: lr (continuous), optimizer (0 adamw, 1 sgd), momentum (continuous, sgd only).
    data = np.array([[0.2, 0, np.nan], [0.3, 1, 0.9], [0.5, 1, 0.6], [0.7, 0, np.nan], [0.4, 1, 0.8]])
    kde = MixedKDE(data, [0.1, 0.0, 0.1], np.array([0, 2, 0]))
    x = np.linspace(-1.0, 2.0, 601)  # the Gaussian kernels are untruncated: integrate past [0, 1]
    lr, mom = (g.ravel() for g in np.meshgrid(x, x))
    step = x[1] - x[0]
    adamw = kde.pdf(np.column_stack([x, np.zeros_like(x), np.full_like(x, np.nan)])).sum() * step
    sgd = kde.pdf(np.column_stack([lr, np.ones_like(lr), mom])).sum() * step ** 2
    assert adamw + sgd == pytest.approx(1.0, abs=1e-3)
    assert 0.3 < adamw < 0.5  # two of five points chose adamw; the kernel moves a share to sgd


def test_bohb_bandwidths_on_a_conditional_space_are_hpbandsters_where_a_column_is_active_everywhere():
    """Where every good point has a parameter, its bandwidth is the one HpBandSter fits on a space
    without conditions, a spike (min_bandwidth) where the points agree on one value, as they do on
    an integer; only a column active in fewer than two points gets the uniform bandwidth."""
    from statsmodels.nonparametric.kernel_density import KDEMultivariate

    from tuning.backend.bohb import VectorisedBOHB

    params = {"optimizer": Choice(["adamw", "sgd"]), "lr": Uniform(0.0, 1.0), "width": IntUniform(1, 5),
              "momentum": Uniform(0.0, 1.0, when={"optimizer": "sgd"})}
    cs = configspace(Space(params=params, trainer="counting_ones"), seed=0)
    model = VectorisedBOHB(cs)
    col = {k: i for i, k in enumerate(cs.keys())}
    data = np.zeros((6, len(col)))  # statsmodels fits more points than columns
    data[:, col["optimizer"]] = 1
    data[:, col["lr"]] = [0.1, 0.4, 0.7, 0.2, 0.5, 0.3]
    data[:, col["width"]] = cs["width"].to_vector(4)  # every good point chose width 4
    data[:, col["momentum"]] = [0.5, 0.9, 0.3, 0.6, 0.8, 0.7]
    cont = [col["lr"], col["width"], col["momentum"]]
    bw = model._bandwidths(data, np.zeros(len(col)))
    theirs = KDEMultivariate(data, var_type=model.kde_vartypes, bw="normal_reference").bw  # HpBandSter's fit
    assert bw[cont] == pytest.approx(np.clip(theirs[cont], model.min_bandwidth, None))
    assert bw[col["width"]] == model.min_bandwidth
    data[:5, col["momentum"]] = np.nan  # adamw's points: momentum active in one point only
    data[:5, col["optimizer"]] = 0
    bw = model._bandwidths(data, np.zeros(len(col)))
    assert bw[col["momentum"]] == pytest.approx(1.06 * np.sqrt(1 / 12))  # one point: no spread to measure


# ---------------------------------------------------------------- real runs



def test_grid_runs_each_valid_combination_once_with_empty_inactive_cells(ray_here, tmp_path, caplog):
    with caplog.at_level("INFO", logger="tuning.progress"):
        result = tuning.search(None, branch_space(), strategy="grid", results_dir=tmp_path / "r")
    # The product of the axes is not the count under conditions: it once read "... x 2 width = 10 points".
    assert ("Grid search: 2 optimizer x 1 lr x 2 momentum x 2 nesterov x 2 width (16 combinations, 10 valid under "
            "the conditions) = 10 points x 1 repeat = 10 trials") in caplog.text
    assert result.status == "finished" and result.succeeded == len(result.trials) == 2 + 8
    rows = pd.read_csv(tmp_path / "r" / "trials.csv", keep_default_na=False)
    adamw = rows[rows["optimizer"] == "adamw"]
    assert len(adamw) == 2 and (adamw["momentum"] == "").all() and (adamw["nesterov"] == "").all()
    configs = _configs(result.trials)
    assert all(valid(c) for c in configs)
    assert len({json.dumps(c, sort_keys=True) for c in configs}) == 10


def test_an_integer_under_a_condition_stays_an_integer_in_the_tables(ray_here, tmp_path):
    # Its empty cells made the column float: trials.csv said 32.0 for a width the trial ran as 32.
    params = {**branch_params(), "width": IntLogUniform(4, 32, grid=2, when={"optimizer": "sgd"})}
    result = tuning.search(None, branch_space(params=params), strategy="grid", results_dir=tmp_path / "r")
    widths = pd.read_csv(tmp_path / "r" / "trials.csv", dtype=str, keep_default_na=False)["width"]
    assert sorted(set(widths)) == ["", "32", "4"]
    assert str(result.trials["width"].dtype) == "Int64"
    assert str(pd.read_parquet(tmp_path / "r" / "trials.parquet")["width"].dtype) == "Int64"
    assert set(pd.read_csv(tmp_path / "r" / "epochs.csv", dtype=str, keep_default_na=False)["width"]) == {"", "4", "32"}
    assert (tmp_path / "r" / "report.html").exists()  # the report reads the nullable column too
    best = json.loads((tmp_path / "r" / "run.json").read_text())["best"]  # under adamw: no width
    assert best["optimizer"] == "adamw" and best["width"] is None, best  # null, not the text "<NA>"


# The default suite runs BOHB's model on conditions; random, ASHA and Hyperband share one path
# (ConditionalTrials) and tpe runs in the counting-ones comparison (tests/test_compare.py):
# make test-all runs them all here.
@pytest.mark.parametrize("strategy", [pytest.param(s, marks=pytest.mark.slow) for s in ("random", "asha", "hyperband")]
                         + ["bohb", pytest.param("tpe", marks=pytest.mark.slow)])
def test_every_strategy_samples_inactive_parameters_as_absent(ray_here, tmp_path, strategy):
    """user_trainers.branches fails a trial that gets momentum under adamw or lacks it under sgd."""
    result = tuning.search(None, branch_space(num_samples=12), strategy=strategy, seed=3,
                           results_dir=tmp_path / "r")
    assert result.status == "finished" and result.succeeded == len(result.trials) >= 9
    trials = result.trials
    assert set(trials["optimizer"]) == {"adamw", "sgd"}
    assert trials.loc[trials["optimizer"] == "adamw", "momentum"].isna().all()
    assert trials.loc[trials["optimizer"] == "sgd", "momentum"].notna().all()
    assert valid(result.best.config) and all(valid(c) for c in _configs(trials))
    # In the declared order, which BOHB's ConfigSpace (sorted by name) does not keep by itself.
    declared = [p for p in branch_params() if p in result.best.config]
    assert list(result.best.config) == declared
    assert list(json.loads((tmp_path / "r" / "best_config.json").read_text())["config"]) == declared


@pytest.mark.slow  # three searches: make test-all
def test_warm_start_and_extension_carry_absent_values(ray_here, tmp_path):
    tuning.search(None, branch_space(num_samples=6), strategy="random", seed=0, results_dir=tmp_path / "a")
    runs = growth.earlier_runs([str(tmp_path / "a")], branch_space())
    best = growth.best_configs(runs, branch_space(), 3)
    assert best and all(valid(c) for c in best)
    warm = tuning.search(None, branch_space(num_samples=4), strategy="asha", seed=1, results_dir=tmp_path / "b",
                         warm_start=[tmp_path / "a"], warm_start_top=3)
    assert warm.succeeded == len(warm.trials) == 4
    more = tuning.resume(tmp_path / "a", add_samples=3)
    assert more.succeeded == len(more.trials) == 9
    assert all(valid(c) for c in _configs(more.trials))


def _configs(trials: pd.DataFrame) -> list[dict]:
    names = list(branch_params())
    return [{k: v for k, v in row.items() if k in names and not pd.isna(v)}
            for row in trials[names].to_dict("records")]
