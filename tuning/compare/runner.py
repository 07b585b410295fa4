"""``python -m tuning.compare experiments/<name>``: search strategies side by side at equal budgets.
``python -m tuning.compare --replay RESULTS_DIR``: the same over a finished run's recorded curves.

An experiment is data (``EXPERIMENT = Experiment(...)`` in experiments/<name>.py): a space, the
strategies, a budget per strategy run in full evaluations, the seeds. One generic runner loops
over strategies x seeds, runs each through the same ``tune.run`` path as ``tuning.run`` (the
comparison measures the service itself), stops each run when its trials have trained the budget
between them, and keeps each finished run's rows on disk so a re-run only does what is missing.
At the end it writes runs.csv/.parquet, experiment.json, provenance.json and the report.

Beside the strategies, every comparison of a replay:DIR space or a benchmark runs its peers
(tuning/compare/peers.py: Optuna's TPE, alone and under Optuna's Hyperband pruner) in process, at
the same budget: what a user would run instead. A space "replay:DIR" (or --replay DIR) replays the
curves a finished tuning.run recorded (tuning/compare/recorded.py), each epoch charged its recorded
device-hours, regret against the best recorded configuration.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import shutil
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from tuning import api, backend, cli, growth, objectives, provenance, results, spaces, tracking, tracking_store
from tuning.cli import UsageError
from tuning.compare import mobench, peers, recorded as replay
from tuning.compare.experiment import (Experiment, check_out, load_experiment, replay_experiment, searched,
                                       several_fields, space_of, trainer_of)
from tuning.report import comparison as report

if TYPE_CHECKING:  # tuning.trial.data imports torch (3 s): only a CIFAR comparison's driver needs it
    from tuning.trial import data

log = logging.getLogger("tuning.compare")


def _run_rows(rows: list[dict], *, benchmark: str, strategy: str, seed: int, max_t: int,
              params: list[str], cpus: float = 1, metric: str = "loss", others: tuple = ()) -> pd.DataFrame:
    """The recorder's results, in arrival order, as the report's input rows. device_hours: the
    CPU-hours the run's trials had used by then (each trial's CPUs times its iterations' time); for
    a replay, the device-hours the recorded epochs cost (GPU-hours where the recorded run had GPUs).
    Columns: loss and accuracy where reported, and the space's metric (a replayed run's may be any);
    `others`: a space's other objectives and constrained metrics."""
    out, hours = [], 0.0
    for i, r in enumerate(rows, start=1):
        used = results.device_hours([r], cpus, 0)
        hours += used["gpu_hours"] or used["cpu_hours"]
        replayed = r.get("replayed") or {}
        out.append({
            "benchmark": benchmark, "strategy": strategy, "seed": seed, "run_id": f"{strategy}-s{seed}",
            "trial_id": r["trial_id"], "training_iteration": r["training_iteration"], "loss": r.get("loss"),
            "full_fidelity": r["training_iteration"] >= max_t,
            "consumed_budget": i / max_t,  # every result is one iteration of one trial
            "wall_s": r["wall_s"], "device_hours": hours,
            "epoch": r.get("epoch", r["training_iteration"]),
            "accuracy": r.get("accuracy"),
            **({metric: r[metric]} if metric not in ("loss", "accuracy") else {}),
            **{k: r.get(k) for k in others if k not in ("loss", "accuracy", metric)},
            **({"recorded_trial": replayed["trial_id"]} if replayed else {}),
            **{p: r["config"].get(p) for p in params},
        })
    return pd.DataFrame(out)


def _write_csv(df: pd.DataFrame, path: Path) -> None:
    # A run's file appears whole or not at all: it marks the run finished.
    results.write_atomic(path, lambda p: df.to_csv(p, index=False))


