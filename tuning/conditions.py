"""Conditional parameters: a parameter declared with ``when={"optimizer": "sgd"}`` exists only in
configurations where its parents take one of the given values (every key must hold, and each
parent must itself be active). An inactive parameter is absent from the configuration: the
trainer never sees it, tables leave its cell empty, and no search spends samples on it.

Plain functions over a space's ``params`` (name -> declaration with a ``when`` attribute, the
parents' values as tuples); tuning.spaces checks declarations with `problem` and builds on the
rest. No Ray, no ConfigSpace here.
"""

from __future__ import annotations

import itertools
import math
from typing import Callable, Iterator

DISCRETE = ("Choice", "IntUniform", "IntLogUniform")  # types a condition can test for equality


def normalise(when) -> dict[str, tuple] | None:
    """`when` as {parent: (values...)}: a single value becomes a one-value tuple. None: always active."""
    if when is None:
        return None
    if not isinstance(when, dict) or not when or not all(isinstance(k, str) for k in when):
        raise ValueError(f"when= needs a dict from parameter names to values, like when={{'optimizer': 'sgd'}}, "
                         f"got {when!r}")
    out = {k: tuple(map(_plain, v)) if isinstance(v, (list, tuple, set, frozenset, range)) or getattr(v, "ndim", 0)
           else (_plain(v),) for k, v in when.items()}
    empty = [k for k, v in out.items() if not v]
    if empty:
        raise ValueError(f"when={{{empty[0]!r}: []}} lists no values: the parameter would never be active; give "
                         f"the values of {empty[0]!r} it exists under")
    return out


def _plain(value):
    """numpy's scalars as Python's (np.int64(2) from an array): the values a trial's config holds."""
    return value.item() if hasattr(value, "item") and type(value).__module__ == "numpy" else value


def parents(params: dict) -> dict[str, tuple[str, ...]]:
    return {name: tuple(p.when or ()) for name, p in params.items()}


def problem(params: dict, fixed: dict, contains: Callable) -> str | None:
    """What is wrong with the space's conditions, in one line naming the parameter; None if nothing.
    `contains(declaration, value)`: whether the declaration can produce the value."""
    for name, p in params.items():
        for parent, values in (p.when or {}).items():
            where = f"parameter {name!r}: when= names {parent!r}"
            if parent in fixed:
                return (f"{where}, which is fixed to {fixed[parent]!r} (fixed=...): a condition on a fixed value "
                        f"is always or never true; drop the condition, or search {parent!r}")
            if parent not in params:
                return f"{where}, which is not a parameter of this space: declare {parent!r} or drop the condition"
            kind = type(params[parent]).__name__
            if kind not in DISCRETE:
                return (f"{where}, a {kind}: conditions test equality, so the parent must be a "
                        f"{', '.join(DISCRETE)}")
            bad = [v for v in values if not contains(params[parent], v)]
            if bad:
                q = params[parent]
                takes = list(q.values) if hasattr(q, "values") else f"integers {q.low}..{q.high}"
                return f"{where} = {bad[0]!r}, a value {parent!r} cannot take: use one of {takes}"
    cycle = _cycle(parents(params))
    if cycle:
        return (f"parameter {cycle[0]!r}: its conditions form a cycle ({' -> '.join(cycle)}): "
                "one of them must not depend on the others")
    dead = never_active(params)
    if dead:
        when = {k: v[0] if len(v) == 1 else list(v) for k, v in params[dead[0]].when.items()}
        return (f"parameter {dead[0]!r}: no configuration makes it active (when={when!r} "
                f"cannot hold while its parents' own conditions do): fix its when= or drop it")
    return None


def never_active(params: dict, most: int = 100_000) -> list[str]:
    """Parameters active in no configuration (nested conditions that contradict each other), in
    declaration order. Conditions test equality, and an inactive parent makes nothing active, so
    each parent need take only the values some condition names; past `most` such combinations,
    none is reported."""
    named: dict[str, list] = {}  # lists, not sets: a Choice's values need not be hashable
    for p in params.values():
        for parent, values in (p.when or {}).items():
            seen = named.setdefault(parent, [])
            seen.extend(v for v in values if v not in seen)
    if not named or math.prod(map(len, named.values())) > most:
        return []
    on = set().union(*(active(params, c) for c in grid({k: params[k] for k in named}, named)))
    return [k for k in params if k not in on]


def _cycle(graph: dict[str, tuple[str, ...]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node, path):
        state[node] = 1
        for parent in graph.get(node, ()):
            if state.get(parent) == 1:
                return path[path.index(parent):] + [parent] if parent in path else [node, parent]
            if parent not in state:
                found = visit(parent, path + [parent])
                if found:
                    return found
        state[node] = 2
        return None

    for node in graph:
        if node not in state:
            found = visit(node, [node])
            if found:
                return found
    return None


def order(params: dict) -> list[str]:
    """Parameter names with every parent before its children, otherwise in declaration order."""
    graph, out, seen = parents(params), [], set()

    def visit(name):
        if name in seen:
            return
        seen.add(name)
        for parent in graph[name]:
            visit(parent)
        out.append(name)

    for name in params:
        visit(name)
    return out


def is_conditional(params: dict) -> bool:
    return any(p.when for p in params.values())


def holds(declaration, config: dict) -> bool:
    """Whether a declaration's conditions hold in `config`, which holds active parameters only
    (a configuration being built parents first)."""
    return all(parent in config and config[parent] in values for parent, values in (declaration.when or {}).items())


def active(params: dict, config: dict) -> set[str]:
    """The parameters active in `config` (its values for inactive ones, if any, are ignored)."""
    on: set[str] = set()
    for name in order(params):
        when = params[name].when or {}
        if all(parent in on and config.get(parent) in values for parent, values in when.items()):
            on.add(name)
    return on


def drop_inactive(params: dict, config: dict) -> dict:
    """`config` without the parameters its own values make inactive (keys that are not parameters
    stay)."""
    on = active(params, config)
    return {k: v for k, v in config.items() if k not in params or k in on}


def grid(params: dict, values: dict[str, list]) -> Iterator[dict]:
    """Every valid combination of the grid `values`, each once: an inactive parameter is absent,
    never a second point that differs only there. Declaration order, the last parameter fastest."""
    names = order(params)

    def walk(i: int, config: dict):
        if i == len(names):
            yield {k: config[k] for k in params if k in config}
            return
        name = names[i]
        if holds(params[name], config):
            for v in values[name]:
                yield from walk(i + 1, {**config, name: v})
        else:
            yield from walk(i + 1, config)

    if not is_conditional(params):  # the plain product, without a generator frame per point
        for combo in itertools.product(*(values[k] for k in params)):
            yield dict(zip(params, combo))
        return
    yield from walk(0, {})


def grid_size(params: dict, values: dict[str, list]) -> int:
    """How many points grid() yields, without building them: only the parents' combinations are
    walked, each multiplied by the sizes of the other parameters it makes active."""
    controllers = {parent for p in params.values() for parent in (p.when or {})}
    ruling = {k: p for k, p in params.items() if k in controllers}
    total = 0
    for config in grid(ruling, values) if ruling else [{}]:
        on = active(params, config)
        n = 1
        for k in on - controllers:
            n *= len(values[k])
        total += n
    return total
