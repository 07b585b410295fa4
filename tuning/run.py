"""``python -m tuning.run --space NAME``: tune a search space with Ray Tune.

A thin layer over the Python API: it parses the flags into tuning.api.search()'s (or resume()'s)
keywords, calls it, and prints the summary. Bad input exits with code 2 and one line saying what
to change.
"""

from __future__ import annotations

import argparse
import logging
import sys

from tuning import api, cli, growth, objectives, points, results, spaces, tracking_store
from tuning.cli import TuningError, UsageError
from tuning.contract import PRECISIONS

log = logging.getLogger("tuning.run")


def _add_growth_flags(p: argparse.ArgumentParser) -> None:
    """Flags that continue or grow a search: --resume, --add-samples, --warm-start, --time-budget."""
    p.add_argument("--resume", metavar="DIR",
                   help="continue the unfinished experiment in this results dir (after a crash or Ctrl-C), "
                        "with the settings it was started with; with --add-samples, a finished one too")
    p.add_argument("--add-samples", type=cli.positive_int, metavar="N",
                   help="with --resume: N more trials under the same strategy and seed lineage (new random "
                        "draws, the grid's next points, BOHB's model as it stands); earlier trials are kept")
    p.add_argument("--warm-start", nargs="+", metavar="DIR",
                   help="start from earlier runs of the same space: BOHB's model (and adaptive's) is given "
                        "their results; random, ASHA, median, Hyperband and tpe evaluate their best "
                        "configurations first")
    p.add_argument("--warm-start-top", type=cli.positive_int, metavar="K",
                   help="with --warm-start under random, ASHA, median, Hyperband or tpe: how many of the earlier best "
                        "configurations run first (default 3)")
    p.add_argument("--points-to-evaluate", metavar="FILE|JSON",
                   help="configurations of yours to run first, each one trial: a JSON list of objects, or a file "
                        "holding one ('[{\"lr\": 0.01, \"batch_size\": 64}]'); every strategy but grid")
    p.add_argument("--time-budget", metavar="DURATION", type=_duration,
                   help="stop once the run has run this long (90s, 30m, 2h; downtime between a stop and "
                        "--resume does not count): no trial starts after it, running trials pause at their "
                        "next epoch with their checkpoints; on --resume, the new total budget")


