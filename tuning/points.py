"""Configurations a user asks to run first (search(points_to_evaluate=[...]),
--points-to-evaluate FILE|JSON): Ray Tune's ``points_to_evaluate``, Optuna's ``enqueue_trial``.
A known good setting, a paper's defaults, last month's best: each becomes one of the first trials,
under every strategy but grid, and then the search goes on as its strategy does (BOHB's and TPE's
models learn from their results like any other). Checked against the space before anything starts.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from tuning import conditions, params as param_types, spaces
from tuning.cli import UsageError

FLAG = "--points-to-evaluate"
EXAMPLE = '[{"lr": 0.01, "batch_size": 64}]'


def read(text: str) -> list:
    """The flag's value: JSON text (a list of objects), or a file that holds it."""
    stripped = text.strip()
    if stripped and not stripped.startswith(("[", "{")):
        path = Path(text).expanduser()
        try:
            stripped = path.read_text()
        except FileNotFoundError:
            raise UsageError(f"{FLAG} {text}: no such file; give a JSON file or the JSON itself, e.g. "
                             f"{FLAG} '{EXAMPLE}'") from None
        except OSError as exc:
            raise UsageError(f"{FLAG} {text}: cannot be read ({exc.strerror or exc})") from None
    try:
        return json.loads(stripped)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{FLAG} {text if len(text) < 60 else text[:57] + '...'}: not valid JSON ({exc.msg} at line "
                         f"{exc.lineno} column {exc.colno}); give a list of objects, e.g. {EXAMPLE}") from None


def check(space: spaces.Space, strategy: str, given, num_samples: int) -> list[dict]:
    """The configurations, each checked: a value for every searched parameter it makes active,
    none for the others, each one its declaration can produce (a Choice's own value kept, an
    integer parameter's whole float made an int). [] for None."""
    if given is None:
        return []
    if not isinstance(given, (list, tuple)) or not all(isinstance(p, dict) for p in given):
        raise UsageError(f"{FLAG}: give a list of configurations, each a dict of parameter values, e.g. {EXAMPLE}; "
                         f"got {type(given).__name__}")
    if strategy == "grid":
        raise UsageError(f"{FLAG}: grid search walks its fixed points, which configurations of yours would replace "
                         "unevenly; use another --strategy (random, asha, median, hyperband, bohb, adaptive or tpe)")
    if space.grid:
        raise UsageError(f"{FLAG}: the space's grid={list(space.grid)} runs every grid point num_samples times, which "
                         "configurations of yours would replace unevenly; drop grid= from the space to give them")
    if len(given) > num_samples:
        raise UsageError(f"{FLAG}: {len(given)} configurations but {num_samples} trials (num_samples): each is one of "
                         f"the trials; raise --num-samples to at least {len(given)}")
    return [_one(space, point, i) for i, point in enumerate(given, 1)]


def _one(space: spaces.Space, point: dict, i: int) -> dict:
    where = f"{FLAG}: configuration {i}"
    point = {k: param_types.plain(v) for k, v in point.items()}  # np.int64(64) from an array is 64
    fixed = sorted(k for k in point if k in space.fixed)
    if fixed:
        raise UsageError(f"{where} sets {', '.join(fixed)}, which the space fixes ({_values(space.fixed, fixed)}): "
                         "drop it, or search it")
    unknown = sorted(k for k in point if k not in space.params)
    if unknown:
        raise UsageError(f"{where} sets {', '.join(map(str, unknown))}, which the space does not search; its parameters "
                         f"are {', '.join(space.params)}")
    on = conditions.active(space.params, point)
    inactive = [k for k in point if k not in on]
    if inactive:
        raise UsageError(f"{where} sets {', '.join(inactive)}, inactive where "
                         f"{_conditions(space, inactive)}: drop it from that configuration")
    missing = [k for k in space.params if k in on and k not in point]
    if missing:
        raise UsageError(f"{where} has no value for {', '.join(missing)}: give every searched parameter it makes "
                         "active")
    out = {}
    for name in space.params:
        if name not in point:
            continue
        p, value = space.params[name], point[name]
        if not isinstance(p, param_types.Choice) and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise UsageError(f"{where}: {name}={value!r} is not a number, which {_declared(p)} takes"
                             + (f": write {name}={value}" if _numeric(value) else ""))
        if not param_types.contains(p, value):
            raise UsageError(f"{where}: {name}={value!r} is outside its declaration {_declared(p)}")
        if isinstance(p, param_types.Choice):
            value = p.values[p.position(value)]
        elif isinstance(p, (param_types.IntUniform, param_types.IntLogUniform)):
            value = int(value)
        out[name] = value
    return out


def _numeric(value) -> bool:
    try:
        return isinstance(value, str) and math.isfinite(float(value))
    except ValueError:
        return False


def _declared(p) -> str:
    if isinstance(p, param_types.Choice):
        return f"Choice({list(p.values)!r})"
    return f"{type(p).__name__}({p.low}, {p.high})"


def _values(config: dict, names: list) -> str:
    return ", ".join(f"{k}={config[k]!r}" for k in names)


def _conditions(space: spaces.Space, names: list) -> str:
    return "; ".join(f"{k} needs " + " and ".join(f"{parent} in {list(values)}" for parent, values in
                                                   conditions.normalise(space.params[k].when).items())
                     for k in names)
