"""The Space declaration, its checks, its grids, and the registry of spaces under search_spaces/.

A parameter (tuning.params) declares its distribution once. The same declaration gives grid points (grid search,
walked lazily by tuning.backend), a ConfigSpace space (BOHB), and, in tuning.backend.strategies,
Tune distributions (random search, ASHA), so the strategies being compared cannot drift apart.
This module is plain data: no Ray. Spaces themselves are modules under ``search_spaces/`` that
define ``SPACE``.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import functools
import importlib
import importlib.util
import inspect
import math
import pkgutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Union

from tuning import conditions, objectives as objective_rules
from tuning.cli import TuningError
# The parameter types are imported from here by every space file and user (their public home).
from tuning.params import (  # noqa: F401
    _NAMES, PARAM_TYPES, Choice, IntLogUniform, IntUniform, LogUniform, Param, SpaceError, Uniform, contains,
    to_positions)
# A value as the tables keep it, and a choice by position: also here, beside the Space that uses them.
from tuning.params import from_positions, plain, whole  # noqa: F401

# tpe: Optuna's TPE sampler under asynchronous Hyperband brackets, as Optuna's own pruner, the
# model users would otherwise leave for, so every comparison has it as a reference.
# adaptive: BOHB whose brackets and model follow how well each rung ranks like the top
# (tuning/backend/adaptive.py).
# median: random search under Tune's MedianStoppingRule (Google Vizier's), what users of Optuna's
# MedianPruner and Tune's rule reach for.
STRATEGIES = ("grid", "random", "asha", "median", "hyperband", "bohb", "adaptive", "tpe")
# A space that names no strategy: the one the comparisons favour for its trainer, chosen when the
# run starts (tuning.inputs.auto_strategy; docs/strategies.md, "Which strategy").
AUTO = "auto"
# Optuna's and Ray Tune's words for a Space's keywords: a migrating user's first guess.
_OTHER_NAMES = {"direction": "mode='min' or mode='max'", "directions": "objectives={'loss': 'min', ...}",
                "sampler": "strategy=", "pruner": "strategy=", "scheduler": "strategy=", "search_alg": "strategy=",
                "n_trials": "num_samples=", "stop": "max_epochs=", "config": "params=", "param_space": "params=",
                "resources_per_trial": "cpus_per_trial= and gpus_per_trial=",
                "timeout": "the run a time budget instead (tuning.search(time_budget=...), --time-budget)"}


@dataclass(frozen=True)
class Space:
    """Everything a tuning run needs to know besides the flags that override it."""

    params: dict[str, Param]
    strategy: str = AUTO
    metric: str = "loss"
    mode: str = "min"
    num_samples: int = 16  # trials for random, ASHA and BOHB
    grid_repeats: int = 1  # grid search: how many times the whole grid is run
    # random, ASHA, median: these parameters walk their grid points (a declaration's grid=, a
    # choice's values) and the rest are sampled, num_samples trials per grid point (mixed_grid).
    grid: tuple = ()
    max_epochs: int = 10
    grace_period: int = 1  # ASHA/HyperBand: the first rung, in epochs
    reduction_factor: int = 2  # ASHA/HyperBand: keep the best 1/rf at each rung
    cpus_per_trial: float = 1
    gpus_per_trial: float | str = "auto"  # "auto": one GPU per trial where the cluster has GPUs
    workers_per_trial: int = 1  # CPU trials: DDP ranks (gloo) per trial; GPU trials use one per GPU
    fixed: dict[str, Any] = field(default_factory=dict)  # passed to the trainer, never searched
    # "cifar", a synthetic benchmark from tuning.compare.benchmarks, or your own trainer: a function, or
    # "module:function" (the contract: tuning.contract, docs/your-trainer.md).
    trainer: Union[str, Callable] = "cifar"
    # What a trial whose metric turns NaN/inf reports instead, worse than any real result: 1e6
    # when minimising, -1e6 when maximising (None), or a value of your own.
    diverged_value: float | None = None
    seed: int = 0
    name: str = ""
    # Several objectives, each with its direction, and bounds on reported metrics (tuning.objectives,
    # docs/multi-objective.md): objectives={"loss": "min", "latency_ms": "min"},
    # constraints={"peak_mem_gb": ("<=", 4)}. metric and mode then name the first objective.
    objectives: dict | None = None
    constraints: dict = field(default_factory=dict)
    # The point hypervolume is measured from in the run's report and MLflow (docs/results.md): one
    # value per objective, worse than any result you care about; None: derived from the results.
    reference_point: dict | list | None = None

    def __new__(cls, *args, **kwargs):
        # Before the dataclass's __init__, whose TypeError ("unexpected keyword argument") names no fix.
        unknown = [k for k in kwargs if k not in cls.__dataclass_fields__]
        if unknown:
            ours = _OTHER_NAMES.get(unknown[0]) or next((f"{k}=" for k in difflib.get_close_matches(
                unknown[0], cls.__dataclass_fields__, 1)), None)
            raise SpaceError(f"Space() takes no {unknown[0]}=" + (f": give {ours}" if ours else
                             f"; its keywords are {', '.join(cls.__dataclass_fields__)}"))
        return super().__new__(cls)

    def __post_init__(self):
        if not isinstance(self.params, dict):  # a list of declarations has no names to give the trainer
            raise SpaceError(f"params= takes a dict from each parameter's name to its declaration, like "
                             f"params={{'lr': LogUniform(1e-4, 1e-1)}}, got a {type(self.params).__name__}")
        if self.strategy not in (*STRATEGIES, AUTO):
            raise SpaceError(f"strategy {self.strategy!r} unknown: use one of {', '.join(STRATEGIES)}, or {AUTO!r}")
        try:
            declared = objective_rules.declare(self.metric, self.mode, self.objectives, self.constraints)
        except ValueError as exc:
            raise SpaceError(str(exc)) from None
        for name, value in zip(("metric", "mode", "objectives", "constraints"), declared):
            object.__setattr__(self, name, value)
        try:
            object.__setattr__(self, "reference_point",
                               objective_rules.reference_point(self.reference_point, self.objectives))
        except ValueError as exc:
            raise SpaceError(str(exc)) from None
        if not self.params:
            raise SpaceError("a space needs at least one parameter")
        for name, low in (("num_samples", 1), ("grid_repeats", 1), ("max_epochs", 1), ("grace_period", 1),
                          ("reduction_factor", 2), ("workers_per_trial", 1), ("seed", 0)):
            value = getattr(self, name)
            if not whole(value) or value < low:
                raise SpaceError(f"{name}={value!r}: give a whole number of at least {low}")
            object.__setattr__(self, name, int(value))
        for key, p in self.params.items():
            if type(p).__module__.startswith("ray.tune"):  # a quantised one breaks TuneBOHB (ConfigSpace 1.x)
                q = hasattr(p, "get_sampler") and getattr(p.get_sampler(), "q", None) is not None
                raise SpaceError(f"parameter {key!r} is a Ray Tune distribution: declare it with {_NAMES} from "
                                 "tuning.spaces, so every strategy shares it" + ("; quantised ones (q=...) are not "
                                 "offered (Ray issue #46995): IntUniform or Choice take discrete values" if q else ""))
            if isinstance(p, dict) and set(p) == {"grid_search"}:  # tune.grid_search([...])
                raise SpaceError(f"parameter {key!r} is Ray Tune's grid_search: declare Choice([...]) and run "
                                 "strategy='grid', which walks every value of every Choice")
            if not isinstance(p, tuple(PARAM_TYPES.values())):
                raise SpaceError(f"parameter {key!r} is a {type(p).__name__}: declare it with {_NAMES} from tuning")
        if not callable(self.trainer) and not isinstance(self.trainer, str):
            raise SpaceError(f"trainer must be a function, 'module:function', 'cifar' or a benchmark name, "
                             f"got {self.trainer!r}")
        if self.trainer != "cifar":  # the default: tuning.search(train, space) may yet give one
            check_reported(self)
        clash = set(self.params) & set(self.fixed)
        if clash:
            raise SpaceError(f"{sorted(clash)} are both searched and fixed: keep each in one place")
        for name in objective_rules.required(self):  # a reported metric and a parameter share the tables' columns
            if name in objective_rules.RESERVED_KEYS:
                raise SpaceError(f"metric {name!r} has the name of a field Ray Tune or tuning fills in on every result "
                                 f"(it is renamed {name}_reported): report it as, say, val_{name}")
            if name in objective_rules.TABLE_COLUMNS:
                raise SpaceError(f"metric {name!r} has the name of a column the trials table has for itself "
                                 f"({', '.join(sorted(objective_rules.TABLE_COLUMNS))}): report it as, say, "
                                 f"{name}_rate or val_{name}")
            if name in self.params or name in self.fixed:
                what = "searched" if name in self.params else "fixed"
                hint = (f"a bound on a parameter is its declaration's range: narrow {name!r} instead"
                        if name in self.constraints else "report the metric under another name")
                raise SpaceError(f"{name!r} is both a {what} parameter and a metric the space "
                                 f"{'bounds' if name in self.constraints else 'optimises'}: {hint}")
        problem = conditions.problem(self.params, self.fixed, contains)
        if problem:
            raise SpaceError(problem)
        object.__setattr__(self, "grid", _mixed_grid_names(self.grid, self.params))

    def replace(self, **changes) -> "Space":
        return dataclasses.replace(self, **changes)

    @property
    def worst(self) -> float:
        """What a diverged trial reports: worse than any real result under the space's mode."""
        if self.diverged_value is not None:
            return self.diverged_value
        return 1e6 if self.mode == "min" else -1e6


