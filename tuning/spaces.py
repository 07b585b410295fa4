"""Search-space declarations, and their compilation to what each search strategy consumes.

A parameter declares its distribution once. The same declaration gives grid points (grid search,
walked lazily by tuning.backend), a ConfigSpace space (BOHB), and, in tuning.backend.strategies,
Tune distributions (random search, ASHA), so the strategies being compared cannot drift apart.
This module is plain data: no Ray. Spaces themselves are modules under ``search_spaces/`` that
define ``SPACE``.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import importlib.util
import json
import math
import pkgutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Union

import numpy as np

from tuning import conditions, objectives as objective_rules
from tuning.cli import TuningError

# tpe: Optuna's TPE sampler under the same Hyperband brackets as hyperband and bohb, the model
# users would otherwise leave for, so every comparison has it as a reference.
# adaptive: BOHB whose brackets and model follow how well each rung ranks like the top
# (tuning/backend/adaptive.py).
# median: random search under Tune's MedianStoppingRule (Google Vizier's), what users of Optuna's
# MedianPruner and Tune's rule reach for.
STRATEGIES = ("grid", "random", "asha", "median", "hyperband", "bohb", "adaptive", "tpe")


class SpaceError(TuningError):
    """A space is unknown or malformed; the message says what to change."""


def _when(declaration) -> None:
    """Every declaration's `when` (tuning.conditions): normalised to {parent: (values...)}."""
    try:
        object.__setattr__(declaration, "when", conditions.normalise(declaration.when))
    except ValueError as exc:
        raise SpaceError(f"{type(declaration).__name__}: {exc}") from None


# when: active only where the named parameters take the given values (tuning/conditions.py).
# Not hashed: a dict; declarations are compared, never used as keys.
_WHEN = field(default=None, hash=False)


def _no_log(declaration, log) -> None:
    """`log=` is Ray's and Optuna's way (tune.uniform has a loguniform twin, suggest_float takes
    log=True); here a log scale is a type of its own. Refused in one line naming it, rather than
    Python's unexpected-keyword TypeError."""
    if log is None:
        return
    kind = type(declaration).__name__
    scaled = kind in ("LogUniform", "IntLogUniform")
    if bool(log) == scaled:  # what the type is anyway
        return
    twin = {"Uniform": "LogUniform", "IntUniform": "IntLogUniform", "LogUniform": "Uniform",
            "IntLogUniform": "IntUniform"}[kind]
    why = (f"{kind} is log-scaled by its type: declare {twin}({declaration.low}, {declaration.high}) for a linear "
           "scale" if scaled else f"a log scale is a type of its own here: declare "
           f"{twin}({declaration.low}, {declaration.high}) instead"
           + (" (its low must be above 0)" if declaration.low <= 0 else ""))
    raise SpaceError(f"{kind}(..., log={log!r}): {why}")


@dataclass(frozen=True)
class _Range:
    """A continuous range from low to high; its grid is `grid` points, spaced as the subclass says."""

    low: float
    high: float
    grid: int = 3
    when: dict | None = _WHEN
    log: dataclasses.InitVar[bool | None] = None  # refused unless it says what the type is (_no_log)
    positive = False  # whether low must be above 0 (a class setting, not a field)

    def __post_init__(self, log=None):
        _when(self)
        _no_log(self, log)
        kind = type(self).__name__
        if not (0 < self.low < self.high if self.positive else self.low < self.high):
            raise SpaceError(f"{kind} needs {'0 < ' if self.positive else ''}low < high, "
                             f"got low={self.low} high={self.high}")
        if self.grid < 1:
            raise SpaceError(f"{kind} grid needs at least 1 point, got {self.grid}")


@dataclass(frozen=True)
class LogUniform(_Range):
    """Continuous, sampled uniformly in log space; the grid is `grid` log-spaced points."""

    grid: int = 4
    positive = True

    def grid_values(self) -> list[float]:
        if self.grid == 1:
            return [float(math.sqrt(self.low * self.high))]
        return [float(v) for v in np.geomspace(self.low, self.high, self.grid)]


@dataclass(frozen=True)
class Uniform(_Range):
    """Continuous, sampled uniformly; the grid is `grid` evenly spaced points."""

    def grid_values(self) -> list[float]:
        if self.grid == 1:
            return [(self.low + self.high) / 2]
        return [float(v) for v in np.linspace(self.low, self.high, self.grid)]


