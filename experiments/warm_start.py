"""BOHB warm-started from an earlier 50-evaluation BOHB study against a cold BOHB, on counting ones:
what an earlier run's results are worth (tuning.run --warm-start). 10 seeds, 100 full evaluations."""

from tuning.compare import Experiment

EXPERIMENT = Experiment(
    space="counting_ones",
    budget=100,  # as experiments/counting_ones: its bohb runs are the cold ones here
    seeds=tuple(range(10)),
    strategies=("bohb", "bohb+warm"),
    # The earlier study: BOHB given half the budget, on another seed (seed + 1000) so it is not the
    # cold run's own beginning.
    warm_from={"strategy": "bohb", "budget": 50, "seed_offset": 1000},
    reference="bohb",  # targets and tests against the cold runs
    smoke={"budget": 6, "seeds": 2, "warm_budget": 2},  # 6: as experiments/counting_ones
    description="Counting ones (16 dimensions): BOHB warm-started from a 50-evaluation BOHB run of another "
                "seed, against cold BOHB; regret = loss / 16 + 1.",
)
