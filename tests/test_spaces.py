import math
import re

import numpy as np
import pytest

from tuning import spaces
from tuning.backend import strategies
from tuning.backend.bohb import configspace
from tuning.spaces import Choice, IntUniform, LogUniform, Space, SpaceError, Uniform


@pytest.mark.parametrize("name", spaces.available())
def test_every_space_loads_and_samples_valid_configs(name):
    space = spaces.load(name)
    assert space.name == name
    assert space.metric and space.mode in ("min", "max")
    assert space.num_samples >= 1 and space.max_epochs >= 1
    domains = strategies.to_tune(space)
    assert set(domains) == set(space.params)
    for key, param in space.params.items():
        for _ in range(50):
            v = domains[key].sample()
            if isinstance(param, Choice):
                assert v in param.values
            else:
                assert param.low <= v <= param.high


def test_cifar_asha_follows_the_seed():
    space = spaces.load("cifar_asha")
    assert space.strategy == "asha"
    assert (space.metric, space.mode, space.grace_period, space.reduction_factor) == ("loss", "min", 1, 2)
    assert space.params["lr"] == LogUniform(1e-4, 1e-2, grid=4)
    assert isinstance(space.params["batch_size"], Choice)
    assert min(space.params["batch_size"].values) >= 32  # not a crawling 2-16


def test_unknown_space_lists_the_available_ones():
    with pytest.raises(SpaceError) as err:
        spaces.load("no_such_space")
    assert "cifar_asha" in str(err.value)


def test_shared_modules_are_not_spaces():
    assert not any(n.startswith("_") for n in spaces.available())


@pytest.mark.parametrize("bad", [
    lambda: LogUniform(0, 1), lambda: LogUniform(1e-2, 1e-4), lambda: Uniform(1, 1),
    lambda: IntUniform(3, 2), lambda: Choice([]), lambda: Choice([1, 1]),
    lambda: Space(params={"a": Uniform(0, 1)}, strategy="hill-climb"),
    lambda: Space(params={"a": (0, 1)}),
    lambda: Space(params={"a": Uniform(0, 1)}, fixed={"a": 3}),
])
def test_malformed_declarations_are_refused(bad):
    with pytest.raises(SpaceError):
        bad()


@pytest.mark.parametrize("bad, says", [
    (lambda: Uniform(0, float("inf")), "high must be a finite number, got inf"),
    (lambda: LogUniform(1e-3, float("nan")), "high must be a finite number"),
    (lambda: Uniform("0", 1), "low must be a finite number, got '0'"),
    (lambda: IntUniform(1.5, 3.5), "low must be a finite whole number, got 1.5"),
    (lambda: Uniform(0, 1, grid=2.5), "grid must be a whole number"),
    (lambda: Choice("abc"), "Choice takes a list of values, got str"),
    (lambda: Choice({"a", "b"}), "Choice takes a list of values, got set"),
    (lambda: Space(params={"a": Uniform(0, 1)}, num_samples=0), "num_samples=0: give a whole number of at least 1"),
    (lambda: Space(params={"a": Uniform(0, 1)}, max_epochs=0), "max_epochs=0"),
    (lambda: Space(params={"a": Uniform(0, 1)}, num_samples=2.5), "num_samples=2.5"),
    (lambda: Space(params={"a": Uniform(0, 1)}, reduction_factor=1), "at least 2"),
])
def test_values_no_run_could_use_are_refused_where_declared(bad, says):
    """What Ray would refuse mid-run (an infinite bound), round silently (an integer range of
    fractions) or take apart (a Choice of a string) is named where the space is declared."""
    with pytest.raises(SpaceError, match=re.escape(says)):
        bad()


def test_whole_numbers_and_iterables_are_kept_as_the_runs_need_them():
    assert IntUniform(1, 10.0).high == 10 and isinstance(IntUniform(1, 10.0).high, int)
    assert Choice(range(1, 4)).values == (1, 2, 3) and Choice(np.array([2, 4])).values == (2, 4)
    assert type(Space(params={"a": Uniform(0, 1)}, num_samples=np.int64(3)).num_samples) is int


def test_log_uniform_samples_are_log_uniform():
    dom = strategies.to_tune(Space(params={"lr": LogUniform(1e-4, 1e-2)}))["lr"]
    logs = np.log10([dom.sample() for _ in range(4000)])
    # Uniform in log space: each decade gets half the samples.
    assert abs(np.mean(logs < -3) - 0.5) < 0.05
    assert math.isclose(np.mean(logs), -3, abs_tol=0.05)


# ---------------------------------------------------------------- the compiler: every kind, every target

KINDS = {
    "loguniform": LogUniform(1e-4, 1e-2, grid=3),
    "uniform": Uniform(0.1, 0.5, grid=5),
    "int": IntUniform(2, 6),
    "choice": Choice([64, 128, 256]),
    "choice_str": Choice(["sgd", "adamw"]),
}


@pytest.mark.parametrize("kind", KINDS)
def test_tune_target_keeps_bounds_scale_and_choices(kind):
    from ray.tune.search import sample

    p = KINDS[kind]
    dom = strategies.to_tune(Space(params={"x": p}))["x"]
    draws = [dom.sample() for _ in range(400)]
    if isinstance(p, Choice):
        assert isinstance(dom, sample.Categorical) and list(dom.categories) == list(p.values)
        assert set(draws) == set(p.values)
    elif isinstance(p, IntUniform):
        assert isinstance(dom, sample.Integer)
        assert set(draws) == set(range(p.low, p.high + 1))  # both ends included
    else:
        assert isinstance(dom, sample.Float) and (dom.lower, dom.upper) == (p.low, p.high)
        assert isinstance(dom.get_sampler(), sample.LogUniform) == isinstance(p, LogUniform)
        assert all(p.low <= d <= p.high for d in draws)


