"""HPOBench's MLP tables (tuning.compare.realbench): every configuration of a 10 x 10 x 3 x 10 x 10 grid
of an MLP trained to the end on an OpenML dataset. The dataset is the trainer,
"hpobench_<dataset>"; loss = 1 - validation accuracy (the mean over the table's seeds). Single
fidelity: what the categorical and integer parts of a strategy learn, without rungs."""

from tuning.compare.realbench import table_space
from tuning.spaces import Choice, Space

# The table's own values and nothing else: it holds results for those alone. Choices, because a
# configuration between two of them was never trained.
PARAMS = {name: Choice(values) for name, values in table_space("hpobench").items()}

SPACE = Space(
    params=PARAMS,
    trainer="hpobench_car",
    metric="loss",
    mode="min",
    strategy="random",
    num_samples=100,
    max_epochs=1,  # one result per configuration: the table has no learning curves
    grace_period=1,
    reduction_factor=3,
    cpus_per_trial=1,
    gpus_per_trial=0,
)
