"""Multi-fidelity Hartmann-6: biased and noisy at low fidelity, exact at full fidelity, known
optimum -3.32237. A smooth 6-dimensional benchmark next to counting ones' discrete one."""

from tuning.spaces import Space, Uniform

PARAMS = {
    # Hartmann-6 lives on the unit cube. Grid: both ends per dimension, 64 points: fewer than a
    # comparison's budget, so grid search runs out of points (and the report says so).
    f"x{i}": Uniform(0.0, 1.0, grid=2) for i in range(6)
}

SPACE = Space(
    params=PARAMS,
    trainer="mf_hartmann",
    metric="loss",
    mode="min",
    strategy="random",
    num_samples=100,
    max_epochs=27,  # fidelity s = t / 27; rungs at 1, 3, 9, 27 with eta 3
    grace_period=1,
    reduction_factor=3,
    cpus_per_trial=1,
    gpus_per_trial=0,
)