@pytest.mark.parametrize("kind", KINDS)
def test_grid_target_is_the_declared_grid(kind):
    p = KINDS[kind]
    grid = spaces.grid_points(Space(params={"x": p}))["x"]
    if isinstance(p, Choice):
        assert grid == list(p.values)
    elif isinstance(p, IntUniform):
        assert grid == [2, 3, 4, 5, 6]
    else:
        assert len(grid) == p.grid and grid[0] == pytest.approx(p.low) and grid[-1] == pytest.approx(p.high)
        steps = np.diff(np.log(grid)) if isinstance(p, LogUniform) else np.diff(grid)
        assert np.allclose(steps, steps[0])  # evenly spaced on the declared scale


@pytest.mark.parametrize("kind", KINDS)
def test_configspace_target_keeps_bounds_scale_and_choices(kind):
    import ConfigSpace as CS

    p = KINDS[kind]
    hp = configspace(Space(params={"x": p}), seed=0)["x"]
    if isinstance(p, Choice):
        assert isinstance(hp, CS.CategoricalHyperparameter) and list(hp.choices) == list(p.values)
    elif isinstance(p, IntUniform):
        assert isinstance(hp, CS.UniformIntegerHyperparameter) and (hp.lower, hp.upper) == (2, 6)
    else:
        assert isinstance(hp, CS.UniformFloatHyperparameter)
        assert (hp.lower, hp.upper) == (p.low, p.high) and hp.log == isinstance(p, LogUniform)


def test_grid_size_and_int_grid_subsampling():
    space = Space(params={"a": LogUniform(1e-3, 1e-1, grid=3), "b": Choice([1, 2]),
                          "c": IntUniform(0, 100, grid=5)})
    assert spaces.grid_size(space) == 3 * 2 * 5
    assert space.params["c"].grid_values() == [0, 25, 50, 75, 100]


def test_every_cifar_space_shares_one_declaration():
    cifar = [spaces.load(n) for n in ("cifar_asha", "cifar_random", "cifar_grid", "cifar_hyperband", "cifar_bohb", "cifar_tpe")]
    # adaptive and median have no space of their own: any space runs under them with --strategy
    assert {s.strategy for s in cifar} == set(spaces.STRATEGIES) - {"adaptive", "median"}
    assert all(s.params is cifar[0].params and s.fixed == cifar[0].fixed for s in cifar)
    assert spaces.load("cifar_bohb").reduction_factor == 3
    # Hyperband and BOHB differ in their proposals alone
    assert spaces.load("cifar_hyperband") == spaces.load("cifar_bohb").replace(strategy="hyperband",
                                                                                 name="cifar_hyperband")


def test_ray_tune_distributions_are_refused_with_the_quantisation_reason():
    from ray import tune

    with pytest.raises(SpaceError, match="46995"):
        Space(params={"batch_size": tune.qloguniform(16, 512, 16)})
    with pytest.raises(SpaceError) as err:  # the quantisation reason only where it is quantised
        Space(params={"batch_size": tune.choice([16, 32])})
    assert "Ray Tune distribution" in str(err.value) and "46995" not in str(err.value)
    # Ray's grid_search is a dict: it was "a dict: declare it with ...", and Choice alone is sampled, not walked.
    with pytest.raises(SpaceError, match=re.escape("is Ray Tune's grid_search: declare Choice([...]) and run "
                                                   "strategy='grid'")):
        Space(params={"batch_size": tune.grid_search([16, 32])})


@pytest.mark.parametrize("keyword,says", [("direction", "Space() takes no direction=: give mode='min' or mode='max'"),
                                          ("num_sample", "Space() takes no num_sample=: give num_samples="),
                                          ("colour", "Space() takes no colour=; its keywords are params, strategy")])
def test_an_unknown_space_keyword_is_refused_with_what_to_give(keyword, says, tmp_path):
    """It was Python's TypeError ("__init__() got an unexpected keyword argument"), no TuningError,
    and a space file "does not load: TypeError: ...": neither said what to give."""
    with pytest.raises(SpaceError, match=re.escape(says)):
        Space(params={"x": Uniform(0.0, 1.0)}, trainer="counting_ones", **{keyword: 1})
    (tmp_path / "mine.py").write_text("from tuning import Space, Uniform\n"
                                      f"SPACE = Space(params={{'x': Uniform(0.0, 1.0)}}, {keyword}=1)\n")
    with pytest.raises(SpaceError, match=re.escape(f"{tmp_path / 'mine.py'}: {says}")):
        spaces.load(str(tmp_path / "mine.py"))
    assert Space(params={"x": Uniform(0.0, 1.0)}, trainer="counting_ones").replace(seed=3).seed == 3
    import inspect  # help(Space) and an editor's hints still show its keywords, not the check's (*args, **kwargs)
    assert list(inspect.signature(Space).parameters)[:3] == ["params", "strategy", "metric"]


def test_plain_turns_numpy_scalars_into_python_values():
    vals = [spaces.plain(v) for v in (np.int64(64), np.float64(0.5), np.str_("adamw"), 3, "x")]
    assert vals == [64, 0.5, "adamw", 3, "x"]
    assert [type(v) for v in vals] == [int, float, str, int, str]