def run_tasks(name: str, exp: Experiment, out: Path, *, tasks: tuple, argv: list[str], **kwargs) -> Path:
    """Each task's comparison in <out>/<task>/ (finished runs kept, as ever), then the summary over
    every task folder that has finished (tasks=: a subset now, to split a long experiment)."""
    for i, task in enumerate(tasks, start=1):
        print(f"== task {task} ({i}/{len(tasks)})", flush=True)
        run(f"{name}-{task}", exp, out / task, trainer=task, argv=argv, **kwargs)
    done = {t: out / t for t in exp.tasks if (out / t / "finals.csv").exists()}
    from tuning.report import tasks as summary

    command = "python -m tuning.compare " + " ".join(map(provenance.portable, argv))
    return summary.write_summary(out, done, description=exp.description, command=command)["markdown"]


def run(name: str, exp: Experiment, out: Path, *, smoke: bool, seeds: int | None, budget: float | None,
        argv: list[str], address: str | None = None, storage_path: str | None = None,
        track: tracking_store.Target | None = None, trainer: str | None = None, data_dir: str = "data") -> Path:
    """The comparison; track: also log it to MLflow (tuning.tracking.Comparison), whose lines are
    printed at the end; trainer: one of the experiment's tasks instead of the space's trainer;
    data_dir: where a CIFAR comparison finds CIFAR-10 or generates its synthetic images."""
    space, recorded = space_of(exp.space)
    if trainer:
        space = space.replace(trainer=trainer_of(trainer))
    over = exp.smoke if smoke else {}
    max_t = over.get("max_epochs") or exp.max_epochs or space.max_epochs
    if recorded is not None:  # before anything is written: more epochs than recorded is bad input
        replay.check(recorded, space, max_t, f"{name}: {exp.space}")
    given, budget = budget, budget or over.get("budget") or exp.budget
    if budget < 1:  # it ran, then blamed the trainer ("no trial reported a result"), or reported n 0 for every row
        raise UsageError(f"{'--budget' if given else f'{name}: budget='} {budget:g} is less than one full evaluation "
                         f"({max_t} epochs): no run could reach a full-budget result to compare; give 1 or more")
    seed_list = list(exp.seeds if seeds is None and "seeds" not in over else
                     range(seeds if seeds is not None else over["seeds"]))
    params = list(space.params)
    check_out(out, exp, space, max_t=max_t, budget=budget, smoke=smoke)
    peer_names = _peers(exp, space)
    jobs = [(s, seed) for seed in seed_list for s in (*exp.strategies, *peer_names)]
    todo = [(s, seed) for s, seed in jobs if not (out / "runs" / f"{s}-s{seed}.csv").exists()]

    source = _source(space, smoke, data_dir)
    cpus = cli.SMOKE_CPUS if smoke else None
    if recorded is not None and recorded.parallelism:
        # As many trials at once as the recorded run trained: the order results arrive in, which
        # the asynchronous schedulers act on, is then the recorded one.
        cpus = math.ceil(recorded.parallelism * space.cpus_per_trial)
    if any(s not in peer_names for s, _ in todo):  # Ray only when a strategy run is missing: peers run without it
        backend.start_ray(address=address, num_cpus=cpus)
    # On shared storage each comparison gets its own folder, its runs one each inside it.
    storage = f"{storage_path.rstrip('/')}/{out.name}" if storage_path else None
    setting = dict(space=space, max_t=max_t, source=source, smoke=smoke, storage_path=storage)
    tracker = tracking.Comparison(track, name, out, {
        "space": exp.space, "budget": budget, "max_t": max_t, "strategies": ",".join(exp.strategies),
        "seeds": ",".join(map(str, seed_list)), "smoke": smoke, "metric": space.metric}) if track else None
    for i, (strategy, seed) in enumerate(jobs, start=1):
        run_id = f"{strategy}-s{seed}"
        done = out / "runs" / f"{run_id}.csv"
        if (strategy, seed) not in todo:
            print(f"[{i}/{len(jobs)}] {run_id}: finished in an earlier invocation, kept", flush=True)
            if tracker is not None:  # logged then, or now if that invocation was not tracked
                tracker.run_done(run_id, strategy, seed, results.read_table(done.parent, run_id), space.metric,
                                 space.mode)
            continue
        print(f"[{i}/{len(jobs)}] {run_id}: running ({budget:g} full evaluations of {max_t} iterations)", flush=True)
        started = time.monotonic()
        if strategy in peer_names:
            rows = peers.run(strategy, space, seed=seed, budget=budget, max_t=max_t, recorded=recorded)
        else:
            warm = _warm(exp, strategy, seed, out, over, setting)
            # An attempt a Ctrl-C cut short is run again from nothing: its rows and trial folders went
            # into the new attempt's results.jsonl and tune/ beside the new ones.
            shutil.rmtree(out / "runs" / run_id, ignore_errors=True)
            rows = _one_run(strategy=strategy.removesuffix("+warm"), seed=seed, budget=budget,
                            run_dir=out / "runs" / run_id, **warm, **setting)
        df = _run_rows(rows, benchmark=spaces.trainer_name(space.trainer) if space.trainer != "cifar" else name,
                       strategy=strategy,
                       seed=seed, max_t=max_t, params=params, cpus=space.cpus_per_trial, metric=space.metric,
                       others=tuple(objectives.required(space)))
        _write_csv(df, done)
        if tracker is not None:
            tracker.run_done(run_id, strategy, seed, df, space.metric, space.mode)
        print(f"[{i}/{len(jobs)}] {run_id}: done in {time.monotonic() - started:.0f} s, "
              f"{len(df)} iterations, {df['trial_id'].nunique() if len(df) else 0} trials", flush=True)

    runs = pd.concat([results.read_table(out / "runs", f"{s}-s{seed}") for s, seed in jobs], ignore_index=True)
    # Equal budgets, exactly: results that arrived after a run had spent its budget (trials
    # already running when it ran out) are not counted. runs/*.csv keep them.
    runs = runs[runs["consumed_budget"] <= budget + 1e-9].reset_index(drop=True)
    _write_csv(runs, out / "runs.csv")
    runs.to_parquet(out / "runs.parquet", index=False)
    write_records(out, name, exp, space, source, smoke=smoke, budget=budget, max_t=max_t, seeds=seed_list,
                   argv=argv, recorded=recorded, peer_names=peer_names, task=trainer)
    written = report.write_report(out)
    if tracker is not None:
        for line in tracker.finish({k: v for k, v in written.items() if k in ("html", "markdown")}):
            print(line, flush=True)
    return written["html"]


