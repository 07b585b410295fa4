"""Counting ones, 16 dimensions (BOHB paper, section 5.1): all seven strategies, 10 seeds, 100 full
evaluations (81 iterations each) per strategy run."""

from tuning.compare import Experiment

EXPERIMENT = Experiment(
    space="counting_ones",
    budget=100,  # full evaluations (b = 729 samples) per run: what random search gets 100 tries at
    seeds=tuple(range(10)),
    strategies=("grid", "random", "asha", "hyperband", "bohb", "adaptive", "tpe"),
    # Smoke budget 6: Hyperband's first bracket costs 3.7 full evaluations on its own, and about one
    # more while the second worker fills rung waits from the next bracket; at 4 a seed could end
    # without a full-fidelity result. --smoke runs on 2 CPUs on any machine (tuning.cli.SMOKE_CPUS),
    # so no more workers than that fill.
    smoke={"budget": 6, "seeds": 2},
    description="Counting ones (Falkner, Klein & Hutter, ICML 2018): 8 binary and 8 continuous "
                "parameters, budget b = 9 t samples for t = 1..81; regret = loss / 16 + 1.",
)
