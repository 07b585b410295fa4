"""An experiment of tuning.compare: its declaration (``EXPERIMENT = Experiment(...)`` in
experiments/<name>.py, data a person reads at a glance), loaded and checked before anything runs or
is written: its strategies, peers and tasks known, and over several objectives a reference point of
one value per objective (tuning/report/mocompare.py). ``from tuning.compare import Experiment`` is
this class.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
from dataclasses import dataclass, field
from pathlib import Path

from tuning import cli, objectives, provenance, results, spaces
from tuning.compare import mobench, peers, recorded as replay
from tuning.cli import UsageError
from tuning.report import mocompare


@dataclass(frozen=True)
class Experiment:
    space: str  # a module under search_spaces/ (its trainer is the benchmark), or "replay:DIR" (tuning/compare/recorded.py)
    budget: float  # per strategy run, in full evaluations (full trainings' worth of epochs)
    seeds: tuple = tuple(range(10))
    strategies: tuple = spaces.STRATEGIES
    max_epochs: int | None = None  # the space's unless set
    smoke: dict = field(default_factory=dict)  # overrides under --smoke: budget, seeds, max_epochs, warm_budget, tasks
    description: str = ""
    # A strategy named "<strategy>+warm" runs warm-started (tuning.run --warm-start) from an earlier
    # run of warm_from["strategy"] given warm_from["budget"] full evaluations, on seed + "seed_offset".
    warm_from: dict | None = None
    reference: str = "random"  # what the report's targets, speed-ups and tests compare against
    # Run in process beside the strategies (tuning/compare/peers.py), so every report shows how the service
    # stands against what a user would pick instead; peers=() for none.
    peers: tuple = peers.PEERS
    # Benchmarks (tuning.compare.benchmarks names) to run the space over, each task its own comparison in
    # <out>/<task>/ and a summary across them (tuning/report/tasks.py); () for the space's trainer.
    tasks: tuple = ()
    # Several objectives (tuning/report/mocompare.py): the point each run's hypervolume is measured
    # against, one value per objective in the space's order; with tasks, a dict of task -> point.
    reference_point: tuple | dict | None = None


# The checkout's experiments, found by name from any working folder (a source checkout or an editable
# install; a wheel has none, and then only a path to the file finds one).
SHIPPED = Path(__file__).resolve().parents[2] / "experiments"


def load_experiment(path: str) -> tuple[str, Experiment]:
    if not path.strip():  # it read "no experiment at .py"
        raise UsageError("the experiment '' names none: give experiments/NAME or a .py file that defines EXPERIMENT")
    file = Path(path if path.endswith(".py") else f"{path}.py")
    if not file.is_file() and file.parent in (Path("."), Path("experiments")) and (SHIPPED / file.name).is_file():
        file = SHIPPED / file.name  # experiments/zdt run from outside the checkout
    if not file.is_file():
        names = sorted(p.stem for p in SHIPPED.glob("*.py") if not p.stem.startswith("_"))
        known = f"available are {', '.join('experiments/' + n for n in names)}" if names else \
            "give the path of a file that defines EXPERIMENT = Experiment(...)"
        raise UsageError(f"no experiment at {file}: {known}")
    spec = importlib.util.spec_from_file_location(f"experiments.{file.stem}", file)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # a broken declaration is bad input, not a crash
        raise UsageError(f"{file} does not load: {type(exc).__name__}: {exc}") from None
    exp = getattr(module, "EXPERIMENT", None)
    if not isinstance(exp, Experiment):
        raise UsageError(f"{file} defines no EXPERIMENT = Experiment(...)")
    exp = _checked_fields(exp, file)
    unknown = [s for s in exp.strategies if s.removesuffix("+warm") not in spaces.STRATEGIES]
    if unknown:
        raise UsageError(f"{file}: strategy {unknown[0]!r} unknown: use any of {', '.join(spaces.STRATEGIES)}"
                         " (or one of them + '+warm', with warm_from)")
    if any(s.endswith("+warm") for s in exp.strategies):
        warm = exp.warm_from if isinstance(exp.warm_from, dict) else {}
        if warm.get("strategy") not in spaces.STRATEGIES or not _positive(warm.get("budget")):
            raise UsageError(f"{file}: a '+warm' strategy needs warm_from={{'strategy': ..., 'budget': ...}}: a "
                             f"strategy of {', '.join(spaces.STRATEGIES)} and a positive budget, got {exp.warm_from!r}")
    try:
        space, _ = space_of(exp.space)
    except cli.TuningError as exc:  # an unknown space, a folder that is not a finished run
        raise UsageError(f"{file}: space/benchmark {exp.space!r}: {exc}") from None
    multi = objectives.multi(space)
    if multi and "median" in exp.strategies:  # the median rule ranks by one metric (tuning.run refuses it too)
        if exp.strategies != spaces.STRATEGIES:
            raise UsageError(f"{file}: strategy 'median' ranks trials by one metric, and this space has several "
                             "objectives or constraints: drop it from strategies= (asha is MO-ASHA)")
        exp = dataclasses.replace(exp, strategies=tuple(s for s in exp.strategies if s != "median"))
    exp = dataclasses.replace(exp, peers=peers.declared(exp.peers, space))
    known = peers.MO_PEERS if multi else peers.PEERS
    unknown = [p for p in exp.peers if p not in known]
    if unknown:
        raise UsageError(f"{file}: peer {unknown[0]!r} unknown for a space of "
                         f"{'several objectives' if multi else 'one metric'}: use any of {', '.join(known)}"
                         " (or peers=() for none)")
    if exp.reference not in (*exp.strategies, *exp.peers):
        raise UsageError(f"{file}: reference={exp.reference!r} is not one of its strategies or peers "
                         f"({', '.join((*exp.strategies, *exp.peers))}): the report compares every row against it")
    if exp.reference_point is not None and not multi:
        raise UsageError(f"{file}: reference_point= is for hypervolume over several objectives, and {exp.space} "
                         f"optimises one metric ({space.metric}): drop it")
    if multi and isinstance(exp.reference_point, dict) and not exp.tasks and \
            set(exp.reference_point) == set(objectives.of(space)):  # by objective, as Space takes it
        exp = dataclasses.replace(exp, reference_point=tuple(exp.reference_point[k] for k in objectives.of(space)))
    if multi:  # hypervolume against the declared reference point, per task where there are tasks
        for task in exp.tasks or (None,):
            try:
                mocompare.check_reference(reference_of(exp, task, space), objectives.of(space),
                                          f"{file}" + (f", task {task}" if task else ""))
            except ValueError as exc:
                raise UsageError(str(exc)) from None
    check_tasks(exp.tasks, f"{file}: tasks")
    return file.stem, exp


def _positive(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


def _checked_fields(exp: Experiment, file: Path) -> Experiment:
    """The fields' types and values, each wrong one in one line before anything runs; seeds as a
    tuple of ints, a space file relative to the experiment's folder where it is not to this one's."""
    if not isinstance(exp.space, str):
        raise UsageError(f"{file}: space= takes a space's name or the path of a .py file that defines SPACE = "
                         f"Space(...), as tuning.run --space does, got a {type(exp.space).__name__}")
    if not _positive(exp.budget):
        raise UsageError(f"{file}: budget={exp.budget!r}: give the full evaluations per strategy run as a positive "
                         "number, e.g. budget=20")
    for name in ("strategies", "seeds", "tasks", "peers"):
        value = getattr(exp, name)
        if isinstance(value, (str, int)) or not hasattr(value, "__iter__"):
            raise UsageError(f"{file}: {name}={value!r}: give a tuple, e.g. "
                             + {"strategies": "strategies=('random', 'asha')", "seeds": "seeds=(0, 1) or "
                                "tuple(range(10))", "tasks": "tasks=('lcbench_3945',)", "peers": "peers=()"}[name])
    seeds = tuple(exp.seeds)
    bad = [s for s in seeds if not spaces.whole(s) or s < 0]
    if not seeds or bad:
        raise UsageError(f"{file}: seeds={exp.seeds!r}: give one or more whole numbers of 0 or more"
                         + (f" ({bad[0]!r} is not)" if bad else ""))
    for name in ("seeds", "strategies"):
        values = list(seeds if name == "seeds" else exp.strategies)
        twice = next((v for i, v in enumerate(values) if v in values[:i]), None)
        if twice is not None:  # each run is one file named by strategy and seed: it would be counted twice
            raise UsageError(f"{file}: {name} names {twice!r} twice: list each once")
    if exp.max_epochs is not None and (not spaces.whole(exp.max_epochs) or exp.max_epochs < 1):
        raise UsageError(f"{file}: max_epochs={exp.max_epochs!r}: give a whole number of 1 or more, or leave it "
                         "out for the space's own")
    space = exp.space
    if space.endswith(".py") and not Path(space).is_absolute() and not Path(space).is_file() and \
            (file.parent / space).is_file():
        space = str((file.parent / space).resolve())
    return dataclasses.replace(exp, space=space, seeds=tuple(int(s) for s in seeds), strategies=tuple(exp.strategies),
                               tasks=tuple(exp.tasks), peers=tuple(exp.peers))


def reference_of(exp: Experiment, task: str | None, space: spaces.Space):
    """The reference point the experiment declares for a task (or for its space's trainer); where it
    declares none, the space's own (Space(reference_point=...)), one point for every task."""
    point = exp.reference_point
    point = point.get(task) if isinstance(point, dict) else point
    if point is None and space.reference_point:
        point = tuple(space.reference_point.values())
    return point


def trainer_of(task: str) -> str:
    """A task's trainer: a benchmark's name, or a multi-objective one's "tuning.mobench:<name>"."""
    return mobench.PREFIX + task if task in mobench.MO_BENCHMARKS else task


def check_tasks(tasks, what: str) -> None:
    from tuning.compare.benchmarks import BENCHMARKS

    unknown = [t for t in tasks if t not in BENCHMARKS and t not in mobench.MO_BENCHMARKS]
    if unknown:  # held-out tasks are never registered (tuning/compare/realbench.py), so they are refused here
        raise UsageError(f"{what}: {unknown[0]!r} is no benchmark: use names from tuning.compare.benchmarks, e.g. "
                         "lcbench_3945 (LCBench's development tasks only), hpobench_car, fcnet_naval_propulsion")


def replay_experiment(folder: str) -> tuple[str, Experiment]:
    """--replay DIR: every strategy over the run recorded in DIR, 10 seeds, at its recorded epochs,
    each run given one grid's worth of its declaration (what a grid search would have cost)."""
    space, _ = space_of(replay.PREFIX + folder, "--replay")
    return f"replay-{Path(folder).resolve().name}", Experiment(
        space=replay.PREFIX + folder, budget=spaces.grid_size(space),
        # Smoke: 4 epochs (rungs 1, 2, 4 at reduction factor 2), 2 seeds, 4 full evaluations.
        smoke={"budget": 4, "seeds": 2, "max_epochs": min(4, space.max_epochs)},
        description=f"The learning curves recorded in {provenance.portable(folder)} ({space.metric}, "
                    f"{space.mode}imised; {', '.join(space.params)}), replayed: what each strategy would have "
                    "found, and at what cost.")


def space_of(name: str, what: str = "") -> tuple[spaces.Space, replay.Recorded | None]:
    """(the space, the recorded run where it is a replay): a space by name, or "replay:DIR"."""
    if not replay.is_replay(name):
        return spaces.load(name), None
    recorded = replay.read(replay.folder_of(name), what)
    return replay.space(recorded), recorded


def several_fields(exp: Experiment, space: spaces.Space, task: str | None) -> dict:
    """experiment.json's fields for several objectives: what the hypervolume report reads."""
    point = mocompare.check_reference(reference_of(exp, task, space), objectives.of(space), exp.space)
    bench = mobench.name_of(space.trainer)
    return {"objectives": objectives.of(space), "constraints": space.constraints, "reference_point": list(point),
            "true_hypervolume": mobench.true_hypervolume(bench, point) if bench else None}


def table_experiment(space: str, tasks: tuple, description: str):
    """A table's two-objective experiment (experiments/mo_hpobench.py, mo_fcnet.py): single fidelity,
    so 100 evaluations and only the strategies with a model beside random search (asha and
    hyperband would be random search), each task's reference point from mo_reference.json (each
    objective's 90th percentile over the table), 10 seeds."""
    return Experiment(space=space, budget=100, seeds=tuple(range(10)), strategies=("random", "bohb", "adaptive", "tpe"),
                      tasks=tasks, reference_point={t: mobench.reference(t) for t in tasks},
                      smoke={"budget": 6, "seeds": 1, "tasks": 1}, description=description)


# The columns tuning.compare writes in runs.csv for every result: a parameter of the same name would overwrite one.
ROW_COLUMNS = ("benchmark", "strategy", "seed", "run_id", "trial_id", "training_iteration", "loss", "full_fidelity",
               "consumed_budget", "wall_s", "device_hours", "epoch", "accuracy", "recorded_trial")


def check_out(out: Path, exp: Experiment, space: spaces.Space, *, max_t: int, budget: float, smoke: bool) -> None:
    """Before anything is written: the output folder can be made, and the finished runs it keeps
    were made by this comparison (runs of another space, max_t or budget would be reported as
    this one's), and no parameter takes the name of a column every result row has."""
    clash = [p for p in space.params if p in ROW_COLUMNS or p == space.metric]
    if clash:
        raise UsageError(f"parameter {clash[0]!r} has the name of a column runs.csv has for every result: name it "
                         f"otherwise in the space and the trainer (e.g. {clash[0]}_fn) to compare it")
    before = out / "experiment.json"
    if out.is_dir() and not before.is_file() and not (out / "runs").is_dir() and any(out.iterdir()):
        # A comparison writes its report, runs.csv and the rest there: another run's would be overwritten.
        raise UsageError(f"--out {out} already holds other files ({', '.join(sorted(p.name for p in out.iterdir())[:4])}"
                         f"{', ...' if len(list(out.iterdir())) > 4 else ''}) and no comparison: give a new or empty "
                         "folder")
    if before.is_file():
        try:
            old = results.read_json(before)
        except results.ReadError as exc:
            raise UsageError(f"--out {out}: {exc}: give another --out") from None
        now = {"space": provenance.portable(exp.space), "metric": space.metric, "mode": space.mode,
               "params": list(space.params), "max_t": max_t, "budget": budget, "smoke": smoke,
               # as experiment.json holds them (JSON): a run of other objectives or bounds is another comparison
               **json.loads(json.dumps({"objectives": objectives.of(space), "constraints": space.constraints},
                                       default=results.plain_json))}
        # A space file by its name: the path recorded is relative to wherever the comparison ran from.
        same = {"space": lambda a, b: a == b or (str(a).endswith(".py") and Path(a).name == Path(b).name)}
        differ = [f"{k} {_said(old[k])} there, {_said(v)} now" for k, v in now.items()
                  if k in old and not same.get(k, lambda a, b: a == b)(old[k], v)]
        differ += _searched_differ(old.get("searched"), searched(space))
        if differ:
            raise UsageError(f"--out {out} holds the runs of another comparison ({'; '.join(differ)}): give another "
                             "--out, or the same settings to go on with it")
    try:
        (out / "runs").mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--out {out}: cannot make the folder there ({exc.strerror or exc}): give a folder you "
                         "can write") from None


