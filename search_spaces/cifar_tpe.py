"""CIFAR-10 with Optuna's TPE sampler on the same synchronous Hyperband brackets as cifar_bohb."""

from search_spaces._cifar import DIVERGED, FIXED, PARAMS
from tuning.spaces import Space

SPACE = Space(
    params=PARAMS,
    fixed=FIXED,
    diverged_value=DIVERGED,
    metric="loss",
    mode="min",
    strategy="tpe",  # Optuna's TPE (Ray's OptunaSearch) + Hyperband brackets that close (tuning/backend/tpe.py)
    # One Hyperband iteration (band) at eta 3 over 27 epochs: brackets of 27, 12, 6 and 4 trials
    # starting at 1, 3, 9 and 27 epochs.
    num_samples=49,
    max_epochs=27,  # rungs at 1, 3, 9 and 27 epochs with reduction factor 3
    reduction_factor=3,  # BOHB paper's eta: keep the best third at each rung
    cpus_per_trial=1,
    gpus_per_trial="auto",
)
