"""LCBench (tuning.compare.realbench): real learning curves of MLPs on OpenML tasks, through YAHPO Gym's
surrogate. The task is the trainer: "lcbench_<OpenML task id>", one of the 29 development tasks
(an experiment's `tasks=` runs several); loss = 100 - validation accuracy (%)."""

from tuning.spaces import IntLogUniform, IntUniform, LogUniform, Space, Uniform

PARAMS = {
    # LCBench's own ranges and scales (its config_space.json): the surrogate was fitted there and
    # knows nothing outside them.
    # Log-uniform: a learning rate's effect scales with its order of magnitude.
    "learning_rate": LogUniform(1e-4, 1e-1, grid=3),
    # Log-scaled: doubling the batch matters, adding 16 to 400 does not.
    "batch_size": IntLogUniform(16, 512, grid=3),
    # From barely any momentum to the 0.99 some schedules use.
    "momentum": Uniform(0.1, 0.99, grid=2),
    # Uniform, as LCBench sampled it (not log): most of the range is strong regularisation.
    "weight_decay": Uniform(1e-5, 1e-1, grid=2),
    # An MLP of one to five layers.
    "num_layers": IntUniform(1, 5, grid=3),
    # The widest layer's units, log-scaled like the batch size.
    "max_units": IntLogUniform(64, 1024, grid=3),
    # The widest layer's dropout, from none to all.
    "max_dropout": Uniform(0.0, 1.0, grid=2),
}

SPACE = Space(
    params=PARAMS,
    trainer="lcbench_3945",
    metric="loss",
    mode="min",
    strategy="random",
    num_samples=100,
    # Epoch 27 is the full budget (the surrogate knows 1..52; optima are estimated at 27): rungs 1,
    # 3, 9, 27 with eta 3. On these tasks epoch 1 ranks configurations almost at random, epoch 3 well.
    max_epochs=27,
    grace_period=1,
    reduction_factor=3,
    cpus_per_trial=1,
    gpus_per_trial=0,
)
