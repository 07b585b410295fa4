"""CIFAR-10, accuracy against inference latency: the net's capacity (width, depth) searched with
its learning rate, and the run keeps the Pareto front of the two (docs/multi-objective.md).

The CIFAR trainer measures latency_ms itself, per image in a batch of 32 on the device the trial
trains on (tuning.trial.trainer.latency_ms, docs/trainer.md), and reports num_params beside it: a bound
such as --constraint 'num_params<=300000' needs no change here."""

from search_spaces._cifar import FIXED, PARAMS
from tuning.spaces import IntLogUniform, IntUniform, Space

SPACE = Space(
    params={
        # Compute, and so latency, grows with width squared: 8 costs a quarter of the default 16,
        # 32 four times it, so the front has a 16-fold spread to lie along. Past 32 an epoch of
        # 45,000 images on one CPU core takes minutes. Doublings matter, not steps: log-uniform.
        "width": IntLogUniform(8, 32, grid=3),
        # 3x3 convolutions after each block's pooling: 1 is airbench's layout (the other spaces'),
        # each more adds a conv at a quarter of the pixels, a cheaper step in latency than width's.
        "depth": IntUniform(1, 3),
        # A wider or deeper net trains best at a somewhat different rate: searched, over the range
        # every cifar_* space uses (_cifar.py), so no architecture loses for want of its rate.
        "lr": PARAMS["lr"],
    },
    # The batch size changes how fast a net trains, not what it costs to serve: fixed at a size that
    # keeps a CPU busy (_cifar.py's reason for 64-512), so the front is one of architectures.
    fixed={**{k: v for k, v in FIXED.items() if k != "width"}, "batch_size": 256},
    # A diverged net predicts nothing useful: accuracy 0, below chance (0.1), worst on the front.
    diverged_value=0.0,
    # Accuracy, not the loss: it is what one gives up for speed when serving. The first objective is
    # the progress table's column and breaks ties on the front.
    objectives={"accuracy": "max", "latency_ms": "min"},
    strategy="tpe",  # MOTPE under MO-ASHA's brackets: a trial behind the rung's front stops there
    num_samples=32,  # MOTPE's first 10 are random (Optuna's n_startup_trials); 22 then follow its model
    max_epochs=8,  # long enough for width to show in accuracy; the trials the rungs keep train all of them
    cpus_per_trial=1,  # one trial per core: its latency is measured on the one core it trains on
    gpus_per_trial="auto",
)
