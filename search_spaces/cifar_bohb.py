"""CIFAR-10 with BOHB: TuneBOHB's model-based proposals, HyperBandForBOHB's successive halving."""

from search_spaces._cifar import DIVERGED, FIXED, PARAMS
from tuning.spaces import Space

SPACE = Space(
    params=PARAMS,
    fixed=FIXED,
    diverged_value=DIVERGED,
    metric="loss",
    mode="min",
    strategy="bohb",  # TuneBOHB + HyperBandForBOHB
    num_samples=27,  # one full Hyperband iteration at eta 3 over 27 epochs: 27 configs at the base rung
    max_epochs=27,  # rungs at 1, 3, 9 and 27 epochs with reduction factor 3
    reduction_factor=3,  # BOHB paper's eta: keep the best third at each rung
    cpus_per_trial=1,
    gpus_per_trial="auto",
)