# Space's keywords as the dataclass declares them: __new__'s (*args, **kwargs) hid them from help() and inspect.
Space.__signature__ = inspect.signature(Space.__init__).replace(
    parameters=list(inspect.signature(Space.__init__).parameters.values())[1:])

# The CIFAR trainer's keywords a space may search or fix (tuning.trial.trainer.train_cifar; its epochs,
# data, device, state, on_epoch, seed and DDP rank tuning passes itself).
CIFAR_PARAMS = {"lr", "batch_size", "weight_decay", "width", "depth", "optimizer", "momentum", "nesterov",
                "label_smoothing", "augment", "precision", "max_steps"}

# What the CIFAR trainer reports every epoch, on any device (tuning.trial.trainer.train_cifar; the CUDA
# memory figures only on a GPU, so a bound on them is left to a trainer of your own).
CIFAR_METRICS = {"loss", "accuracy", "train_loss", "latency_ms", "num_params", "train_time_s", "eval_time_s",
                 "images_per_s", "rss_mb", "peak_rss_mb"}


def trainer_name(trainer) -> str:
    """How a run records its trainer: "cifar", a benchmark, or "module:function"."""
    if callable(trainer):  # a functools.partial or a callable object by what it calls: neither has a __qualname__
        inner = trainer.func if isinstance(trainer, functools.partial) else trainer
        named = inner if hasattr(inner, "__qualname__") else type(inner)
        # exec'd without __name__, a function's module is None (it read "builtins"): the caller's own, as a script's
        module = getattr(named, "__module__", None) or ("__main__" if named is inner else type(inner).__module__)
        return f"{module}:{named.__qualname__}"
    return trainer