def _peers(exp: Experiment, space: spaces.Space) -> tuple:
    """The experiment's peers, where this space's trainer can be evaluated in process."""
    if exp.peers and not peers.supported(space):
        log.info("%s: %s", spaces.trainer_name(space.trainer), peers.NOT_RUN)
        return ()
    return peers.declared(exp.peers, space)


def _source(space: spaces.Space, smoke: bool, data_dir: str) -> data.DataSource | None:
    """The CIFAR data a comparison trains on (None for a synthetic benchmark)."""
    if space.trainer != "cifar":
        return None
    from tuning.trial import data

    sizes = {k: api.SMOKE[k] for k in ("synthetic_train", "synthetic_test")} if smoke else {}  # tuning.run --smoke's
    source = data.prepare("synthetic" if smoke else "auto", Path(data_dir).expanduser(), seed=0, **sizes)
    log.warning("DATA: %s (%s)", "SYNTHETIC CIFAR-10-shaped images" if source.kind == "synthetic"
                else "real CIFAR-10", source.root)
    return source


def write_records(out: Path, name: str, exp: Experiment, space: spaces.Space, source, *, smoke: bool,
                   budget: float, max_t: int, seeds: list[int], argv: list[str],
                   recorded: replay.Recorded | None = None, peer_names: tuple = (), task: str | None = None) -> None:
    """experiment.json (what was compared, as the report reads it) and provenance.json (how). A
    replay's regret is measured against the best recorded configuration, which the space holds.
    peers: the peers whose rows are in runs.csv; peers_not_run: why the declared ones are not."""
    from tuning.compare.benchmarks import BENCHMARKS

    bench = BENCHMARKS.get(space.trainer)
    known = {"optimum": bench.optimum, "regret": bench.regret, "dims": bench.dims} if bench else {}
    replayed = replay.describe(recorded, max_t) if recorded else None
    if replayed:
        known = {"optimum": replayed["optimum"], "regret": "difference", "dims": len(space.params)}
    trainer = spaces.trainer_name(space.trainer)
    kind = "benchmark" if bench or mobench.name_of(space.trainer) else "trainer"  # else a user's own
    results.write_json(out / "experiment.json", {
        "name": name, "benchmark": space.trainer if bench or recorded else mobench.name_of(space.trainer) or trainer,
        "metric": space.metric, "mode": space.mode, "budget": budget, "max_t": max_t,
        "strategies": list(exp.strategies), "seeds": seeds, "params": list(space.params),
        "optimum": known.get("optimum"), "regret": known.get("regret"), "dims": known.get("dims"),
        "description": exp.description, "space": provenance.portable(exp.space), "smoke": smoke,
        "searched": searched(space),
        "reference": exp.reference, "warm_from": exp.warm_from, "peers": list(peer_names),
        **({"peers_not_run": peers.NOT_RUN} if exp.peers and not peers.supported(space) else {}),
        **({"replay": {**replayed, "dir": provenance.portable(replayed["dir"])}} if replayed else {}),
        **(several_fields(exp, space, task) if objectives.multi(space) else {})})
    results.write_json(out / "provenance.json", {  # paths as provenance.portable gives them: these get committed
        "command": "python -m tuning.compare " + " ".join(map(provenance.portable, argv)),
        "data": {"kind": source.kind if source else provenance.portable(exp.space) if recorded else f"{kind}:{trainer}",
                 "root": provenance.portable(source.root) if source else None},
        "machine": provenance.machine(), "seeds": seeds, "git_commit": provenance.git_commit(),
        "versions": provenance.versions()})


