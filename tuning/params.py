"""Parameter declarations: the five types a space's params are built of, what each declares (its
range, its grid points, when it is active), and the values they hold (tuples as lists, positions for
the searchers whose categories must be scalars). Plain data: no Ray. tuning.spaces re-exports the
types, where users import them from.
"""

from __future__ import annotations

import dataclasses
import json
import math
import numbers
from dataclasses import dataclass, field
from typing import Union

import numpy as np

from tuning import conditions
from tuning.cli import TuningError


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


def _no_step(declaration, step, q) -> None:
    """Optuna's suggest_float(step=) and suggest_int(step=), Ray's quniform(q=): values on a grid,
    which is a Choice of them here. Refused in one line that writes it, not Python's TypeError."""
    if step is None and q is None:
        return
    name, step = ("step", step) if step is not None else ("q", q)
    kind, low, high = type(declaration).__name__, declaration.low, declaration.high
    try:
        values = list(np.round(np.arange(low, high + step / 2, step), 10)) if step > 0 else []
    except TypeError:
        values = []
    shown = ", ".join(f"{v:g}" for v in values[:6]) + (", ..." if len(values) > 6 else "")
    raise SpaceError(f"{kind}({low}, {high}, {name}={step!r}): values on a grid are a Choice here: "
                     + (f"Choice([{shown}])" + (f" (np.arange({low}, {high} + {step}, {step}), rounded)" if len(values) > 6
                                                else "") if values else "Choice([...]) of them"))


def whole(value) -> bool:
    """A whole number, as a count must be (a bool, 2.5 or "4" is not one); numpy's integers are."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _bounds(declaration, integer: bool = False) -> None:
    """low and high are finite numbers (whole ones for an integer range, kept as ints): Ray and
    ConfigSpace would refuse an infinite bound mid-run, and IntUniform(1.5, 3.5) would draw 2..3."""
    kind = type(declaration).__name__
    for end in ("low", "high"):
        v = getattr(declaration, end)
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v) or (integer and v != int(v)):
            raise SpaceError(f"{kind} {end} must be a finite {'whole ' if integer else ''}number, got {v!r}")
        object.__setattr__(declaration, end, int(v) if integer else v)
    grid = getattr(declaration, "grid", None)
    if grid is not None and not whole(grid):
        raise SpaceError(f"{kind} grid must be a whole number of points, got {grid!r}")


@dataclass(frozen=True)
class _Range:
    """A continuous range from low to high; its grid is `grid` points, spaced as the subclass says."""

    low: float
    high: float
    grid: int = 3
    when: dict | None = _WHEN
    log: dataclasses.InitVar[bool | None] = None  # refused unless it says what the type is (_no_log)
    step: dataclasses.InitVar[float | None] = None  # Optuna's step= and Ray's q=: refused naming the fix (_no_step)
    q: dataclasses.InitVar[float | None] = None
    positive = False  # whether low must be above 0 (a class setting, not a field)

    def __post_init__(self, log=None, step=None, q=None):
        _when(self)
        _no_log(self, log)
        _no_step(self, step, q)
        _bounds(self)
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
    step: dataclasses.InitVar[int | None] = None  # refused naming the fix (_no_step)
    q: dataclasses.InitVar[int | None] = None

    def __post_init__(self, log=None, step=None, q=None):
        _when(self)
        _no_log(self, log)
        _no_step(self, step, q)
        _bounds(self, integer=True)
        if not self.low < self.high:
            raise SpaceError(f"IntUniform needs low < high, got low={self.low} high={self.high}"
                             + (f": a value that does not vary is fixed={{'name': {self.low}}}" if self.low == self.high
                                else ""))

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
    step: dataclasses.InitVar[int | None] = None  # refused naming the fix (_no_step)
    q: dataclasses.InitVar[int | None] = None

    def __post_init__(self, log=None, step=None, q=None):
        _when(self)
        _no_log(self, log)
        _no_step(self, step, q)
        _bounds(self, integer=True)
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
        # a str would be its letters, a set in no fixed order (grids and seeds would vary), a dict its keys
        if isinstance(values, (str, bytes, set, frozenset, dict)) or not hasattr(values, "__iter__"):
            raise SpaceError(f"Choice takes a list of values, got {type(values).__name__} {values!r}: "
                             f"write Choice([...])")
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
        took a list or a dict holds every value as JSON text (params.config_cells); CSV gives
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


def json_cells(values) -> bool:
    """Whether a table column of these values holds them as JSON text (params.config_cells): where
    one is a list or a dict, or where they mix kinds (strings with numbers, bools with either), which
    one parquet column cannot hold; None goes with any kind."""
    kinds = {"json" if isinstance(v, (list, dict)) else "bool" if isinstance(v, bool)
             else "number" if isinstance(v, (int, float)) else type(v).__name__ for v in values if v is not None}
    return "json" in kinds or len(kinds) > 1


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




def plain(value):
    """numpy scalars (ConfigSpace 1.x hands them out) as the Python values they stand for."""
    if isinstance(value, np.generic):
        return value.item()
    return value


# ---------------------------------------------------------------- parameters in the tables (tuning.results)

def config_cells(records: list, params: list[str]):
    """rec -> its parameters as table cells. A parameter that took a list or a dict (a Choice of
    them), or values of mixed kinds (a string and a number), has every value it took as JSON text,
    `null` for a chosen None, so its column holds one type that CSV and parquet keep and
    `json.loads` reads back; an inactive one is an empty cell. So has one that took None where
    other trials lacked it (a conditional Choice of None and more): an empty cell for both read as
    inactive, in the tables and the report alike."""
    taken = {p: [] for p in params}
    for rec in records:
        for p, v in rec.config.items():
            if p in taken:
                taken[p].append(v)
    lacking = {p for p in params if any(p not in rec.config for rec in records)}
    as_json = {p for p, values in taken.items() if json_cells(values) or (p in lacking and None in values)}

    def cells(rec) -> dict:
        config = rec.config
        return {p: json.dumps(config[p]) if p in as_json and p in config else config.get(p) for p in params}

    return cells


def whole_numbers(df, records: list, params: list[str]):
    """An integer parameter that some trials lack (inactive under its conditions) kept as pandas'
    nullable integers: with empty cells a column of ints was float, and trials.csv said 32.0 for a
    batch size the trial ran as 32."""
    for p in params:
        values = [rec.config[p] for rec in records if p in rec.config]
        lacking = any(p not in rec.config for rec in records)
        if lacking and values and p in df and all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            df[p] = df[p].astype("Int64")
    return df
