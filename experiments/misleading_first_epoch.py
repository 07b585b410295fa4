"""Misleading first epoch, LCBench's seven continuous and integer parameters, whose first epoch's
ranking is unrelated to the final one and third epoch's close to it: all six strategies, 10
seeds, 100 full evaluations (27 iterations each) per strategy run."""

from tuning.compare import Experiment

EXPERIMENT = Experiment(
    space="misleading_first_epoch",
    budget=100,
    seeds=tuple(range(10)),
    strategies=("grid", "random", "asha", "hyperband", "bohb", "tpe"),
    # Smoke budget 6: as experiments/mf_hartmann (max_t 27).
    smoke={"budget": 6, "seeds": 2},
    description="Misleading first epoch: loss(t) = final + start * 0.13^(t - 1) over LCBench's space; "
                "Spearman with the final ranking about 0 at t = 1 and 0.87 at t = 3; exact at t = 27; "
                "optimum 0.1.",
)