def build_parser() -> argparse.ArgumentParser:
    p = cli.Parser(prog="python -m tuning.run", description=__doc__.split("\n\n")[0],
                epilog="Flags override what the space file declares.")
    p.add_argument("--space", help="search space: a module under search_spaces/ (e.g. cifar_asha) or a .py file "
                                   "that defines SPACE; required unless --resume")
    _add_growth_flags(p)
    p.add_argument("--trainer", metavar="MODULE:FUNCTION",
                   help="train with this function of yours instead of the space's trainer (docs/your-trainer.md)")
    p.add_argument("--strategy", choices=(*spaces.STRATEGIES, spaces.AUTO),
                   help="search strategy, overriding the space's (a space that names none: auto, adaptive for a "
                        "trainer that reports every epoch, tpe for one that reports once): grid (grid search, FIFO), random "
                        "(random search, FIFO), asha (random search + ASHA), median (random search + the median "
                        "stopping rule), hyperband (random search + "
                        "synchronous Hyperband brackets), bohb (BOHB's model + the same brackets), adaptive (BOHB whose "
                        "brackets and model follow how well each rung ranks like the last), tpe (Optuna's TPE + "
                        "asynchronous Hyperband brackets)")
    p.add_argument("--objective", action="append", metavar="NAME:min|max",
                   help="an objective, in place of the space's metric or objectives; repeat it for several, the "
                        "first one first (--objective loss:min --objective latency_ms:min): the run keeps the "
                        "Pareto front in pareto.csv (docs/multi-objective.md). Every strategy but median runs it "
                        "(asha is MO-ASHA)")
    p.add_argument("--constraint", action="append", metavar="'NAME<=BOUND'",
                   help="a bound on a reported metric, in place of the space's constraints; repeat it for several "
                        "(--constraint 'peak_mem_gb<=4'): trials that break one rank after every trial that does not; "
                        "'peak_mem_gb<=4 grows' for a metric that only grows stops a trial once past it")
    p.add_argument("--num-samples", type=cli.positive_int,
                   help="trials to sample (default: the space's); with grid, how often the grid is repeated")
    p.add_argument("--max-epochs", type=cli.positive_int, help="epochs of a full-budget trial (default: the space's)")
    p.add_argument("--seed", type=cli.non_negative_int,
                   help="seeds the search and every trial's init and data order (default: the space's, 0)")
    p.add_argument("--cpus-per-trial", type=cli.positive_float, help="CPUs per trial; fractions allowed")
    p.add_argument("--gpus-per-trial", type=cli.non_negative_float,
                   help="GPUs per trial; fractions share a GPU (default: the space's; the CIFAR spaces' is 1 where "
                        "Ray sees GPUs, else 0)")
    p.add_argument("--workers-per-trial", type=cli.positive_int,
                   help="CPU trials: train each trial as W DistributedDataParallel (gloo) ranks sharing "
                        "its CPUs (default: the space's, usually 1). GPU trials run one rank per GPU")
    p.add_argument("--precision", choices=PRECISIONS,
                   help="CIFAR trainer: auto (default) trains under bf16 autocast on CUDA and in fp32 on CPU; "
                        "bf16 or fp32 force one (weights and checkpoints stay fp32); overrides the space's fixed")
    p.add_argument("--data", choices=["auto", "cifar10", "synthetic"],
                   help="auto (default): real CIFAR-10 if found or downloadable, else synthetic; "
                        "cifar10: require the real set; synthetic: always generate")
    p.add_argument("--data-dir", default="./data", help="where CIFAR-10 lives or is generated (default ./data)")
    p.add_argument("--results-dir", help="where results go (default results/<space>-<start time>)")
    p.add_argument("--address", metavar="auto|HOST:PORT",
                   help="run on the Ray cluster there (auto: the one started on this machine with `ray start`) "
                        "instead of starting a local Ray; see docs/cluster.md")
    p.add_argument("--storage-path", metavar="DIR|URI", type=cli.storage_path,
                   help="where Tune keeps the experiment and trial checkpoints: a folder every node reaches "
                        "(NFS) or a URI pyarrow opens (s3://bucket/path); default: RESULTS_DIR/tune. "
                        "Needed on a cluster of several machines")
    p.add_argument("--max-failures", type=cli.non_negative_int,
                   help="retry a trial whose training raises up to this many times, from its last "
                        "checkpoint, before marking it failed (default 2)")
    p.add_argument("--max-concurrent-trials", type=cli.positive_int, metavar="N",
                   help="run at most N trials at once (default: as many as the CPUs and GPUs allow); fewer at "
                        "once let bohb, adaptive and tpe propose each trial from more results. With --resume, "
                        "the new limit (default: the run's own)")
    p.add_argument("--tune-logs", action="store_true",
                   help="also write Tune's own per-trial logs (TensorBoard events, progress.csv, result.json) "
                        "to each trial's folder; with many short trials they cost time (docs/performance.md)")
    p.add_argument("--worker-logs", action="store_true",
                   help="forward trial processes' output (Ray's INFO lines included) to this terminal")
    p.add_argument("--mlflow", nargs="?", const=True, metavar="URI",
                   help="also log the search to MLflow: one parent run, a child run per trial (docs/tracking.md). "
                        "URI: http://host:port, sqlite:///path/mlflow.db or a folder; none: a SQLite store in "
                        "the results dir. On --resume, a tracked run goes on under the same parent run")
    p.add_argument("--mlflow-experiment", metavar="NAME", help="the MLflow experiment (default: the space's name)")
    p.add_argument("--smoke", action="store_true",
                   help=f"CI-sized run: {api.SMOKE['num_samples']} samples, {api.SMOKE['max_epochs']} epochs (hyperband, "
                        f"bohb, adaptive, tpe: {api.SMOKE_HYPERBAND['num_samples']} and "
                        f"{api.SMOKE_HYPERBAND['max_epochs']}), "
                        "a small data subset, synthetic data unless --data is given, a local Ray of "
                        f"{cli.SMOKE_CPUS} CPUs (trials run as on the 2-core machines it was sized on)")
    return p


def _objective_flags(args) -> dict:
    """--objective and --constraint as search()'s objectives= and constraints=; a malformed one, or an
    objective named twice, is bad input."""
    out = {}
    try:
        if args.objective:
            out["objectives"] = _once([objectives.parse_objective(t) for t in args.objective],
                                      "--objective names {} more than once: give each objective once")
        if args.constraint:
            out["constraints"] = _once([objectives.parse_constraint(t) for t in args.constraint],
                                       "--constraint bounds {} more than once: one bound per metric")
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return out


def _once(pairs: list[tuple], refusal: str) -> dict:
    """(name, value) pairs as a dict; a name given twice is ValueError(refusal with the names)."""
    names = [name for name, _ in pairs]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise ValueError(refusal.format(", ".join(twice)))
    return dict(pairs)


