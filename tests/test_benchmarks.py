"""The synthetic benchmarks: optima pinned, and noise that shrinks with fidelity as declared."""

import numpy as np
import pytest

from tuning import benchmarks as B

ONES = {**{f"c{i}": 1 for i in range(8)}, **{f"x{i}": 1.0 for i in range(8)}}
HALF = {**{f"c{i}": 1 for i in range(4)}, **{f"c{i}": 0 for i in range(4, 8)}, **{f"x{i}": 0.5 for i in range(8)}}
ARGMIN = {f"x{i}": v for i, v in enumerate(B.HARTMANN6_ARGMIN)}


@pytest.mark.parametrize("t", [1, 3, 27, 81])
def test_counting_ones_optimum_is_minus_16_at_every_fidelity(t):
    assert B.counting_ones(ONES, t, 81, seed=0) == -16.0
    assert B.BENCHMARKS["counting_ones"].optimum == -16.0


def test_counting_ones_noise_shrinks_as_one_over_root_b():
    def draws(t):
        return np.array([B.counting_ones(HALF, t, 81, seed=s) for s in range(400)])

    low, high = draws(1), draws(81)
    # Unbiased: 4 categorical ones plus 8 Bernoulli(0.5) means of 4 each.
    assert low.mean() == pytest.approx(-8.0, abs=0.1) and high.mean() == pytest.approx(-8.0, abs=0.02)
    # Standard deviation sqrt(8 * 0.25 / b): 0.471 at b = 9, 0.052 at b = 729.
    assert low.std() == pytest.approx(np.sqrt(2 / 9), rel=0.15)
    assert high.std() == pytest.approx(np.sqrt(2 / 729), rel=0.15)


def test_counting_ones_same_evaluation_same_number():
    assert B.counting_ones(HALF, 5, 81, seed=3) == B.counting_ones(HALF, 5, 81, seed=3)
    assert B.counting_ones(HALF, 5, 81, seed=3) != B.counting_ones(HALF, 5, 81, seed=4)


def test_hartmann_optimum_is_exact_at_full_fidelity():
    values = {B.mf_hartmann6(ARGMIN, 27, 27, seed=s) for s in range(5)}
    assert len(values) == 1  # no noise at full fidelity
    assert values.pop() == pytest.approx(B.HARTMANN6_OPTIMUM, abs=1e-4)
    rng = np.random.default_rng(0)
    for _ in range(2000):  # nothing in the cube beats it
        x = {f"x{i}": v for i, v in enumerate(rng.random(6))}
        assert B.mf_hartmann6(x, 27, 27, seed=0) > B.HARTMANN6_OPTIMUM


def test_hartmann_low_fidelity_is_biased_and_noisy():
    low = np.array([B.mf_hartmann6(ARGMIN, 1, 27, seed=s) for s in range(400)])
    s = 1 / 27
    assert low.std() == pytest.approx(0.1 * (1 - s), rel=0.15)  # the declared noise
    # Biased upwards: alpha_1 is reduced by 0.1 (1 - s), times the first term (0.46 at the optimum).
    assert low.mean() - B.HARTMANN6_OPTIMUM == pytest.approx(0.1 * (1 - s) * 0.464, abs=0.015)