def check_reported(space: Space) -> None:
    """Every metric the space names (objectives, constraints) is one its trainer reports, where
    that is known before a run: the built-in CIFAR trainer's and a benchmark's."""
    reported = trainer_metrics(space.trainer)
    for name in objective_rules.required(space) if reported is not None else ():
        if name not in reported:
            what = ("metric" if name == space.metric and not space.objectives else "objective"
                    if name in objective_rules.of(space) else "constrained metric")
            raise SpaceError(f"{what} {name!r} is never reported by the {space.trainer} trainer: "
                             f"use one of {', '.join(sorted(reported))}")


def trainer_metrics(trainer) -> set[str] | None:
    """The metrics a trainer reports (None: a user's trainer, which only its runs can tell)."""
    if callable(trainer):
        return None
    if trainer == "cifar":
        return CIFAR_METRICS
    if trainer.startswith("replay:"):  # a finished run's recorded curves (tuning/compare/recorded.py): what it recorded
        from tuning import record

        try:
            return set(record.reported_metrics(Path(trainer[len("replay:"):]), f"trainer {trainer}"))
        except TuningError as exc:
            raise SpaceError(str(exc)) from None
    from tuning.compare import mobench

    if mobench.name_of(trainer):  # a multi-objective benchmark (tuning.mobench:zdt1)
        return mobench.MO_BENCHMARKS[mobench.name_of(trainer)].reports
    if ":" in trainer:
        module, _, function = trainer.partition(":")
        try:
            getattr(importlib.import_module(module), function)
        except (ImportError, AttributeError) as exc:
            raise SpaceError(f"trainer {trainer!r} cannot be imported ({exc}): give it as "
                             "'module:function' importable from where you run") from None
        return None
    from tuning.compare.benchmarks import BENCHMARKS

    if trainer not in BENCHMARKS:
        raise SpaceError(f"trainer {trainer!r} unknown: use 'cifar', one of {', '.join(BENCHMARKS)}, "
                         "or 'module:function'")
    return {"loss"}


