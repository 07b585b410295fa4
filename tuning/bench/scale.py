"""The bench's ``scale`` section: thousands of trials that do nothing, through ``tuning.search``
and through a plain ``tune.run`` in the same sitting, each in a fresh process.

What a cheap trainer (scikit-learn, a replayed curve, our own benchmarks) feels first is the
driver's cost per trial, and whether it grows with the trials so far. Each trial reports once and
stamps the wall clock in its result, so both sides are timed the same way: per-trial cost per
tenth of the run is the time between the last result of one tenth and the last of the next,
divided by the trials in it. The driver's peak RSS is its own high-water mark (Ray's other
processes aside); the final report's time is a second write of it once the search returned.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

KINDS = ("ours", "raw")


def noop(*, x: float, y: float, epochs: int, state=None, on_epoch=None, **_):
    """The scale section's trial: one report, the time it was made, nothing else."""
    on_epoch({"loss": x + y, "done_at": time.time()}, {"epoch": 1})


def _raw_noop():
    """The same trial for a plain tune.run, made inside a function so that cloudpickle sends it by
    value (tuning.bench.harness._raw_busy says why)."""

    def noop_raw(config):
        import time

        from ray import tune

        tune.report({"loss": config["x"] + config["y"], "done_at": time.time()})

    return noop_raw


def tenths(stamps: list[float]) -> list[float]:
    """Per-trial seconds in each tenth of the run: the results in arrival order cut in ten, each
    tenth timed from its first result to the next tenth's first (start-up is in neither)."""
    stamps = sorted(stamps)
    n = len(stamps)
    cut = [min(n - 1, round((n - 1) * k / 10)) for k in range(11)]
    return [(stamps[cut[k + 1]] - stamps[cut[k]]) / max(1, cut[k + 1] - cut[k]) for k in range(10)]


def _ours(n: int, folder: Path) -> dict:
    import tuning
    from tuning import backend
    from tuning.report import runreport
    from tuning.spaces import Space, Uniform

    backend.start_ray()  # before the clock, as for raw Tune
    space = Space(params={"x": Uniform(0.0, 1.0), "y": Uniform(0.0, 1.0)}, trainer="tuning.bench.scale:noop",
                  metric="loss", mode="min", max_epochs=1, gpus_per_trial=0, cpus_per_trial=1)
    started = time.time()
    result = tuning.search(space=space, strategy="random", num_samples=n, results_dir=folder, max_failures=0)
    wall = time.time() - started
    t = time.perf_counter()
    runreport.write_report(folder, result.trials, result.epochs, result.record)
    report_s = time.perf_counter() - t
    stamps = [float(v) for v in result.epochs["done_at"].dropna()]
    return {"wall_s": wall, "stamps": stamps, "report_s": report_s}


def _raw(n: int, folder: Path) -> dict:
    from ray import tune

    from tuning import backend

    backend.start_ray()
    os.environ["TUNE_DISABLE_AUTO_CALLBACK_LOGGERS"] = "1"  # loggers off, as ours are
    started = time.time()
    analysis = tune.run(_raw_noop(), config={"x": tune.uniform(0.0, 1.0), "y": tune.uniform(0.0, 1.0)},
                        num_samples=n, resources_per_trial={"cpu": 1}, reuse_actors=True, storage_path=str(folder),
                        verbose=0)
    wall = time.time() - started
    stamps = [t.last_result["done_at"] for t in analysis.trials if t.last_result.get("done_at")]
    return {"wall_s": wall, "stamps": stamps, "report_s": None}


def measure(kind: str, n: int, keep: str | None = None) -> dict:
    """One run of `n` no-op trials (a kind of KINDS) in this process: wall_s, per-trial seconds per
    tenth, the driver's peak RSS in MB, the final report's seconds (ours only). keep: a folder
    for the run's files, kept (by default a temporary one)."""
    with tempfile.TemporaryDirectory() as d:
        got = (_ours if kind == "ours" else _raw)(n, Path(keep or Path(d, "run")))
    return {"kind": kind, "n": n, "trials": len(got["stamps"]), "wall_s": got["wall_s"],
            "tenths_ms": [1000 * s for s in tenths(got["stamps"])],
            "peak_rss_mb": peak_rss_mb(), "report_s": got["report_s"]}


