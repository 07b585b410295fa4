import math

import numpy as np
import pytest

from tuning import spaces
from tuning.spaces import Choice, IntUniform, LogUniform, Space, SpaceError, Uniform


@pytest.mark.parametrize("name", spaces.available())
def test_every_space_loads_and_samples_valid_configs(name):
    space = spaces.load(name)
    assert space.name == name
    assert space.metric and space.mode in ("min", "max")
    assert space.num_samples >= 1 and space.max_epochs >= 1
    domains = spaces.to_tune(space)
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
    assert min(space.params["batch_size"].values) >= 32  # not the seed's crawling 2-16


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


def test_log_uniform_samples_are_log_uniform():
    dom = spaces.to_tune(Space(params={"lr": LogUniform(1e-4, 1e-2)}))["lr"]
    logs = np.log10([dom.sample() for _ in range(4000)])
    # Uniform in log space: each decade gets half the samples.
    assert abs(np.mean(logs < -3) - 0.5) < 0.05
    assert math.isclose(np.mean(logs), -3, abs_tol=0.05)