# Beyond this a grid is more trials than one run should hold: Tune keeps every trial it creates in
# memory and in each experiment snapshot.
MAX_GRID_TRIALS = 100_000


def never_on_the_grid(space: Space) -> list[str]:
    """A line for each parameter whose condition names a parent value the parent's grid points miss
    (when={'n': 8} over IntLogUniform(1, 64)'s 1, 4, 16, 64): grid search never runs it."""
    out = []
    for name, p in space.params.items():
        for parent, values in (p.when or {}).items():
            points = space.params[parent].grid_values()
            if not any(v in points for v in values):
                out.append(f"{name} is never active under grid search: its condition {parent} in {list(values)} "
                           f"holds at none of {parent}'s grid points {points}; give {parent} grid points that "
                           "include it (grid=...), or search at random")
    return out


def check_grid(space: Space, repeats: int) -> int:
    total = grid_size(space) * repeats
    if total > MAX_GRID_TRIALS:
        sizes = " x ".join(str(len(p.grid_values())) for p in space.params.values())
        if conditions.is_conditional(space.params):
            sizes = f"{grid_size(space):,} valid combinations of {sizes}"
        raise SpaceError(f"grid of {sizes} points x {repeats} repeats = {total:,} trials is too large to run "
                         f"(limit {MAX_GRID_TRIALS:,}): declare fewer grid points (grid=...) or use random search")
    return total


# ---------------------------------------------------------------- a grid over some parameters

# Where grid= maps: Tune's grid_search inside a sampled config, num_samples per grid point. The model
# strategies propose whole configurations, and Hyperband's brackets would give grid points unequal
# budgets, so neither can hold some parameters to a grid.
MIXED_GRID_STRATEGIES = ("random", "asha", "median")


def _mixed_grid_names(names, params: dict) -> tuple:
    """Space.grid checked: a list of searched, unconditional parameter names, as a tuple."""
    if isinstance(names, str) or not isinstance(names, (list, tuple)):
        raise SpaceError(f"grid= takes a list of parameter names, got {names!r}: e.g. grid=['batch_size']")
    for name in names:
        if name not in params:
            raise SpaceError(f"grid= names {name!r}, which is not a searched parameter: use some of "
                             f"{', '.join(params)}")
        if params[name].when:
            raise SpaceError(f"grid= names {name!r}, which exists only under when=: a grid point would not exist "
                             "in every trial; put its parent on the grid instead, or sample it")
    return tuple(dict.fromkeys(names))


def mixed_grid_size(space: Space) -> int:
    """Grid points of the parameters Space.grid names (1 where it names none)."""
    return math.prod(len(space.params[k].grid_values()) for k in space.grid)


