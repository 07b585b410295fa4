"""The comparison side: strategies x seeds at equal budgets, on benchmarks with a known optimum, then
the report. ``python -m tuning.compare EXPERIMENT`` runs one; an experiment file declares it:

    from tuning.compare import Experiment
    EXPERIMENT = Experiment(space="counting_ones", strategies=["random", "bohb"], seeds=10, budget=64)

    runner        python -m tuning.compare: the runs, their rows, then tuning.report's report
    experiment    an experiment of tuning.compare, its declaration loaded and checked
    benchmarks    benchmarks with a known optimum: counting ones, Hartmann-6, categorical, conditional
    realbench     real benchmarks: LCBench's surrogate, HPOBench-MLP and FCNet tables
    mobench       multi-objective benchmarks, each also a trainer `tuning.mobench:<name>`
    recorded      a finished run's recorded curves as a benchmark (replay:DIR, --replay)
    peers         Optuna's samplers run in process beside a comparison

Importing this package imports none of them (a run's driver imports the benchmarks without the
runner); Experiment and main load on first use.
"""

__all__ = ["Experiment", "main"]


def __getattr__(name: str):
    if name == "Experiment":
        from tuning.compare.experiment import Experiment

        return Experiment
    if name == "main":
        from tuning.compare.runner import main

        return main
    raise AttributeError(f"module 'tuning.compare' has no attribute {name!r}")
