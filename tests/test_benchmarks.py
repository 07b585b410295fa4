"""The synthetic benchmarks: optima pinned, and noise that shrinks with fidelity as declared."""

import numpy as np
import pytest

from tuning.compare import benchmarks as B
from tuning import spaces

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


PAIRED_OPTIMUM = {"a0": 2, "b0": 1, "a1": 3, "b1": 5, "a2": 4, "b2": 6}
LC_OPTIMUM = dict(B.LC_BEST)


def test_paired_choices_optimum_is_0_and_the_only_one():
    import itertools

    losses = {combo: B.paired_choices(dict(zip(PAIRED_OPTIMUM, combo)), 27, 27, seed=0)
              for combo in itertools.product(*[range(k) for k in B.PAIR_SIZES for _ in "ab"])}
    assert len(losses) == 5 * 5 * 6 * 6 * 8 * 8
    assert min(losses.values()) == 0.0 == B.BENCHMARKS["paired_choices"].optimum
    assert [c for c, v in losses.items() if v == 0.0] == [tuple(PAIRED_OPTIMUM.values())]


def test_paired_choices_best_follower_depends_on_its_leader():
    # Interaction, not a sum: with each leader value, a different follower value is best.
    for p, k in enumerate(B.PAIR_SIZES):
        base = dict(PAIRED_OPTIMUM)
        best_follower = set()
        for a in range(k):
            losses = [B.paired_choices({**base, f"a{p}": a, f"b{p}": b}, 27, 27, seed=0) for b in range(k)]
            best_follower.add(int(np.argmin(losses)))
        assert len(best_follower) == k


def test_paired_choices_noise_shrinks_to_nothing_at_the_full_budget():
    def draws(t):
        return np.array([B.paired_choices(PAIRED_OPTIMUM, t, 27, seed=s) for s in range(400)])

    assert draws(1).std() == pytest.approx(B.PAIRED_NOISE, rel=0.15)
    assert draws(9).std() == pytest.approx(B.PAIRED_NOISE * (9 ** -0.5 - 27 ** -0.5) / (1 - 27 ** -0.5), rel=0.15)
    assert set(draws(27)) == {0.0}


def _lc_configs(n, seed=0):
    rng = np.random.default_rng(seed)
    return [{"lr": 10 ** rng.uniform(-4, -1), "batch_size": int(rng.integers(16, 513)),
             "momentum": rng.uniform(0.1, 0.99), "weight_decay": 10 ** rng.uniform(-5, -1),
             "num_layers": int(rng.integers(1, 6)), "max_units": int(rng.integers(64, 1025)),
             "max_dropout": rng.uniform(0, 1)} for _ in range(n)]


def test_misleading_first_epoch_ranks_nothing_at_t1_and_much_at_t3():
    from scipy.stats import spearmanr

    configs = _lc_configs(3000)
    final = [B.misleading_first_epoch(c, 27, 27, seed=0) for c in configs]
    rho = {t: spearmanr([B.misleading_first_epoch(c, t, 27, seed=0) for c in configs], final)[0] for t in (1, 3)}
    # Measured: -0.03 and 0.873.
    assert abs(rho[1]) < 0.1 and rho[3] > 0.8, rho


def test_misleading_first_epoch_optimum_is_exact_and_in_the_space():
    assert B.misleading_first_epoch(LC_OPTIMUM, 27, 27, seed=0) == pytest.approx(B.LC_FLOOR, abs=1e-12)
    assert B.BENCHMARKS["misleading_first_epoch"].optimum == B.LC_FLOOR
    space = spaces.load("misleading_first_epoch")
    for k, v in LC_OPTIMUM.items():  # every optimal value can be proposed
        p = space.params[k]
        assert p.low <= v <= p.high and (not isinstance(v, int) or type(p).__name__ == "IntUniform")
    for c in _lc_configs(2000, seed=1):
        assert B.misleading_first_epoch(c, 27, 27, seed=0) > B.LC_FLOOR