def check_mixed_grid(space: Space, strategy: str, num_samples: int) -> None:
    """A grid over some parameters runs under random, asha and median (grid search walks every
    parameter anyway); elsewhere, or too large to run, one line saying what to use."""
    if not space.grid or strategy == "grid":
        return
    named = ", ".join(space.grid)
    if strategy not in MIXED_GRID_STRATEGIES:
        raise SpaceError(f"grid={list(space.grid)} (a grid over {named}, the rest sampled) runs under random, asha "
                         f"or median: {strategy} proposes every parameter itself; drop grid= or use --strategy "
                         "random, asha or median")
    total = mixed_grid_size(space) * num_samples
    if total > MAX_GRID_TRIALS:
        raise SpaceError(f"grid over {named}: {mixed_grid_size(space):,} points x {num_samples} samples = {total:,} "
                         f"trials is too many to run (limit {MAX_GRID_TRIALS:,}): declare fewer grid points "
                         "(grid=...) or sample more parameters")


def _duplicate_keys(folder: Path, name: str, filename: str) -> None:
    """A dict literal keeps the last of two equal keys without a word; in a space that silently
    drops a parameter's declaration, so refuse it. Checks the space file and the shared
    search_spaces modules it imports."""
    try:
        tree = ast.parse((folder / f"{name}.py").read_text(), filename)
    except SyntaxError as exc:
        raise SpaceError(f"{filename} line {exc.lineno}: syntax error: {exc.msg}") from None
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("search_spaces."):
            shared = node.module.split(".", 1)[1]
            if shared != name and (folder / f"{shared}.py").exists():
                _duplicate_keys(folder, shared, f"search_spaces/{shared}.py")
        if isinstance(node, ast.Dict):
            seen = set()
            for key in node.keys:
                if isinstance(key, ast.Constant):
                    if key.value in seen:
                        raise SpaceError(f"{filename} line {key.lineno}: parameter {key.value!r} is declared "
                                         "twice: keep one declaration")
                    seen.add(key.value)


# ---------------------------------------------------------------- compilation

def grid_points(space: Space) -> dict[str, list]:
    """Every parameter's grid points, for grid search (tuning.backend walks them lazily)."""
    return {k: p.grid_values() for k, p in space.params.items()}


def grid_size(space: Space) -> int:
    """How many configurations grid search runs: the valid combinations only (conditions.grid)."""
    return conditions.grid_size(space.params, grid_points(space))


def active(space: Space, config: dict) -> set[str]:
    return conditions.active(space.params, config)


def drop_inactive(space: Space, config: dict) -> dict:
    return conditions.drop_inactive(space.params, config)


# ---------------------------------------------------------------- the registry

def available() -> list[str]:
    import search_spaces

    return sorted(m.name for m in pkgutil.iter_modules(search_spaces.__path__) if not m.name.startswith("_"))


def load(name: str) -> Space:
    """A space by name (a module under search_spaces/) or by path to a .py file of your own."""
    if name.endswith(".py"):
        path = Path(name).absolute()
        if not path.is_file():
            raise SpaceError(f"no space file at {path}: give a .py file that defines SPACE = Space(...)")
        folder, stem, label = path.parent, path.stem, str(path)
    else:
        names = available()
        if name not in names:
            raise SpaceError(f"unknown space {name!r}: available spaces are {', '.join(names)} "
                             "(or give a path to a .py file)")
        import search_spaces

        folder, stem, label = Path(search_spaces.__path__[0]), name, f"search_spaces/{name}.py"
    _duplicate_keys(folder, stem, label)
    try:
        if name.endswith(".py"):
            spec = importlib.util.spec_from_file_location(f"_space_{stem}", path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        else:
            module = importlib.import_module(f"search_spaces.{name}")
    except SpaceError as exc:
        raise SpaceError(f"{label}: {exc}") from None
    except Exception as exc:  # a typo in a space file is bad input too, not a crash
        raise SpaceError(f"{label} does not load: {type(exc).__name__}: {exc}") from None
    space = getattr(module, "SPACE", None)
    if not isinstance(space, Space):
        raise SpaceError(f"{label} defines no SPACE = Space(...)")
    return space.replace(name=name if not name.endswith(".py") else str(path))