def peak_rss_mb() -> float:
    """This process's peak RSS since it started: VmHWM. Not ru_maxrss, which Linux carries over
    from the forked parent across exec (every child of the bench then read at least the bench's
    own 576 MB)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # not Linux


def proposal_ms(searcher: str, n: int, repeats: int = 20, seed: int = 0) -> dict:
    """Milliseconds per proposal, and per observation, of a searcher that has seen `n` results at
    one budget, on LCBench's 7-parameter space (search_spaces/lcbench.py) with random losses:
    "bohb" (HpBandSter's generator as tuning.backend.bohb runs it, every proposal from the model),
    "tpe" (Optuna's TPESampler as it ships) or "tpe_windowed" (tuning.backend.tpewindow's, which
    the tpe strategy runs)."""
    import numpy as np

    from tuning import spaces

    space = spaces.load("lcbench")
    rng = np.random.default_rng(seed)
    if searcher == "bohb":
        from tuning.backend import rayinternals
        from tuning.backend.bohb import VectorisedBOHB, configspace

        cs = configspace(space, seed)
        model = VectorisedBOHB(cs, random_fraction=0.0)
        for i, config in enumerate(cs.sample_configuration(n)):
            model.new_result(rayinternals.bohb_job(float(rng.random()), 27, dict(config)), update_model=i == n - 1)
        t = time.perf_counter()
        for _ in range(repeats):
            model.get_config(27)
        propose = (time.perf_counter() - t) / repeats
        t = time.perf_counter()
        for config in cs.sample_configuration(repeats):
            model.new_result(rayinternals.bohb_job(float(rng.random()), 27, dict(config)))
        return {"propose_ms": 1000 * propose, "observe_ms": 1000 * (time.perf_counter() - t) / repeats}
    import optuna

    from tuning.compare import peers

    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
    for _ in range(n):  # the past, drawn at random; then the sampler tuning.backend.tpe gives OptunaSearch
        trial = study.ask()
        peers.ask(trial, space.params)
        study.tell(trial, float(rng.random()))
    if searcher == "tpe":  # Optuna's own, as it ships (the peers run it)
        study.sampler = optuna.samplers.TPESampler(seed=seed)
    else:  # "tpe_windowed": what tuning.backend.tpe gives OptunaSearch
        from tuning.backend.tpewindow import WindowedTPE

        study.sampler = WindowedTPE(seed=seed)
    t = time.perf_counter()
    for _ in range(repeats):
        trial = study.ask()
        peers.ask(trial, space.params)
        study.tell(trial, float(rng.random()))
    return {"propose_ms": 1000 * (time.perf_counter() - t) / repeats, "observe_ms": None}


def in_fresh_process(kind: str, n: int) -> dict:
    out = subprocess.run([sys.executable, "-m", "tuning.bench.scale", kind, str(n)], capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"the {kind} scale run of {n} trials failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def bench_scale(quick: bool, sizes: tuple[int, ...] | None = None) -> list[dict]:
    """Rows of the scale section: at each size, ours and raw Tune's per-trial cost, their ratio,
    the last tenth against the first, the driver's peak RSS and the final report's time."""
    from tuning.bench.harness import row

    sizes = sizes or ((200,) if quick else (200, 2000, 10000))
    rows, runs = [], []
    for n in sizes:
        got = {kind: in_fresh_process(kind, n) for kind in KINDS}
        runs.append(got)
        ours, raw = got["ours"], got["raw"]
        per = {k: 1000 * g["wall_s"] / g["n"] for k, g in got.items()}
        detail = f"{n} no-op trials, one report each, random search, 1 CPU each; each side in a fresh process"
        rows += [row("scale", f"ours_ms_per_trial_{n}", per["ours"], "ms", f"tuning.search wall / trials; {detail}"),
                 row("scale", f"raw_tune_ms_per_trial_{n}", per["raw"], "ms",
                     f"tune.run(reuse_actors=True) wall / trials, loggers off; {detail}"),
                 row("scale", f"ours_to_raw_{n}", per["ours"] / per["raw"], "x", "per-trial cost, ours / raw Tune"),
                 row("scale", f"ours_last_to_first_tenth_{n}", ours["tenths_ms"][-1] / ours["tenths_ms"][0], "x",
                     "per-trial cost of the run's last tenth / its first: tuning.search"),
                 row("scale", f"raw_last_to_first_tenth_{n}", raw["tenths_ms"][-1] / raw["tenths_ms"][0], "x",
                     "the same, raw Tune"),
                 row("scale", f"ours_driver_peak_rss_mb_{n}", ours["peak_rss_mb"], "MB",
                     "the driver process's peak RSS (VmHWM), tuning.search"),
                 row("scale", f"raw_driver_peak_rss_mb_{n}", raw["peak_rss_mb"], "MB", "the same, raw Tune"),
                 row("scale", f"final_report_s_{n}", ours["report_s"], "s",
                     "report.html and report.md written again from the finished run's tables")]
    for searcher in ("bohb", "tpe", "tpe_windowed"):
        for n in (1000,) if quick else (1000, 10000):
            got = proposal_ms(searcher, n)
            rows.append(row("scale", f"{searcher}_propose_ms_{n}", got["propose_ms"], "ms",
                            f"one proposal after {n} results at one budget, LCBench's 7 parameters, random losses"))
            if got["observe_ms"] is not None:
                rows.append(row("scale", f"{searcher}_observe_ms_{n}", got["observe_ms"], "ms",
                                f"one more result told to the model after {n} (HpBandSter refits its densities)"))
    bench_scale.runs = runs  # each run's per-tenth figures: scale.json beside bench.csv
    return rows


if __name__ == "__main__":  # in_fresh_process's child: python -m tuning.bench.scale KIND N [KEEP]
    print(json.dumps(measure(sys.argv[1], int(sys.argv[2]), *sys.argv[3:4])))
