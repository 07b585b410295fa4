"""Multi-fidelity Hartmann-6: all six strategies, 10 seeds, 100 full evaluations (27 iterations
each) per strategy run."""

from tuning.compare import Experiment

EXPERIMENT = Experiment(
    space="mf_hartmann",
    budget=100,
    seeds=tuple(range(10)),
    strategies=("grid", "random", "asha", "hyperband", "bohb", "tpe"),
    # Smoke budget 6: the first bracket (max_t 27) costs 3 full evaluations alone and about 4 while the
    # second worker fills rung waits from the next bracket.
    smoke={"budget": 6, "seeds": 2},
    description="Hartmann-6 with fidelity s = t / 27: the first term biased by 0.1 (1 - s) and "
                "Gaussian noise of 0.1 (1 - s); exact at full fidelity, optimum -3.32237.",
)
