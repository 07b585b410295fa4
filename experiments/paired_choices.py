"""Paired choices, six categorical parameters of 5 to 8 values whose best values interact: all
six strategies, 10 seeds, 100 full evaluations (27 iterations each) per strategy run."""

from tuning.compare import Experiment

EXPERIMENT = Experiment(
    space="paired_choices",
    budget=100,  # full evaluations per run: 100 of 57,600 configurations at the full budget
    seeds=tuple(range(10)),
    strategies=("grid", "random", "asha", "hyperband", "bohb", "tpe"),
    # Smoke budget 6: as experiments/mf_hartmann (max_t 27): the first bracket costs 3 full
    # evaluations alone and about 4 while the second worker fills rung waits from the next bracket.
    smoke={"budget": 6, "seeds": 2},
    description="Paired choices: three (leader, follower) pairs of 5, 6 and 8 values; a leader has a main "
                "effect, a follower only matters through its leader; noise shrinking with t = 1..27, exact "
                "at 27; optimum 0.",
)
