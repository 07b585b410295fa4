"""ZDT1 and ZDT2 (tuning.compare.mobench; Zitzler, Deb & Thiele, Evolutionary Computation 2000): two
objectives f1, f2, both minimised, over four variables in [0, 1]; biased and noisy below the full
budget, exact at it, so the true front and its hypervolume are known. The problem is the trainer,
"tuning.mobench:zdt1" or ":zdt2" (an experiment's tasks= runs both)."""

from tuning.spaces import Space, Uniform

SPACE = Space(
    # x0 is f1 itself; x1..x3 set g, which is 1 (the front) only where all three are 0.
    params={f"x{i}": Uniform(0.0, 1.0) for i in range(4)},
    trainer="tuning.mobench:zdt1",
    objectives={"f1": "min", "f2": "min"},
    num_samples=50,  # no strategy named: adaptive, which leads on it (docs/comparisons.md)
    # Nine epochs of fidelity: rungs 1, 3, 9 at eta 3, where the bias has fallen by a third each time.
    max_epochs=9,
    reduction_factor=3,
    cpus_per_trial=1,
    gpus_per_trial=0,
)