@dataclass(frozen=True)
class IntUniform:
    """Integer in [low, high], both ends included; the grid is every value, or `grid` of them."""

    low: int
    high: int
    grid: int | None = None
    when: dict | None = _WHEN
    log: dataclasses.InitVar[bool | None] = None  # refused when True (_no_log)

    def __post_init__(self, log=None):
        _when(self)
        _no_log(self, log)
        if not self.low < self.high:
            raise SpaceError(f"IntUniform needs low < high, got low={self.low} high={self.high}")

    def grid_values(self) -> list[int]:
        if self.grid is None or self.grid >= self.high - self.low + 1:
            return list(range(self.low, self.high + 1))
        return sorted({int(round(v)) for v in np.linspace(self.low, self.high, self.grid)})


@dataclass(frozen=True)
class IntLogUniform:
    """Integer in [low, high], both included, sampled uniformly in log space: widths, depths, counts
    whose doublings matter more than their steps. The grid is `grid` log-spaced values, rounded."""

    low: int
    high: int
    grid: int = 4
    when: dict | None = _WHEN
    log: dataclasses.InitVar[bool | None] = None  # refused when False (_no_log)

    def __post_init__(self, log=None):
        _when(self)
        _no_log(self, log)
        if not 0 < self.low < self.high:
            raise SpaceError(f"IntLogUniform needs 0 < low < high, got low={self.low} high={self.high}")
        if self.grid < 1:
            raise SpaceError(f"IntLogUniform grid needs at least 1 point, got {self.grid}")

    def grid_values(self) -> list[int]:
        if self.grid == 1:
            return [int(round(math.sqrt(self.low * self.high)))]
        return sorted({int(round(v)) for v in np.geomspace(self.low, self.high, self.grid)})


@dataclass(frozen=True)
class Choice:
    """One of a fixed list of values; the grid is the whole list. A value may be any JSON value:
    a number, a string, a bool, None, or a list or dict of them (a set of model settings, say, as
    Ray users pass tune.choice). A tuple is taken as the list it is in every file (JSON has no
    tuples), so the trainer gets a list in a first run and after --resume alike."""

    values: tuple
    when: dict | None = _WHEN

    def __init__(self, values, when=None):
        object.__setattr__(self, "values", tuple(_json_value(v, values) for v in values))
        object.__setattr__(self, "when", when)
        _when(self)
        if len(self.values) < 1:
            raise SpaceError("Choice needs at least one value")
        if len({_key(v) for v in self.values}) != len(self.values):
            raise SpaceError(f"Choice values must be distinct, got {list(self.values)}")

    def __hash__(self):  # the values may be dicts and lists, which have no hash of their own
        return hash(tuple(_key(v) for v in self.values))

    def grid_values(self) -> list:
        return list(self.values)

    @property
    def by_position(self) -> bool:
        """Whether the searchers whose categories must be scalars (ConfigSpace's for bohb and
        adaptive, Optuna's for tpe) get this choice as its positions 0, 1, ... instead of its values:
        where a value is a list, a dict or None (to_positions, from_positions)."""
        return not all(isinstance(v, (bool, int, float, str)) for v in self.values)

    def position(self, value) -> int | None:
        """The index of `value` among the values (a tuple matching its list), or None."""
        key = _key(_json_value(value, None, strict=False))
        return next((i for i, v in enumerate(self.values) if _key(v) == key), None)

    def cell_position(self, cell) -> int | None:
        """The index of the value a table cell stands for, or None where none does. A column that
        took a list or a dict holds every value as JSON text (results.config_cells); CSV gives
        numbers back as text or floats."""
        i = next((i for i, v in enumerate(self.values) if label(v) == str(cell)
                  or (isinstance(v, (int, float)) and not isinstance(v, bool) and v == cell)), None)
        if i is None and isinstance(cell, str):
            try:
                return self.position(json.loads(cell))
            except ValueError:
                return None
        return i

    def from_cell(self, cell):
        """The value a table cell stands for (cell_position), or None where none does."""
        i = self.cell_position(cell)
        return None if i is None else self.values[i]


def _json_value(v, values, strict: bool = True):
    """A Choice's value as it is kept: tuples as lists, numpy scalars as Python's; one that run.json
    and the tables cannot hold and that was never accepted (a set, a dict with a non-string key:
    anything without a hash) is refused, naming what to declare instead."""
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, (tuple, list)):
        return [_json_value(x, values, strict) for x in v]
    if isinstance(v, dict) and all(isinstance(k, str) for k in v):
        return {k: _json_value(x, values, strict) for k, x in v.items()}
    try:
        hash(v)
    except TypeError:
        if strict:
            raise SpaceError(f"Choice value {v!r} in {values!r} is not a JSON value: declare numbers, strings, "
                             "booleans, None, or lists and dicts of them with string keys (they go into run.json "
                             "and the tables); for objects, choose among names and look them up in the trainer") \
                from None
    return v


