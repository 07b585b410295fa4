"""CIFAR-10, plain random search: every trial trains for the full budget (FIFO scheduler)."""

from search_spaces._cifar import DIVERGED, FIXED, PARAMS
from tuning.spaces import Space

SPACE = Space(
    params=PARAMS,
    fixed=FIXED,
    diverged_value=DIVERGED,
    metric="loss",
    mode="min",
    strategy="random",  # Tune's random variant generator, no early stopping
    num_samples=16,  # as many trials as the 4x4 grid, so the two compare at equal cost
    max_epochs=16,
    cpus_per_trial=1,
    gpus_per_trial="auto",
)
