"""An experiment of tuning.compare: its declaration (``EXPERIMENT = Experiment(...)`` in
experiments/<name>.py, data a person reads at a glance), loaded and checked before anything runs or
is written: its strategies, peers and tasks known, and over several objectives a reference point of
one value per objective (tuning/report/mocompare.py). ``from tuning.compare import Experiment`` is
this class.
"""

from __future__ import annotations

import dataclasses
import importlib.util
from dataclasses import dataclass, field
from pathlib import Path

from tuning import cli, objectives, provenance, spaces
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
    unknown = [s for s in exp.strategies if s.removesuffix("+warm") not in spaces.STRATEGIES]
    if unknown:
        raise UsageError(f"{file}: strategy {unknown[0]!r} unknown: use any of {', '.join(spaces.STRATEGIES)}"
                         " (or one of them + '+warm', with warm_from)")
    if any(s.endswith("+warm") for s in exp.strategies) and not exp.warm_from:
        raise UsageError(f"{file}: a '+warm' strategy needs warm_from={{'strategy': ..., 'budget': ...}}")
    try:
        space, _ = space_of(exp.space)
    except cli.TuningError as exc:  # an unknown space, a folder that is not a finished run
        raise UsageError(f"{file}: space/benchmark {exp.space!r}: {exc}") from None
    multi = objectives.multi(space)
    exp = dataclasses.replace(exp, peers=peers.declared(exp.peers, space))
    known = peers.MO_PEERS if multi else peers.PEERS
    unknown = [p for p in exp.peers if p not in known]
    if unknown:
        raise UsageError(f"{file}: peer {unknown[0]!r} unknown for a space of "
                         f"{'several objectives' if multi else 'one metric'}: use any of {', '.join(known)}"
                         " (or peers=() for none)")
    if multi:  # hypervolume against the declared reference point, per task where there are tasks
        for task in exp.tasks or (None,):
            try:
                mocompare.check_reference(reference_of(exp, task, space), objectives.of(space),
                                          f"{file}" + (f", task {task}" if task else ""))
            except ValueError as exc:
                raise UsageError(str(exc)) from None
    if not exp.seeds or exp.budget <= 0:
        raise UsageError(f"{file}: an experiment needs at least one seed and a positive budget")
    check_tasks(exp.tasks, f"{file}: tasks")
    return file.stem, exp


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
