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

A trainer may instead return its metrics (a dict, or a number for the space's metric) and never
call ``on_epoch``, as an Optuna objective does: each trial is then one report, its full budget
(single-fidelity). Such a trainer need not take ``epochs``, ``state`` nor ``on_epoch``; the
strategies that stop and promote trials by their epochs refuse it (one_report_refusal).

docs/your-trainer.md says the same with a template. No Ray and no torch here: the driver checks a
trainer with these functions, and tuning.backend's trial adapter calls it through them.
"""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.util
import inspect
import sys
import textwrap
from dataclasses import dataclass
from typing import Callable

from tuning.cli import TuningError

REQUIRED = ("epochs", "state", "on_epoch")
OPTIONAL = ("seed", "device", "rank", "world_size")
BUILT_IN = "cifar"
# The built-in trainer's precision settings (tuning.trial.trainer.autocast_dtype), here so that the driver
# can check a flag or a space without importing torch (3 s of every `python -m tuning.run`).
PRECISIONS = ("auto", "bf16", "fp32")
# A trainer ported from Ray Tune that still calls tune.report: its results bypass on_epoch, so no
# checkpoint, no diverged check, no metric check; the run stops at the first (tuning/backend/stoppers.py).
RAY_REPORT = ("the trainer reported to Ray itself (ray.tune.report or ray.train.report): tuning never sees such "
              "a result to check or checkpoint it; call on_epoch(metrics, state) instead (docs/from-ray-tune.md)")


@dataclass(frozen=True)
class DataSource:
    """The built-in trainer's data (tuning.trial.data reads it). Here, not there, because every CIFAR
    trial's Ray process receives one and must not import torch to unpickle it (tuning.trial.forkserver)."""

    kind: str  # "cifar10" or "synthetic"
    root: str  # the folder holding cifar-10-batches-py/


class DataError(TuningError):
    """The requested data cannot be had; the message says how to get it (tuning.trial.data, tuning.trial.datasplit).
    Here, beside DataSource, so that both can raise it."""


class ContractError(TuningError):
    """A trainer that cannot be called as the contract says: one line naming what to change."""


def is_user_trainer(trainer) -> bool:
    """A function, or "module:function": not the CIFAR trainer, a synthetic benchmark nor a replay
    ("replay:DIR", tuning/compare/recorded.py)."""
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
    if loaded is None or getattr(loaded, getattr(trainer, "__qualname__", ""), None) is not trainer:
        return None
    return module


def importable(name: str) -> bool:
    """Whether a recorded "module:function" can be imported by name (not a script's __main__, nor
    a file loaded by path, such as a space file)."""
    module, _, function = name.partition(":")
    if not module or module == "__main__" or "<locals>" in function:  # a function defined inside another
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


def check_signature(fn: Callable, name: str, params: list[str], fixed: list[str], *, ranks: int = 1,
                    conditional: dict[str, dict] | None = None) -> None:
    """The trainer takes every searched and fixed parameter, epochs, state and on_epoch by keyword
    (and rank, world_size and device when a trial trains as several ranks), and has a default for
    every parameter under `when=` (`conditional`: name -> its when); else one line saying what it
    lacks and what its signature is. A trainer that returns its metrics and takes no on_epoch
    (reporting(fn) == "returns") needs only the parameters."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin or C function: nothing to check against
        return
    names, var_kw = accepted(fn)
    contract = REQUIRED if var_kw or "on_epoch" in names or reporting(fn) != "returns" else ()
    need = [*params, *fixed, *contract, *(("rank", "world_size", "device") if ranks > 1 else ())]
    lacking = [n for n in need if n not in names] if not var_kw else []
    if set(REQUIRED) <= set(lacking) and reporting(fn) == "neither":  # it reports nothing either way
        raise ContractError(f"trainer {name} neither returns its metrics nor takes on_epoch to report them: return "
                            "them as a dict such as {'loss': 0.5}, or take epochs, state and on_epoch and call "
                            "on_epoch(metrics, state) after every epoch (docs/your-trainer.md)")
    if lacking:
        role = {**{p: "searched" for p in params}, **{f: "fixed" for f in fixed}}
        what = ", ".join(f"{n} ({role[n]})" if n in role else n for n in lacking)
        ddp = {"rank", "world_size", "device"} & set(lacking)
        raise ContractError(f"trainer {name} does not take {what}: its signature is {display_name(fn)}{sig}; take "
                            "every searched and fixed parameter, epochs, state and on_epoch"
                            + (f", and as one of {ranks} ranks rank, world_size and device," if ddp else "")
                            + " as keyword arguments (docs/" + ("ddp.md" if ddp else "your-trainer.md") + ")")
    # A parameter under when= is left out of the call where its condition does not hold: without a
    # default every such trial fails with TypeError, and is retried to fail again.
    bare = [n for n in conditional or {} if n in sig.parameters and sig.parameters[n].default is sig.empty]
    if bare:
        where = "; ".join(f"{n} only where " + " and ".join(f"{parent} is {' or '.join(map(repr, values))}"
                                                          for parent, values in conditional[n].items())
                          for n in bare)
        raise ContractError(f"trainer {name} has no default for {', '.join(bare)}, declared under when= ({where}): "
                            "the trials where it is inactive are called without it; give it a default, e.g. "
                            f"{bare[0]}=None (its signature is {display_name(fn)}{sig})")
    # A parameter without a default that tuning never passes: the first call would raise.
    unpassed = [n for n, p in sig.parameters.items() if p.default is p.empty
                and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
                and (p.kind == p.POSITIONAL_ONLY or (n not in need and n not in OPTIONAL and n not in REQUIRED))]
    if unpassed:
        raise ContractError(f"trainer {name} needs {', '.join(unpassed)}, which tuning does not pass: its "
                            f"signature is {display_name(fn)}{sig}; give it a default, or declare it in the space's "
                            "fixed or params")


# ---------------------------------------------------------------- trainers that return their metrics

# Strategies whose scheduler stops, pauses or promotes trials by the epochs they report: a trainer
# that reports once (its return value) gives them nothing to judge. tpe runs Hyperband's brackets
# too, which is harmless only with one epoch, where its one bracket trains every trial in full.
PER_EPOCH = ("asha", "median", "hyperband", "bohb", "adaptive")


def reporting(fn: Callable) -> str:
    """How fn reports, read from its source: "per_epoch" (it names on_epoch, so it may call it),
    "returns" (it never names on_epoch and returns a value), "neither" (it does neither: it may only
    raise), or "unknown" (no source: a builtin, a lambda, a callable object; or it passes its
    **kwargs on, or reads locals(), where on_epoch may travel unnamed)."""
    fn = _code_of(fn)
    if getattr(fn, "__name__", None) == "<lambda>":  # its body is one expression, which it returns
        names, var_kw = accepted(fn)
        return "unknown" if var_kw or "on_epoch" in names else "returns"
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        # No source (typed at a prompt, `python -c`): a function that cannot be handed on_epoch
        # cannot report per epoch, so it returns (its first trial tells if it does not).
        names, var_kw = accepted(fn)
        return "returns" if inspect.isfunction(fn) and not var_kw and "on_epoch" not in names else "unknown"
    node = next((n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                 and n.name == getattr(fn, "__name__", None)), None)
    if node is None:
        return "unknown"
    names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
    if "on_epoch" in names or any(isinstance(n, ast.Constant) and n.value == "on_epoch" for n in ast.walk(node)):
        return "per_epoch"
    if (node.args.kwarg and node.args.kwarg.arg in names) or names & {"locals", "vars", "eval", "exec"}:
        return "unknown"
    return "returns" if any(_returns_value(n) for n in _own_nodes(node)) else "neither"


def _code_of(fn: Callable) -> Callable:
    """The function whose source says how `fn` reports: a functools.partial's function, a callable
    object's __call__ (Optuna's and Ray's class-based objectives), else fn itself."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    if not inspect.isfunction(fn) and not inspect.ismethod(fn) and callable(getattr(type(fn), "__call__", None)) \
            and not isinstance(fn, type):
        return type(fn).__call__
    return fn


def display_name(fn: Callable) -> str:
    """A trainer's name as its errors show it: a partial's or a callable object's too, which have no __name__."""
    return getattr(fn, "__name__", None) or getattr(_code_of(fn), "__qualname__", None) or type(fn).__name__


def _own_nodes(node):
    """The nodes of a function's body, not of the functions, lambdas and classes defined in it."""
    for child in ast.iter_child_nodes(node):
        if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            yield child
            yield from _own_nodes(child)


def _returns_value(node) -> bool:
    return (isinstance(node, ast.Return) and node.value is not None
            and not (isinstance(node.value, ast.Constant) and node.value.value is None))


def one_report_refusal(strategy: str, max_epochs: int, name: str) -> str | None:
    """Why `strategy` cannot run a trainer that reports once (returns its metrics), or None where it
    can: random and grid always, tpe with one epoch (its brackets are then one of full trials)."""
    why = (f"{strategy} stops and promotes trials by the epochs they report"
           if strategy in PER_EPOCH else
           f"tpe runs Hyperband brackets up to max_epochs {max_epochs} and learns from their rungs"
           if strategy == "tpe" and max_epochs > 1 else None)
    if why is None:
        return None
    instead = ("--max-epochs 1, or --strategy random or grid" if strategy == "tpe" else
               "--strategy random, grid or tpe")
    return (f"trainer {name} returns its metrics once instead of calling on_epoch after each epoch, and {why}: "
            f"call on_epoch(metrics, state) after every epoch, or use {instead} (docs/your-trainer.md)")


def one_report(returned, metric: str, name: str, others: tuple = ()) -> tuple[dict | None, str | None]:
    """(the metrics a trainer returned without calling on_epoch, what is wrong): a dict as it is, a
    number as the space's metric; anything else (None: it neither reported nor returned) is wrong.
    `others`: the space's other objectives and constrained metrics, which the example names too (a
    tuple of values, as Optuna's objectives return them, says nothing of which is which)."""
    if isinstance(returned, dict):
        return returned, None
    if _is_number(_scalar(returned)):
        return {metric: _scalar(returned)}, None
    got = "nothing" if returned is None else f"a {type(returned).__name__}"
    return None, (f"trainer {name} returned {got} and never called on_epoch: call on_epoch(metrics, state) after "
                  f"every epoch, or return the trial's metrics as a dict such as "
                  f"{ {k: 0.5 for k in dict.fromkeys((metric, *others))} } (docs/your-trainer.md)")


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
