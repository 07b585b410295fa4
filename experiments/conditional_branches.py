"""Conditional branches: a choice between three functions of 6, 2 and 1 parameters, the best one
worst on average: all six strategies, 10 seeds, 100 full evaluations (27 iterations each) per
strategy run."""

from tuning.compare import Experiment

EXPERIMENT = Experiment(
    space="conditional_branches",
    budget=100,  # full evaluations per run; random search's best of 100 is about 0.094 (b's optimum: 0.1)
    seeds=tuple(range(10)),
    # Grid walks the declaration in order, branch a first: its 840 valid points do not reach b or c
    # within the budget.
    strategies=("grid", "random", "asha", "hyperband", "bohb", "tpe"),
    # Smoke budget 6: as experiments/mf_hartmann (max_t 27).
    smoke={"budget": 6, "seeds": 2},
    description="Conditional branches: branch a (6 parameters, one nested under a categorical; optimum 0, "
                "mean 0.48), b (2; optimum 0.1, mean 0.31) or c (1; a plateau at 0.2 to 0.31, mean 0.23), "
                "each branch's parameters absent unless chosen; noise shrinking with t = 1..27, exact at 27; "
                "optimum 0.",
)