def _key(v):
    """What tells two values apart: the value itself, or its JSON text for a list or a dict."""
    return ("json", json.dumps(v, sort_keys=True, default=repr)) if isinstance(v, (list, dict)) else v


def label(value) -> str:
    """A value as a table cell and a report's axis show it: JSON text for a list or a dict."""
    return json.dumps(value) if isinstance(value, (list, dict)) else str(value)


def to_positions(params: dict, config: dict) -> dict:
    """`config` as the scalar-only searchers see it: a by_position Choice's value as its index."""
    return {k: params[k].position(v) if _positional(params.get(k)) else v for k, v in config.items()}


def from_positions(params: dict, config: dict) -> dict:
    """to_positions undone: a by_position Choice's index as its value."""
    return {k: params[k].values[int(v)] if _positional(params.get(k)) else v for k, v in config.items()}


def _positional(p) -> bool:
    return isinstance(p, Choice) and p.by_position


Param = Union[LogUniform, Uniform, IntUniform, IntLogUniform, Choice]
PARAM_TYPES = {c.__name__: c for c in (LogUniform, Uniform, IntUniform, IntLogUniform, Choice)}
_NAMES = "LogUniform, Uniform, IntUniform, IntLogUniform or Choice"


@dataclass(frozen=True)
class Space:
    """Everything a tuning run needs to know besides the flags that override it."""

    params: dict[str, Param]
    strategy: str = "asha"
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
    # "cifar", a synthetic benchmark from tuning.benchmarks, or your own trainer: a function, or
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

    def __post_init__(self):
        if self.strategy not in STRATEGIES:
            raise SpaceError(f"strategy {self.strategy!r} unknown: use one of {', '.join(STRATEGIES)}")
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
        for key, p in self.params.items():
            if type(p).__module__.startswith("ray.tune"):
                raise SpaceError(
                    f"parameter {key!r} is a Ray Tune distribution: declare it with {_NAMES} "
                    "from tuning.spaces, so grid, random and BOHB share it. "
                    "Quantised ones (q=...) are not offered: they break TuneBOHB with ConfigSpace 1.x "
                    "(Ray issue #46995); use IntUniform or Choice for discrete values")
            if not isinstance(p, tuple(PARAM_TYPES.values())):
                raise SpaceError(f"parameter {key!r} is a {type(p).__name__}: declare it with "
                                 f"{_NAMES} from tuning.spaces")
        if not callable(self.trainer) and not isinstance(self.trainer, str):
            raise SpaceError(f"trainer must be a function, 'module:function', 'cifar' or a benchmark name, "
                             f"got {self.trainer!r}")
        reported = trainer_metrics(self.trainer)
        for name in objective_rules.required(self) if reported is not None else ():
            if name not in reported:
                what = ("metric" if name == self.metric and not self.objectives else "objective"
                        if name in objective_rules.of(self) else "constrained metric")
                raise SpaceError(f"{what} {name!r} is never reported by the {self.trainer} trainer: "
                                 f"use one of {', '.join(sorted(reported))}")
        clash = set(self.params) & set(self.fixed)
        if clash:
            raise SpaceError(f"{sorted(clash)} are both searched and fixed: keep each in one place")
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


# What the CIFAR trainer reports every epoch, on any device (tuning.trainer.train_cifar; the CUDA
# memory figures only on a GPU, so a bound on them is left to a trainer of your own).
CIFAR_METRICS = {"loss", "accuracy", "train_loss", "latency_ms", "num_params", "train_time_s", "eval_time_s",
                 "images_per_s", "rss_mb", "peak_rss_mb"}


def trainer_name(trainer) -> str:
    """How a run records its trainer: "cifar", a benchmark, or "module:function"."""
    if callable(trainer):
        return f"{trainer.__module__}:{trainer.__qualname__}"
    return trainer


def trainer_metrics(trainer) -> set[str] | None:
    """The metrics a trainer reports (None: a user's trainer, which only its runs can tell)."""
    if callable(trainer):
        return None
    if trainer == "cifar":
        return CIFAR_METRICS
    if trainer.startswith("replay:"):  # a finished run's recorded curves (tuning/replay.py): what it recorded
        from tuning import record

        try:
            return set(record.reported_metrics(Path(trainer[len("replay:"):]), f"trainer {trainer}"))
        except TuningError as exc:
            raise SpaceError(str(exc)) from None
    if ":" in trainer:
        module, _, function = trainer.partition(":")
        try:
            getattr(importlib.import_module(module), function)
        except (ImportError, AttributeError) as exc:
            raise SpaceError(f"trainer {trainer!r} cannot be imported ({exc}): give it as "
                             "'module:function' importable from where you run") from None
        return None
    from tuning.benchmarks import BENCHMARKS

    if trainer not in BENCHMARKS:
        raise SpaceError(f"trainer {trainer!r} unknown: use 'cifar', one of {', '.join(BENCHMARKS)}, "
                         "or 'module:function'")
    return {"loss"}


