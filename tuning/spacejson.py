"""A space as plain JSON, the form run.json keeps it in, and read back: the declarations say what a
run searched even if its space file changes later."""

from __future__ import annotations

import dataclasses

from tuning.params import PARAM_TYPES, Param, SpaceError
from tuning.spaces import Space, trainer_name


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
