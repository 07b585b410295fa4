"""Counting ones (Falkner, Klein & Hutter, BOHB, ICML 2018): a 16-dimensional synthetic
benchmark with a known optimum (-16), for comparing strategies over many seeds in minutes."""

from tuning.spaces import Choice, Space, Uniform

PARAMS = {
    # The paper's 8 categorical dimensions: each "1" adds one to the count.
    **{f"c{i}": Choice([0, 1]) for i in range(8)},
    # The paper's 8 continuous dimensions: each adds the mean of b Bernoulli(x) draws, so 1.0 is
    # best and low budgets are noisy. Grid: both ends, 2^16 points in all: grid search cannot
    # cover 16 dimensions, which is the paper's point.
    **{f"x{i}": Uniform(0.0, 1.0, grid=2) for i in range(8)},
}

SPACE = Space(
    params=PARAMS,
    trainer="counting_ones",
    metric="loss",
    mode="min",
    strategy="random",
    num_samples=100,
    max_epochs=81,  # t = 1..81 iterations, b = 9 t samples: the paper's budgets 9..729
    grace_period=1,
    reduction_factor=3,  # the paper's eta: rungs at 1, 3, 9, 27, 81
    cpus_per_trial=1,
    gpus_per_trial=0,
)
