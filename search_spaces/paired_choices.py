"""Paired choices (tuning.compare.benchmarks.paired_choices): six categorical parameters of five to eight
values whose best values interact, with a known optimum (0), for comparing what strategies learn
from categorical results."""

from tuning.compare.benchmarks import PAIR_SIZES
from tuning.spaces import Choice, Space

PARAMS = {}
for p, k in enumerate(PAIR_SIZES):
    # A leader: one value is best on its own. 5, 6 and 8 values: more than counting ones' two,
    # where a categorical kernel's bandwidth stops meaning anything (issue 23).
    PARAMS[f"a{p}"] = Choice(list(range(k)))
    # Its follower: no value is best on its own, only the one that matches the leader's value.
    # The integers are labels, not an order: the benchmark never compares them.
    PARAMS[f"b{p}"] = Choice(list(range(k)))

SPACE = Space(
    params=PARAMS,
    trainer="paired_choices",
    metric="loss",
    mode="min",
    strategy="random",
    num_samples=100,
    max_epochs=27,  # noise of a mean over t epochs; rungs at 1, 3, 9, 27 with eta 3
    grace_period=1,
    reduction_factor=3,
    cpus_per_trial=1,
    gpus_per_trial=0,
)
