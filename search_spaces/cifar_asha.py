"""CIFAR-10, random search with ASHA stopping: the default space of `make run`."""

from search_spaces._cifar import DIVERGED, FIXED, PARAMS
from tuning.spaces import Space

SPACE = Space(
    params=PARAMS,
    fixed=FIXED,
    diverged_value=DIVERGED,
    metric="loss",  # validation cross-entropy: smoother than accuracy, so rungs compare fairly
    mode="min",
    strategy="asha",  # Tune's random variant generator + ASHAScheduler
    num_samples=24,  # ASHA is cheap per sample: most trials stop after 1-2 epochs
    max_epochs=16,  # rungs at 1, 2, 4, 8 and 16 epochs with reduction factor 2
    grace_period=1,  # judge a trial after its first epoch, the earliest ASHA can
    reduction_factor=2,  # keep the better half at each rung (cifar_bohb keeps a third)
    cpus_per_trial=1,  # on a CPU box, one trial per core beats two threads per trial
    gpus_per_trial="auto",  # one GPU per trial where the cluster has GPUs, else CPU
)
