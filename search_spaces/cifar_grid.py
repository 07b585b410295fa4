"""CIFAR-10, grid search over the declared grid points: 4 learning rates x 4 batch sizes."""

from search_spaces._cifar import DIVERGED, FIXED, PARAMS
from tuning.spaces import Space

SPACE = Space(
    params=PARAMS,
    fixed=FIXED,
    diverged_value=DIVERGED,
    metric="loss",
    mode="min",
    strategy="grid",  # every point of the parameters' grids, walked lazily, FIFO scheduler
    grid_repeats=1,  # the grid once: 16 trials; --num-samples N runs it N times (seed noise)
    max_epochs=16,
    cpus_per_trial=1,
    gpus_per_trial="auto",
)