# Beyond this a grid is more trials than one run should hold: Tune keeps every trial it creates in
# memory and in each experiment snapshot.
MAX_GRID_TRIALS = 100_000


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

def contains(p: Param, value) -> bool:
    """Whether `value` is one the declaration can produce (earlier runs' configurations are checked
    with it before they warm-start a search)."""
    if isinstance(p, Choice):
        return p.position(value) is not None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    if isinstance(p, (IntUniform, IntLogUniform)):
        return float(value).is_integer() and p.low <= value <= p.high
    return p.low <= value <= p.high


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


def to_configspace(space: Space, seed: int | None = None):
    """A ConfigSpace space, for TuneBOHB."""
    import ConfigSpace as CS

    cs = CS.ConfigurationSpace(seed=seed)
    for k, p in space.params.items():
        if isinstance(p, LogUniform):
            hp = CS.UniformFloatHyperparameter(k, lower=p.low, upper=p.high, log=True)
        elif isinstance(p, Uniform):
            hp = CS.UniformFloatHyperparameter(k, lower=p.low, upper=p.high)
        elif isinstance(p, (IntUniform, IntLogUniform)):
            hp = CS.UniformIntegerHyperparameter(k, lower=p.low, upper=p.high, log=isinstance(p, IntLogUniform))
        else:  # ConfigSpace's categories must be scalars: a choice of lists, dicts or None by position
            hp = CS.CategoricalHyperparameter(k, choices=list(range(len(p.values))) if p.by_position else list(p.values))
        cs.add(hp)
    for k, p in space.params.items():  # every parent exists now
        when = {parent: [to_positions(space.params, {parent: v})[parent] for v in values]
                for parent, values in (p.when or {}).items()}
        tests = [CS.InCondition(cs[k], cs[parent], values) if len(values) > 1 else
                 CS.EqualsCondition(cs[k], cs[parent], values[0]) for parent, values in when.items()]
        if tests:
            cs.add(tests[0] if len(tests) == 1 else CS.AndConjunction(*tests))
    return cs


# ---------------------------------------------------------------- as plain JSON (run.json)

def declarations(space_or_params) -> dict:
    """Parameter declarations as plain JSON, so a run's record says what it searched even if the
    space file changes later."""
    params = space_or_params.params if isinstance(space_or_params, Space) else space_or_params
    return {k: {"type": type(p).__name__, **{f: v for f, v in dataclasses.asdict(p).items()
                                             if not (f == "when" and v is None)}}
            for k, p in params.items()}


def from_declarations(decls: dict) -> dict[str, Param]:
    """declarations() read back; an unknown type or field is a SpaceError."""
    out = {}
    for k, d in decls.items():
        kind = PARAM_TYPES.get(d.get("type"))
        if kind is None:
            raise SpaceError(f"parameter {k!r}: unknown type {d.get('type')!r}")
        try:
            out[k] = kind(**{f: v for f, v in d.items() if f != "type"})
        except TypeError as exc:
            raise SpaceError(f"parameter {k!r}: {exc}") from None
    return out


_SETTINGS = ("strategy", "metric", "mode", "num_samples", "grid_repeats", "grid", "max_epochs", "grace_period",
             "reduction_factor", "cpus_per_trial", "gpus_per_trial", "workers_per_trial", "fixed",
             "diverged_value", "seed", "name")


# Written only where a space declares them, so a single-metric run's record reads as it always did.
_OBJECTIVES = ("objectives", "constraints", "reference_point")


def to_json(space: Space) -> dict:
    """The whole space as plain JSON; its trainer by name (trainer_name)."""
    return {"params": declarations(space), "trainer": trainer_name(space.trainer),
            **{k: getattr(space, k) for k in _SETTINGS},
            **{k: getattr(space, k) for k in _OBJECTIVES if getattr(space, k)}}


def from_json(data: dict, trainer=None) -> Space:
    """to_json() read back. `trainer`: the function to run, where the recorded name cannot be
    imported (a function defined in a script or notebook)."""
    settings = {k: data[k] for k in (*_SETTINGS, *_OBJECTIVES) if k in data}
    return Space(params=from_declarations(data["params"]), trainer=trainer or data["trainer"], **settings)


def plain(value):
    """numpy scalars (ConfigSpace 1.x hands them out) as the Python values they stand for."""
    if isinstance(value, np.generic):
        return value.item()
    return value


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