def _duration(text: str) -> float:
    try:
        return growth.parse_duration(text)
    except UsageError:
        raise argparse.ArgumentTypeError(f"must be a positive duration such as 90s, 30m or 2h, got {text}") from None


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        datefmt="%H:%M:%S")
    _progress_to_stdout()
    tracking_store.quiet_logs()
    argv = sys.argv[1:] if argv is None else list(argv)
    with cli.sigterm_stops_like_ctrl_c(), cli.speaking_flags():
        try:
            return _main(argv)
        except TuningError as exc:
            print(f"tuning.run: error: {exc}", file=sys.stderr)
            return 2
        except results.WriteError as exc:  # a full disk, a file that cannot be written: not bad input
            print(f"tuning.run: error: {exc}; the experiment is saved up to the last result written: fix that, "
                  f"then continue with python -m tuning.run --resume {exc.path.parent}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:  # outside the search loop (starting, saving, the report), or a second one
            print("tuning.run: interrupted outside the search loop (starting, saving or writing the report); what "
                  "was saved is kept: --resume DIR continues an unfinished run, python -m tuning.report DIR remakes "
                  "a finished one's report", file=sys.stderr)
            return cli.interrupted_status()


def _progress_to_stdout() -> None:
    """The API's lines for whoever watches (the grid's size, the live report) go to stdout, as
    plain lines beside Tune's progress table."""
    say = logging.getLogger(api.say.name)
    if not any(isinstance(h, _Stdout) for h in say.handlers):
        handler = _Stdout()
        handler.setFormatter(logging.Formatter("%(message)s"))
        say.addHandler(handler)
    say.setLevel(logging.INFO)
    say.propagate = False
    logging.getLogger(api.outcome.name).setLevel(logging.CRITICAL)  # the summary says it


class _Stdout(logging.StreamHandler):
    """Whatever sys.stdout is when a line is written (a caller may have swapped it since)."""

    @property
    def stream(self):
        return sys.stdout

    @stream.setter
    def stream(self, _):
        pass


# What --resume takes; the run's other settings are its own (run.json), and a flag for one of them
# would be ignored.
RESUME_TAKES = {"resume", "add_samples", "time_budget", "address", "worker_logs", "trainer", "mlflow",
                "mlflow_experiment", "max_concurrent_trials"}


def _given(argv: list[str]) -> set[str]:
    """The flags the command line named, whatever their values: `--data-dir ./data` is named too,
    though it is the default (comparing values with the defaults let it pass)."""
    parser = build_parser()
    for action in parser._actions:  # argparse's own idiom: an absent flag then sets nothing
        action.default = argparse.SUPPRESS
    return set(vars(parser.parse_args(argv)))


def _main(argv: list[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    cli.quiet_libraries()  # Ray's and Optuna's noise: this command's output, which tuning.search leaves alone
    if args.resume:
        ignored = ["--" + k.replace("_", "-") for k in sorted(_given(argv))
                   if k not in RESUME_TAKES and k not in ("objective", "constraint", "warm_start", "warm_start_top")]
        if ignored:
            raise UsageError(f"--resume continues the run with the settings it started with (its run.json), so "
                             f"{', '.join(ignored)} would be ignored: drop {'them' if len(ignored) > 1 else 'it'}, "
                             "use --add-samples N for more trials, or start a new run")
        if args.objective or args.constraint:
            raise UsageError("--objective and --constraint start a new run: a resumed run keeps the objectives it "
                             "was started with")
        if args.warm_start or args.warm_start_top is not None:
            raise UsageError("--warm-start starts a new run: it cannot be given with --resume (nor --warm-start-top)")
        result = api.resume(args.resume, add_samples=args.add_samples, time_budget=args.time_budget,
                            address=args.address, worker_logs=args.worker_logs, trainer=args.trainer,
                            mlflow=args.mlflow, mlflow_experiment=args.mlflow_experiment,
                            max_concurrent_trials=args.max_concurrent_trials)
    else:
        if args.add_samples is not None:
            raise UsageError("--add-samples needs --resume DIR: it extends that run")
        if not args.space:
            raise UsageError("--space is required: name a space (e.g. --space cifar_asha) or --resume DIR")
        result = api.search(
            args.trainer, args.space, strategy=args.strategy, num_samples=args.num_samples,
            max_epochs=args.max_epochs, seed=args.seed, cpus_per_trial=args.cpus_per_trial,
            gpus_per_trial=args.gpus_per_trial, workers_per_trial=args.workers_per_trial,
            precision=args.precision, data=args.data, data_dir=args.data_dir, results_dir=args.results_dir,
            address=args.address, storage_path=args.storage_path,
            max_failures=api.DEFAULT_MAX_FAILURES if args.max_failures is None else args.max_failures,
            max_concurrent_trials=args.max_concurrent_trials,
            tune_logs=args.tune_logs, worker_logs=args.worker_logs, smoke=args.smoke, time_budget=args.time_budget,
            warm_start=args.warm_start, warm_start_top=args.warm_start_top, mlflow=args.mlflow,
            points_to_evaluate=None if args.points_to_evaluate is None else points.read(args.points_to_evaluate),
            mlflow_experiment=args.mlflow_experiment, argv=argv, **_objective_flags(args))
    print("\n" + result.summary())
    if result.status == "time budget spent":  # the summary says how to go on
        return 0
    if result.status == "interrupted":
        return cli.interrupted_status()
    return 0 if result.succeeded and result.best is not None else 1  # non-zero when no trial succeeded


if __name__ == "__main__":
    sys.exit(main())