def _warm(exp: Experiment, strategy: str, seed: int, out: Path, over: dict, setting: dict) -> dict:
    """A '+warm' run's start: the earlier run's rows for BOHB's model, its best configurations for
    the others. The earlier run is made once per seed and kept in runs/source-s<seed>.jsonl."""
    if not strategy.endswith("+warm"):
        return {}
    file = out / "runs" / f"source-s{seed}.jsonl"
    if file.exists():
        rows = [json.loads(line) for line in file.read_text().splitlines()]
    else:
        budget = over.get("warm_budget") or exp.warm_from["budget"]
        print(f"      source-s{seed}: the earlier run to start from ({exp.warm_from['strategy']}, {budget:g} "
              "full evaluations)", flush=True)
        rows = [{k: r[k] for k in ("trial_id", "training_iteration", "config", setting["space"].metric)}
                for r in _one_run(strategy=exp.warm_from["strategy"], seed=seed + exp.warm_from.get("seed_offset", 1000),
                                  budget=budget, run_dir=out / "runs" / f"source-s{seed}", **setting)]
        results.write_text(file, "".join(json.dumps(r) + "\n" for r in rows))
    if strategy.startswith("bohb"):
        return {"warm_rows": rows}
    by_trial: dict[str, list[dict]] = {}
    for r in rows:
        by_trial.setdefault(r["trial_id"], []).append(r)
    return {"warm_points": growth.best_configs([({"max_epochs": setting["max_t"]}, by_trial)], setting["space"], 3)}


