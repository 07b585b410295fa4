"""The trainer contract: what tuning calls, and what it checks before a run starts.

A trainer is a plain function; tuning calls it once per trial (and again when a paused or failed
trial resumes) as

    trainer(**searched_and_fixed_parameters, epochs=E, state=S, on_epoch=report,
            [seed=..., device=..., rank=..., world_size=...])

- ``epochs``: the trial's full budget; a resumed trial counts its restored epochs in it.
- ``state``: None, or what the trainer last handed to ``on_epoch`` (read back from its checkpoint).
- ``on_epoch(metrics, state)``: after every epoch; ``metrics`` a dict of numbers, one of them the
  space's metric; ``state`` what torch.save can write, enough to go on from this epoch.
- ``seed``, ``device``, ``rank``, ``world_size``: passed only if the trainer takes them (by name
  or through ``**kwargs``); rank and world_size when the trial trains as several DDP ranks.

docs/your-trainer.md says the same with a template. No Ray and no torch here: the driver checks a
trainer with these functions, and tuning.backend's trial adapter calls it through them.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
from dataclasses import dataclass
from typing import Callable

from tuning.cli import TuningError

REQUIRED = ("epochs", "state", "on_epoch")
OPTIONAL = ("seed", "device", "rank", "world_size")
BUILT_IN = "cifar"
# The built-in trainer's precision settings (tuning.trainer.autocast_dtype), here so that the driver
# can check a flag or a space without importing torch (3 s of every `python -m tuning.run`).
PRECISIONS = ("auto", "bf16", "fp32")


@dataclass(frozen=True)
class DataSource:
    """The built-in trainer's data (tuning.data reads it). Here, not there, because every CIFAR
    trial's Ray process receives one and must not import torch to unpickle it (tuning.forkserver)."""

    kind: str  # "cifar10" or "synthetic"
    root: str  # the folder holding cifar-10-batches-py/


class ContractError(TuningError):
    """A trainer that cannot be called as the contract says: one line naming what to change."""


def is_user_trainer(trainer) -> bool:
    """A function, or "module:function": not the CIFAR trainer, a synthetic benchmark nor a replay
    ("replay:DIR", tuning/replay.py)."""
    return callable(trainer) or (isinstance(trainer, str) and ":" in trainer and not trainer.startswith("replay:"))


def resolve(trainer) -> Callable:
    """The function a user trainer names ("module:function"), imported here; a function as is."""
    if callable(trainer):
        return trainer
    module, _, name = trainer.partition(":")
    try:
        fn = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise ContractError(f"trainer {trainer!r} cannot be imported ({type(exc).__name__}: {exc}): give "
                            "'module:function' importable from where you run, or pass the function") from None
    if not callable(fn):
        raise ContractError(f"trainer {trainer!r} is a {type(fn).__name__}, not a function")
    return fn


def module_of(trainer) -> str | None:
    """The module Ray's workers must import to run the trainer; None where they need none. A
    function travels to them as Ray's pickler sends it: by name when its module is imported here
    under that name, else by value (one defined in a script, a notebook, or a file loaded by path
    such as a space file)."""
    if isinstance(trainer, str):
        return trainer.partition(":")[0] or None
    module = getattr(trainer, "__module__", None)
    loaded = sys.modules.get(module) if module and module != "__main__" else None
    if loaded is None or getattr(loaded, trainer.__qualname__, None) is not trainer:
        return None
    return module


def importable(name: str) -> bool:
    """Whether a recorded "module:function" can be imported by name (not a script's __main__, nor
    a file loaded by path, such as a space file)."""
    module = name.partition(":")[0]
    if not module or module == "__main__":
        return False
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def accepted(fn: Callable) -> tuple[set[str], bool]:
    """(the keyword names fn takes, whether it takes **kwargs)."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin or C function: nothing to check against
        return set(), True
    names = {n for n, p in sig.parameters.items()
             if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return names, any(p.kind == p.VAR_KEYWORD for p in sig.parameters.values())


def check_signature(fn: Callable, name: str, params: list[str], fixed: list[str], *, ranks: int = 1) -> None:
    """The trainer takes every searched and fixed parameter, epochs, state and on_epoch by keyword
    (and rank, world_size and device when a trial trains as several ranks); else one line saying
    which it lacks and what its signature is."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin or C function: nothing to check against
        return
    names, var_kw = accepted(fn)
    need = [*params, *fixed, *REQUIRED, *(("rank", "world_size", "device") if ranks > 1 else ())]
    lacking = [n for n in need if n not in names] if not var_kw else []
    if lacking:
        role = {**{p: "searched" for p in params}, **{f: "fixed" for f in fixed}}
        what = ", ".join(f"{n} ({role[n]})" if n in role else n for n in lacking)
        raise ContractError(f"trainer {name} does not take {what}: its signature is {fn.__name__}{sig}; take every "
                            "searched and fixed parameter, epochs, state and on_epoch as keyword arguments "
                            "(docs/your-trainer.md)")
    # A parameter without a default that tuning never passes: the first call would raise.
    unpassed = [n for n, p in sig.parameters.items() if p.default is p.empty
                and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
                and (p.kind == p.POSITIONAL_ONLY or (n not in need and n not in OPTIONAL))]
    if unpassed:
        raise ContractError(f"trainer {name} needs {', '.join(unpassed)}, which tuning does not pass: its signature "
                            f"is {fn.__name__}{sig}; give it a default, or declare it in the space's fixed or params")


def call_kwargs(fn: Callable, kwargs: dict, optional: dict) -> dict:
    """kwargs, plus those of `optional` (seed, device, ...) that fn takes."""
    names, var_kw = accepted(fn)
    return {**kwargs, **{k: v for k, v in optional.items() if var_kw or k in names}}


def plain_metrics(metrics: dict, metric: str) -> tuple[dict, str | None]:
    """(the metrics with numpy and torch scalars as Python numbers, what is wrong with them or None).
    Wrong: not a dict, the space's metric missing, or not a number."""
    if not isinstance(metrics, dict):
        return {}, f"on_epoch got {type(metrics).__name__} for metrics: pass a dict such as {{{metric!r}: 0.5}}"
    out = {str(k): _scalar(v) for k, v in metrics.items()}
    if metric not in out:
        named = ", ".join(sorted(k for k, v in out.items() if _is_number(v))) or "none"
        return out, f"the trainer reported no {metric!r}; the numbers it did report: {named}"
    value = out[metric]
    if not _is_number(value):
        return out, f"the trainer's {metric!r} is {value!r} ({type(value).__name__}), not a number"
    return out, None


def _scalar(v):
    """A one-element tensor or numpy value as the Python number it holds; anything else as is."""
    if hasattr(v, "item") and getattr(v, "size", 1) in (1, ()) or _numel(v) == 1:
        try:
            return v.item()
        except (AttributeError, ValueError, RuntimeError):
            return v
    return v


def _numel(v) -> int | None:
    numel = getattr(v, "numel", None)
    try:
        return numel() if callable(numel) else None
    except Exception:
        return None


# results.is_number's twin: importing results would bring pandas into `import tuning`.
def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def unsaveable(exc: Exception) -> str:
    """What a trial fails with when on_epoch's state cannot be written as a checkpoint."""
    return (f"on_epoch's state cannot be saved as a checkpoint ({type(exc).__name__}: {exc}): hand on_epoch "
            "what torch.save writes (tensors, numbers, strings, and dicts and lists of them; a model's "
            "state_dict(), not the model with open files or generators)")