def searched(space: spaces.Space) -> dict:
    """What a comparison's runs searched beyond experiment.json's other fields, as JSON keeps it:
    each parameter's declaration, the brackets' first rung and rate, the fixed arguments."""
    from tuning import spacejson

    return json.loads(json.dumps({"params": spacejson.declarations(space), "grace_period": space.grace_period,
                                  "reduction_factor": space.reduction_factor, "fixed": space.fixed},
                                 default=results.plain_json))


def _searched_differ(old: dict | None, now: dict) -> list[str]:
    """What changed in the space since the kept runs (a range widened, a rate): once kept silently,
    their results were reported beside the new ones'. None: runs kept before this was recorded."""
    if old is None:
        return []
    said = [f"parameter {k} {_declared(old['params'].get(k))} there, {_declared(v)} now"
            for k, v in now["params"].items() if k in old["params"] and old["params"][k] != v]
    return said + [f"{k} {_said(old[k])} there, {_said(now[k])} now" for k in ("grace_period", "reduction_factor",
                                                                              "fixed") if old.get(k) != now[k]]


def _declared(d: dict) -> str:
    return f"{d['type']}({', '.join(f'{k}={v!r}' for k, v in d.items() if k != 'type')})"


def _said(value) -> str:
    # JSON keeps a budget of 6.0 as 6: a float with an integer's value reads as one, so "budget 6 there, 9 now".
    return repr(int(value)) if isinstance(value, float) and value.is_integer() else repr(value)