def _one_run(*, space, strategy, seed, max_t, budget, source, run_dir: Path, smoke: bool,
             storage_path: str | None = None, warm_rows: list | None = None,
             warm_points: list | None = None) -> list[dict]:
    rec = backend.recorder()
    grid = strategy == "grid"
    spec = backend.RunSpec(
        space=space, strategy=strategy,
        # Grid runs its grid once; the others sample until the budget stops them (every trial
        # trains at least one iteration, so the budget bounds the trials needed).
        num_samples=1 if grid else int(budget * max_t) + 1,
        max_epochs=max_t, seed=seed, cpus_per_trial=space.cpus_per_trial, gpus_per_trial=0,
        source=source, results_dir=run_dir, max_train=api.SMOKE["max_train"] if smoke else None,
        max_val=api.SMOKE["max_val"] if smoke else None,
        budget_iterations=int(round(budget * max_t)), progress=False, snapshot_every_step=False, callbacks=[rec],
        storage_path=storage_path, warm_rows=warm_rows or [], warm_points=warm_points or [])
    trials, interrupted = backend.run(spec)
    if interrupted:  # a partial run must not be kept as finished
        raise KeyboardInterrupt
    # Neither is kept as a finished run: its stand-in values or its empty table would be compared.
    wrong = next((r[results.METRIC_ERROR] for r in rec.rows if r.get(results.METRIC_ERROR)), None)
    if wrong:
        raise UsageError(f"{run_dir.name}: {wrong}; then run the same command again")
    failed = [t for t in trials if t.status == "ERROR"]
    if not rec.rows:
        raise UsageError(f"{run_dir.name}: no trial reported a result ({len(failed)} of {len(trials)} failed"
                         + (f", the first with {failed[0].error}" if failed and failed[0].error else "")
                         + f"; their tracebacks are under {run_dir}): fix the trainer, then run the same command again")
    if failed:  # the others are compared: say what is missing from them
        log.warning("%s: %d of %d trials failed, the first with %s; the run's results are the others' (tracebacks "
                    "under %s)", run_dir.name, len(failed), len(trials), failed[0].error or "an error", run_dir)
    return rec.rows


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        datefmt="%H:%M:%S")
    argv = sys.argv[1:] if argv is None else list(argv)
    p = cli.Parser(prog="python -m tuning.compare", description=__doc__.split("\n\n")[0])
    p.add_argument("experiment", nargs="?", help="an experiment declaration, e.g. experiments/counting_ones")
    p.add_argument("--replay", metavar="RESULTS_DIR",
                   help="instead of an experiment: every strategy over the learning curves a finished tuning.run "
                        "recorded in RESULTS_DIR (what would the others have cost?), 10 seeds, at its recorded "
                        "epochs, one grid's worth of budget unless --budget")
    p.add_argument("--smoke", action="store_true",
                   help=f"the experiment's CI-sized settings, on a local Ray of {cli.SMOKE_CPUS} CPUs")
    p.add_argument("--seeds", type=cli.positive_int, help="run seeds 0..N-1 instead of the experiment's")
    p.add_argument("--budget", type=cli.positive_float,
                   help="full evaluations per strategy run, instead of the experiment's")
    p.add_argument("--strategies", type=lambda v: tuple(t for t in v.split(",") if t), metavar="NAME,...",
                   help="run only these of the experiment's strategies and peers now (the report covers those "
                        "alone; run the rest later into the same --out and the report covers all)")
    p.add_argument("--tasks", type=lambda v: tuple(t for t in v.split(",") if t), metavar="TASK,...",
                   help="of an experiment over several tasks, run only these now (the summary covers every task "
                        "finished so far): a long experiment split across sittings")
    p.add_argument("--out", help="output folder (default results/compare/<name>[-smoke]); finished runs "
                                 "in it are kept, not run again")
    p.add_argument("--data-dir", metavar="DIR",
                   help="a CIFAR comparison's data: where CIFAR-10 lives or synthetic images are generated "
                        "(default ./data)")
    p.add_argument("--address", metavar="auto|HOST:PORT",
                   help="run on the Ray cluster there instead of starting a local Ray")
    p.add_argument("--storage-path", metavar="DIR|URI", type=cli.storage_path,
                   help="where Tune keeps experiments and checkpoints: a folder every node reaches, or s3://...")
    p.add_argument("--mlflow", nargs="?", const=True, metavar="URI",
                   help="also log to MLflow: one parent run for the comparison, a run per strategy x seed, the "
                        "report as artifacts. URI: http://host:port, sqlite:///path/mlflow.db or a folder; none: "
                        "a SQLite store in the output folder (docs/tracking.md)")
    p.add_argument("--mlflow-experiment", metavar="NAME",
                   help="the MLflow experiment (default: compare-<experiment name>)")
    tracking_store.quiet_logs()
    with cli.sigterm_stops_like_ctrl_c():
        try:
            args = p.parse_args(argv)
            cli.quiet_libraries()  # Ray's and Optuna's noise: this command's output
            if (args.experiment is None) == (args.replay is None):
                raise UsageError("give an experiment (e.g. experiments/counting_ones) or --replay RESULTS_DIR, "
                                 "one of the two")
            name, exp = load_experiment(args.experiment) if args.replay is None else replay_experiment(args.replay)
            cli.check_folder_named("out", args.out)  # '' was the default folder, silently
            for flag, given in (("strategies", args.strategies), ("tasks", args.tasks)):
                if given == ():  # '' (a script's empty variable) was every one of them, silently
                    raise UsageError(f"--{flag} '' names none: give NAME,... or leave it out for all of them")
            out = Path(args.out or f"results/compare/{name}{'-smoke' if args.smoke else ''}").expanduser()
            track = tracking_store.check(args.mlflow, args.mlflow_experiment, f"compare-{name}", out.absolute())
            if args.strategies:
                runnable = exp.peers if exp.tasks or peers.supported(space_of(exp.space)[0]) else ()
                declared = (*exp.strategies, *runnable)
                if set(args.strategies) & (set(exp.peers) - set(runnable)):
                    raise UsageError(f"--strategies: {sorted(set(args.strategies) & set(exp.peers))[0]!r} is a peer, "
                                     f"and {peers.NOT_RUN.removeprefix('peers: ')}; this experiment's strategies are "
                                     f"{', '.join(exp.strategies)}")
                if not set(args.strategies) <= set(declared):
                    raise UsageError(f"--strategies: {sorted(set(args.strategies) - set(declared))[0]!r} is not one of "
                                     f"the experiment's strategies or peers ({', '.join(declared)})")
                exp = dataclasses.replace(exp, strategies=tuple(s for s in exp.strategies if s in args.strategies),
                                          peers=tuple(s for s in exp.peers if s in args.strategies))
            setting = dict(smoke=args.smoke, seeds=args.seeds, budget=args.budget, argv=argv, address=args.address,
                           storage_path=args.storage_path, track=track, data_dir=args.data_dir or "data")
            cli.check_folder_named("data_dir", args.data_dir)
            if args.data_dir is not None and (exp.tasks or space_of(exp.space)[0].trainer != "cifar"):
                raise UsageError(f"--data-dir is for a CIFAR comparison's images; {name} trains no CIFAR: drop it")
            if args.tasks and not set(args.tasks) <= set(exp.tasks):
                raise UsageError(f"--tasks: {sorted(set(args.tasks) - set(exp.tasks))[0]!r} is not one of the "
                                 f"experiment's tasks ({', '.join(exp.tasks) or 'it has none'})")
            # --smoke: the experiment's first smoke["tasks"] tasks
            tasks = args.tasks or exp.tasks[:exp.smoke.get("tasks") if args.smoke else None]
            html = (run_tasks(name, exp, out, tasks=tasks, **setting) if exp.tasks else run(name, exp, out, **setting))
        except (cli.TuningError, report.ReportError, backend.ClusterError, results.ReadError) as exc:
            print(f"tuning.compare: error: {exc}", file=sys.stderr)
            return 2
        except results.WriteError as exc:  # a full disk: not bad input
            print(f"tuning.compare: error: {exc}; finished runs are kept: fix that and run the same command again",
                  file=sys.stderr)
            return 1
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM
            print("tuning.compare: interrupted; finished runs are kept: run the same command again to go on",
                  file=sys.stderr)
            return cli.interrupted_status()
    if exp.tasks:
        print(f"\nSummary: {html}\nTasks:   {', '.join(str(out / t / 'report.md') for t in tasks)}")
    else:
        print(f"\nReport: {html}\n        {Path(html).with_suffix('.md')}\nRows:   {out / 'runs.csv'}")
    return 0
