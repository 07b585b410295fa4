"""Conditional branches (tuning.compare.benchmarks.conditional_branches): a choice between three functions
of 6, 2 and 1 parameters, each branch's parameters absent unless it is chosen, one of them nested a
level deeper; known optimum 0, in the branch whose random configurations are worst on average."""

from tuning.spaces import Choice, IntLogUniform, LogUniform, Space, Uniform

A, B, C = {"branch": "a"}, {"branch": "b"}, {"branch": "c"}

PARAMS = {
    # Which function: a model family. Labels; the benchmark never orders them.
    "branch": Choice(["a", "b", "c"]),
    # Branch a, six parameters. Positions in [0, 1]; a_x0 beyond 0.75 diverges, as too large a
    # learning rate does. Grid 3 each: 0, 0.5 and 1 (none at the optimum, as in a real grid).
    "a_x0": Uniform(0.0, 1.0, when=A),
    "a_x1": Uniform(0.0, 1.0, when=A),
    "a_x2": Uniform(0.0, 1.0, grid=2, when=A),
    # Two categorical parameters of 5 and 6 values, each with one best value (code 1).
    "a_c0": Choice([0, 1, 2, 3, 4], when=A),
    "a_c1": Choice([0, 1, 2, 3, 4, 5], when=A),
    # A strength that exists only under three of a_c1's six values (a regulariser with a strength
    # beside three without one): a condition under a conditional parent. Grid 2: 0 and 1.
    "a_x3": Uniform(0.0, 1.0, grid=2, when={"branch": "a", "a_c1": [0, 1, 2]}),
    # Branch b, two parameters: a position in [0, 1], and an integer on a log scale (a width or a
    # number of leaves) whose best, 16, is at the middle of 1..256. Grid: 5 of each.
    "b_x0": Uniform(0.0, 1.0, grid=5, when=B),
    "b_n": IntLogUniform(1, 256, grid=5, when=B),
    # Branch c, one parameter on a log scale (a regularisation strength), over four decades; a
    # plateau, best at 0.01. Grid 5: one point a decade.
    "c_x0": LogUniform(1e-3, 10.0, grid=5, when=C),
}

SPACE = Space(
    params=PARAMS,
    trainer="conditional_branches",
    metric="loss",
    mode="min",
    strategy="random",
    num_samples=100,
    max_epochs=27,  # noise of a mean over t epochs; rungs at 1, 3, 9, 27 with eta 3
    grace_period=1,
    reduction_factor=3,
    cpus_per_trial=1,
    gpus_per_trial=0,
)
