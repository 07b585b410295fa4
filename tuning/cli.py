"""What the command lines share: a bad flag is one line and exit 2, like every other bad input;
the checks every numeric flag's value passes; a checked --storage-path; SIGTERM, which stops
a command the way Ctrl-C does; and the quieting of Ray's and Optuna's output, which only the
commands do (library code leaves logging as its caller set it)."""

import argparse
import contextlib
import contextvars
import functools
import importlib
import inspect
import logging
import math
import os
import re
import signal
import tempfile
from pathlib import Path


# --smoke starts its local Ray with this many CPUs on any machine. Which trials ASHA stops, and so
# the epochs run and what the report can compute, depends on the order results arrive in. On 2
# workers the seeded smoke run stopped the same trial in every recorded run; replaying those losses
# in the orders 4 workers allow (a laptop), the worst trial could report first and ASHA stop nothing.
SMOKE_CPUS = 2


class TuningError(Exception):
    """Bad input (a flag, a space, a trainer, a folder, data, a cluster address): one line saying
    what to change. The Python API raises it; the commands exit 2 with the line."""


class UsageError(TuningError):
    """A flag or an argument that makes no sense."""


# The checks behind tuning.search() and tuning.run are the same, and their lines name flags; a caller in
# Python reads them with its own keywords (--max-concurrent-trials: max_concurrent_trials).
_SPEAKING_FLAGS = contextvars.ContextVar("tuning_speaking_flags", default=False)


@contextlib.contextmanager
def speaking_flags():
    """Within it (the commands), refusals name flags as the user typed them."""
    token = _SPEAKING_FLAGS.set(True)
    try:
        yield
    finally:
        _SPEAKING_FLAGS.reset(token)


def in_words(command: str, python: str) -> str:
    """A refusal's phrase as the caller acts: a flag's words (within speaking_flags) or Python's,
    where swapping --flag for its keyword would not read (--resume it: tuning.resume)."""
    return command if _SPEAKING_FLAGS.get() else python


# Flags whose keyword has another name: tuning.run --resume DIR is tuning.resume(results_dir).
ALIASES = {"resume": "results_dir"}
# Optuna's and Ray Tune's names for what a search takes (docs/from-optuna.md, docs/from-ray-tune.md):
# a migrating user's first guess, told its name here instead of Python's "unexpected keyword".
FOREIGN = {"n_trials": "num_samples", "timeout": "time_budget", "n_jobs": "max_concurrent_trials",
           "direction": "objectives", "directions": "objectives", "metric": "objectives", "mode": "objectives",
           "sampler": "strategy", "pruner": "strategy", "scheduler": "strategy", "search_alg": "strategy",
           "resources_per_trial": "cpus_per_trial", "config": "space", "param_space": "space",
           "num_workers": "workers_per_trial", "stop": "max_epochs"}


def foreign(name: str, flags: bool = False) -> str | None:
    """What a search calls Optuna's or Ray Tune's `name`, as a keyword or (flags) a --flag; None if unknown."""
    ours = FOREIGN.get(name.replace("-", "_"))
    if ours is None or not flags:
        return ours
    return "--" + {"objectives": "objective NAME:min", "space": "space"}.get(ours, ours).replace("_", "-")


def in_keywords(fn=None, *, like=None):
    """`fn`'s refusals, outside speaking_flags(), with each --flag that is one of its keywords (or of
    `like`'s, a function whose keywords the caller knows too) named as the keyword."""
    if fn is None:
        return functools.partial(in_keywords, like=like)
    names = set(inspect.signature(fn).parameters) | (set(inspect.signature(like).parameters) if like else set())

    def keyword(match):
        name = ALIASES.get(match.group(1), match.group(1).replace("-", "_"))
        return name if name in names else match.group(0)

    own = set(inspect.signature(fn).parameters)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        unknown = [k for k in kwargs if k not in own]
        if unknown:  # Python's TypeError names it, not what to give instead
            ours = foreign(unknown[0])
            raise UsageError(f"{fn.__name__}() takes no {unknown[0]}=" + (
                f", a name from Optuna or Ray Tune: give {ours}=" if ours in own else
                f"; its keywords are {', '.join(sorted(own - {'argv'}))}"))
        try:
            return fn(*args, **kwargs)
        except TuningError as exc:
            if not _SPEAKING_FLAGS.get() and exc.args and isinstance(exc.args[0], str):
                exc.args = (re.sub(r"(?<![\w-])--([a-z][a-z0-9-]*)", keyword, exc.args[0]),) + exc.args[1:]
            raise
    return wrapper


