"""ZDT1 and ZDT2 with a fidelity bias (tuning.compare.mobench): two objectives with a known front, so each
run's hypervolume regret is exact. 30 full evaluations of 9 epochs per run, 10 seeds, every
strategy that searches several objectives (asha is MO-ASHA; Hyperband, BOHB and adaptive promote
by non-dominated sorting) and Optuna's NSGA-II and MOTPE as peers."""

from tuning.compare import Experiment
from tuning.compare.mobench import ZDT_REFERENCE

EXPERIMENT = Experiment(
    space="zdt",
    budget=30,
    seeds=tuple(range(10)),
    strategies=("random", "asha", "hyperband", "bohb", "adaptive", "tpe"),
    tasks=("zdt1", "zdt2"),
    reference_point=ZDT_REFERENCE,  # (1.1, 11): beyond every point, so every result counts
    # Smoke: one task, one seed, 3 full evaluations of 3 epochs.
    smoke={"budget": 3, "seeds": 1, "tasks": 1, "max_epochs": 3},
    description="ZDT1 and ZDT2 (Zitzler, Deb & Thiele 2000), four variables, objectives scaled by 1 + 0.5 (1 - t/9) "
                "and noised below the full budget, exact at it; hypervolume against (1.1, 11), regret against the "
                "true front's (closed form).",
)
