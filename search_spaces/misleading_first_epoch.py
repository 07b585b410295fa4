"""Misleading first epoch (tuning.compare.benchmarks.misleading_first_epoch): LCBench's seven parameters,
whose first epoch ranks configurations by how fast they start and the third by where they end;
known optimum 0.1."""

from tuning.spaces import IntUniform, LogUniform, Space, Uniform

PARAMS = {
    # LCBench's range (Zimmer et al. 2021); log-uniform because a learning rate's effect scales
    # with its order of magnitude. Grid: 3 points, one per decade and a half.
    "lr": LogUniform(1e-4, 1e-1, grid=3),
    # LCBench's range; it samples log-uniformly, which the declarations cannot yet do for an integer,
    # so uniform here (the benchmark measures positions on the same scale). Grid: 16, 264, 512.
    "batch_size": IntUniform(16, 512, grid=3),
    # LCBench's range: from barely any momentum to the 0.99 some schedules use.
    "momentum": Uniform(0.1, 0.99, grid=2),
    # LCBench's range: four decades, from negligible to strong regularisation.
    "weight_decay": LogUniform(1e-5, 1e-1, grid=2),
    # LCBench's range: an MLP of one to five layers, every value on the grid.
    "num_layers": IntUniform(1, 5),
    # LCBench's range of the widest layer's units; uniform as batch_size, for the same reason.
    "max_units": IntUniform(64, 1024, grid=3),
    # LCBench's range: the dropout of the widest layer, from none to all.
    "max_dropout": Uniform(0.0, 1.0, grid=2),
}

SPACE = Space(
    params=PARAMS,
    trainer="misleading_first_epoch",
    metric="loss",
    mode="min",
    strategy="random",
    num_samples=100,
    max_epochs=27,  # rungs at 1 (misleading), 3 (informative), 9, 27 with eta 3
    grace_period=1,
    reduction_factor=3,
    cpus_per_trial=1,
    gpus_per_trial=0,
)