class Parser(argparse.ArgumentParser):
    """argparse, except that a bad flag raises UsageError (one line) instead of dumping the usage."""

    def error(self, message):
        # A value refused by one of the checks below: "argument --seeds: must be ..." reads as
        # "--seeds must be ..., got 0", which says all there is to say.
        refused = re.fullmatch(r"argument (\S+): (must .*)", message)
        if refused:
            raise UsageError(f"{refused[1]} {refused[2]}")
        flag = re.match(r"unrecognized arguments: --([\w-]+)", message)
        ours = foreign(flag[1], flags=True) if flag else None
        raise UsageError(f"{message}: a name from Optuna or Ray Tune; give {ours}" if ours else
                         f"{message} (see --help)")


# Checks for numeric flags, as argparse `type=`: a value that makes no sense (a count below 1, a
# negative size, NaN, inf) is refused while the flags are parsed, before anything starts or is written.

def int_at_least(minimum: int):
    """A whole number of at least minimum."""
    def check(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a whole number, got {_shown(text)}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {_shown(text)}")
        return value
    return check


positive_int = int_at_least(1)  # counts: samples, epochs, workers, jobs
non_negative_int = int_at_least(0)  # seeds, retries


def _number(text: str, fits, says: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and fits(value)):
        raise argparse.ArgumentTypeError(f"must be {says}, got {_shown(text)}")
    return value


def positive_float(text: str) -> float:
    """A finite number above 0: a learning rate, a budget, CPUs per trial."""
    return _number(text, lambda v: v > 0, "a positive number")


def non_negative_float(text: str) -> float:
    """A finite number of 0 or more: GPUs per trial."""
    return _number(text, lambda v: v >= 0, "a number of 0 or more")


def fraction(text: str) -> float:
    """A number in (0, 1]: an accuracy to reach."""
    return _number(text, lambda v: 0 < v <= 1, "in (0, 1]")


def comma_separated(each):
    """A comma-separated list, every item checked by each: `--lr 1e-3,3e-3`."""
    def check(text: str) -> list:
        try:
            return [each(item) for item in text.split(",")]
        except argparse.ArgumentTypeError as exc:
            raise argparse.ArgumentTypeError(f"{exc} (in {text})") from None
    return check


def storage_path(value: str) -> str:
    """--storage-path, checked before anything starts: a folder (made absolute: Tune takes no
    relative path), or a URI opened the way Ray will open it (pyarrow's FileSystem.from_uri).
    An unknown scheme fails without touching the network; for a cloud URI pyarrow may ask the
    service (the bucket's region), as Ray would a moment later."""
    if "://" not in value:
        return str(_writable_folder(Path(value).expanduser().absolute(), value))
    if value.startswith("file://"):  # a folder too: checked as one (pyarrow opens any path)
        _writable_folder(Path(value[len("file://"):]), value)
        return value
    import pyarrow.fs

    try:
        pyarrow.fs.FileSystem.from_uri(value)
    except Exception as exc:  # ArrowInvalid, OSError, ...: whatever pyarrow raises, Ray would too
        reason = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise argparse.ArgumentTypeError(f"{value} cannot be opened ({reason}): give a folder every node "
                                         "reaches, or a URI pyarrow opens such as s3://bucket/path") from None
    return value


def _writable_folder(path: Path, value: str) -> Path:
    """A local --storage-path where a folder can be made: its nearest existing part is a folder this
    process can write in, or ArgumentTypeError, before Ray starts."""
    existing = next(p for p in (path, *path.parents) if p.exists())
    if not existing.is_dir():
        raise argparse.ArgumentTypeError(f"{value}: {existing} is a file, not a folder: give a folder every node reaches")
    refused = unwritable(existing)
    if refused:
        raise argparse.ArgumentTypeError(f"{value}: cannot write in {refused[0]} ({refused[1]}): give a folder "
                                         "you can write, that every node reaches")
    return path


def unwritable(folder: Path) -> tuple[Path, str] | None:
    """(the folder's nearest existing part, why nothing can be written there), or None: tried with a
    file made and removed, not guessed from permissions (root, read-only mounts and immutable
    folders each answer otherwise)."""
    here = next(p for p in (folder, *folder.parents) if p.exists())
    try:
        tempfile.TemporaryFile(dir=here).close()
    except OSError as exc:
        return here, str(exc.strerror or exc)
    return None


def _shown(text: str) -> str:
    """A flag's value in a refusal: as typed, or '' where it is empty (the line ended in "got ")."""
    return text if text.strip() else repr(text)


def check_folder_named(flag: str, value) -> None:
    """A folder flag given '' (a script's empty variable): it was the current folder, or the default,
    silently; refused in the commands' words (--results-dir)."""
    if value is not None and not isinstance(value, (str, os.PathLike)):  # Path(5): a TypeError's traceback
        raise UsageError(f"--{flag.replace('_', '-')} takes a folder's path, got {value!r}")
    if value is not None and not str(value).strip():
        raise UsageError(f"--{flag.replace('_', '-')} '' names no folder: give one, or leave it out")


def output_file(value: str) -> Path:
    """A file a command writes when its work is done (doctor --json), as argparse `type=`: a name in
    a folder that exists and this process can write in (probed), not a folder itself, so that the
    work is not done for nothing."""
    if not value.strip():  # Path('') is the current folder: "' is a folder"
        raise argparse.ArgumentTypeError("'' names no file: give one, or leave the flag out")
    path = Path(value).expanduser().absolute()
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{value} is a folder: give a file name in it, e.g. {Path(value) / 'checks.json'}")
    if not path.parent.is_dir():
        what = "is a file, not a folder" if path.parent.exists() else "does not exist"
        raise argparse.ArgumentTypeError(f"{value}: {path.parent} {what}: give a file in a folder you can write")
    refused = unwritable(path.parent)
    if refused:
        raise argparse.ArgumentTypeError(f"{value}: cannot write in {refused[0]} ({refused[1]}): give a "
                                         "file in a folder you can write")
    return path


_stopped_by = signal.SIGINT  # the signal that stopped the command early: its exit status is 128 + it


@contextlib.contextmanager
def sigterm_stops_like_ctrl_c():
    """Within, SIGTERM (timeout, kill, Kubernetes, Slurm, `ray job stop`) stops the command the way
    Ctrl-C does: it is handed to whatever handles SIGINT at that moment. During tune.run that is
    Tune's handler, which saves the experiment and returns; elsewhere Python's KeyboardInterrupt."""
    previous = signal.signal(signal.SIGTERM, _forward_to_sigint)
    try:
        yield
    finally:
        if previous is not None:  # None: a handler not set from Python, which cannot be put back
            signal.signal(signal.SIGTERM, previous)


def _forward_to_sigint(signum, frame) -> None:
    global _stopped_by
    _stopped_by = signum
    handler = signal.getsignal(signal.SIGINT)
    if not callable(handler):  # SIG_IGN or SIG_DFL: stop all the same
        raise KeyboardInterrupt
    handler(signal.SIGINT, frame)


def interrupted_status() -> int:
    """The exit status of a command stopped early by a signal, as a shell reports one killed by
    it: 130 after Ctrl-C, 143 after SIGTERM."""
    return 128 + _stopped_by


class _DropNoise(logging.Filter):
    """Ray messages that say nothing a tuning user can act on, and bury the progress table."""

    NOISE = ("Token authentication is enabled", "Generated new authentication token",
             "Checkpoint successfully created", "Started a local Ray instance",
             "Wrote the latest version of all result files",
             # Its hint names tune.run(..., resume=True); the summary names --resume DIR and tuning.resume.
             "Experiment has been interrupted, but the most recent state was saved",
             # An ERROR line on a clean stop (a spent time budget, Ctrl-C) too; the summary names every
             # failed trial with its error, and what a stop left to do.
             "Trials did not complete:",
             # Tune's INFO line at the end of every tune.run: the summary's "Ended after ..." says it.
             "Total run time:",
             # The bench's raw tune.run, its result files off as ours are (tuning's own runs do not
             # read them back: tuning/backend/snapshots.py).
             "Failed to fetch metrics for", "Could not fetch metrics for")

    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.getMessage()
        return not any(n in msg for n in self.NOISE) and not _vanished_temp_file(msg)


def _vanished_temp_file(msg: str) -> bool:
    """Tune's syncer listed one of Tune's own temporary state files (written, then renamed into
    place) and the rename won the race before the copy: it logs a traceback, and the next sync
    copies the renamed file. A sync that fails on anything else is still shown."""
    return "Last sync command failed" in msg and "-tmp-" in msg and "No such file" in msg


def quiet_libraries(ray: bool = True) -> None:
    """For the commands, at startup: Optuna logs warnings only (not a line per trial), and Ray's
    noise (_DropNoise) is filtered out of the "ray" logger's handler, which every Ray and Tune
    logger's records reach (Ray's own, set up when ray is imported, and not propagating further).
    ray=False: a command that never starts Ray, which need not import it (a second)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if not ray:
        return
    importlib.import_module("ray")  # its import sets up the handler the filter goes on
    noise = _DropNoise()
    logger = logging.getLogger("ray")
    for where in (logger, *logger.handlers):
        if not any(isinstance(f, _DropNoise) for f in where.filters):
            where.addFilter(noise)
