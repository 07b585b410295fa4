"""A run's record, run.json, and its typed parts.

RunRecord is what was asked for and, as the run goes, what came of it; read and written here only.
tuning.api fills it in before the run, tuning.session as the run starts and ends, growth when a run
is extended; the report, warm start, --resume and the GPU steps read it back through ``read``,
which turns a missing or damaged file into one line. Its inner parts are typed too, and run.json
keeps the plain JSON it always had, so a run written before they were is read the same. A trial's
record is tuning.results.TrialRecord.
"""

from __future__ import annotations

import csv
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from tuning import results
from tuning.cli import TuningError

FILE = "run.json"


class RecordError(TuningError):
    """A folder holds no readable run.json: the message says which folder and why."""


@dataclass
class Resources:
    """What each trial holds: CPUs and GPUs (a fraction shares one)."""
    cpu: float = 1
    gpu: float = 0


@dataclass
class DataOrigin:
    """Where a run's data came from: "cifar10" or "synthetic" (with the folder), "trainer" for a
    trainer that brings its own, "benchmark:<name>" for a built-in benchmark."""
    kind: str = ""
    root: str | None = None


@dataclass
class Segment:
    """One stretch of a run: a first start, a resume or an extension. The open one has ended None."""
    started: float  # epoch seconds
    wall_s: float | None = None
    ended: str | None = None  # how it ended: "finished", "interrupted", ...


@dataclass
class MlflowLink:
    """Where the run logs (tuning.tracking): a resume continues the same parent run."""
    uri: str | None = None
    experiment: str | None = None
    default: bool = False  # the default store (./mlruns), whatever the folder it resolves to now
    experiment_id: str | None = None
    parent_run_id: str | None = None


@dataclass
class Incumbent:
    """The run's best trial as its trials.csv row holds it, with its test figures. `row` is keyed by
    column, since the columns are the space's own parameters and the trainer's own metrics."""
    trial_id: str
    epochs: int
    row: dict


def _part(cls, value):
    """A typed part of RunRecord from run.json's plain JSON (keys it does not know are dropped); an
    empty or missing one is None."""
    if not value or isinstance(value, cls):
        return value or None
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in value.items() if k in names})


def _incumbent(value) -> Incumbent | None:
    if value is None or isinstance(value, Incumbent):
        return value
    return Incumbent(trial_id=str(value.get("trial_id", "")), epochs=int(value.get("epochs") or 0), row=dict(value))


def _plain(value):
    if isinstance(value, Incumbent):
        return value.row
    if dataclasses.is_dataclass(value):
        return dataclasses.asdict(value)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


@dataclass
class RunRecord:
    # What was asked for: tuning.api, before anything starts.
    space: str  # the space's name: a module of search_spaces/, a .py path, or "" for a Space built in Python
    strategy: str
    seed: int
    num_samples: int
    max_epochs: int
    trainer: str = "cifar"  # "cifar", a benchmark, or "module:function" (a function's own module and name)
    argv: list | None = None  # tuning.run's flags; None for a run started from Python
    max_failures: int = 2
    max_concurrent_trials: int | None = None
    smoke: dict = field(default_factory=dict)
    storage_path: str | None = None
    # The run's folder under storage_path: its results dir's name and a random suffix, so that two
    # runs whose results dirs share a name stay apart. None in a run.json older than it: the name alone.
    storage_name: str | None = None
    tune_logs: bool = False
    precision: str | None = None
    time_budget_s: float | None = None
    warm_start: dict | None = None
    points_to_evaluate: list | None = None  # the user's configurations to run first (tuning/points.py)
    data_args: dict = field(default_factory=dict)
    resources_per_trial: Resources = field(default_factory=Resources)
    workers_per_trial: int = 1
    # A trainer that returns its metrics instead of calling on_epoch (tuning.contract): each trial is
    # one report, so max_epochs is 1, and this is the `epochs` it is passed (the declared budget).
    trainer_epochs: int | None = None
    address: str | None = None
    # The whole declaration (spacejson.to_json), so a resume or a report needs no space file.
    declaration: dict = field(default_factory=dict)
    # Where the run came from: tuning.session, as its first segment starts.
    data: DataOrigin | None = None
    fixed: dict = field(default_factory=dict)
    versions: dict = field(default_factory=dict)
    git_commit: str | None = None
    started: str | None = None
    metric: str = "loss"
    mode: str = "min"
    params: dict = field(default_factory=dict)  # the parameter declarations (spacejson.declarations)
    # How it goes, across segments (a first run, resumes, extensions).
    status: str = "planned"
    error: str | None = None  # why a run stopped on its trainer's bad output
    resumes: int = -1
    time_used_s: float = 0.0
    wall_time_s: float = 0.0  # the sum of the segments' wall_s
    # One entry per segment: started (epoch seconds), wall_s and how it ended; the open one has
    # ended None. A segment killed before it could close is counted up to the last file it wrote.
    segments: list[Segment] = field(default_factory=list)
    extensions: list = field(default_factory=list)
    # What it came to (tuning.session at the end of each segment).
    trials: int = 0
    cpu_hours: float = 0.0
    gpu_hours: float = 0.0
    stopped_early: int = 0
    failed: int = 0
    diverged: int = 0
    memory_growing: int = 0
    resumed_trials: int = 0
    recomputed_epochs: int = 0
    best: Incumbent | None = None  # the incumbent (results.incumbent), with its test figures
    best_note: str = ""  # how the incumbent was chosen, when not at the full budget
    # MLflow tracking (tuning.tracking): uri, experiment, its id, the parent run's id; a resume
    # continues that parent run.
    mlflow: MlflowLink | None = None
    extra: dict = field(default_factory=dict)  # keys this version does not know, kept as they were

    def __post_init__(self):  # run.json's plain JSON, as from_json passes it, into the typed parts
        self.resources_per_trial = _part(Resources, self.resources_per_trial) or Resources()
        self.data, self.mlflow = _part(DataOrigin, self.data), _part(MlflowLink, self.mlflow)
        self.segments = [_part(Segment, s) for s in self.segments]
        self.best = _incumbent(self.best)

    def to_json(self) -> dict:
        out = {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self) if f.name != "extra"}
        return {**self.extra, **out}

    @classmethod
    def from_json(cls, data: dict) -> "RunRecord":
        names = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        record = cls(**{k: v for k, v in data.items() if k in names})
        record.extra = {k: v for k, v in data.items() if k not in names}
        return record

    def write(self, run_dir: Path) -> None:
        results.write_json(Path(run_dir) / FILE, self.to_json())


REQUIRED = ("space", "strategy", "seed", "num_samples", "max_epochs")


def read(run_dir: Path, what: str = "") -> RunRecord:
    """The record of the run in run_dir. `what` opens the one-line error (a flag: "--resume DIR")."""
    run_dir = Path(run_dir)
    where = f"{what}: " if what else ""
    if not run_dir.is_dir():
        raise RecordError(f"{where}{run_dir}: no such folder; give the results dir of a tuning.run")
    if not exists(run_dir):
        raise RecordError(f"{where}{run_dir} is not a tuning.run results dir (no {FILE}): give the folder a "
                          "run was started in")
    try:
        data = results.read_json(run_dir / FILE)
    except results.ReadError as exc:
        raise RecordError(f"{where}{exc.path} cannot be read ({exc.reason})") from None
    missing = [k for k in REQUIRED if not isinstance(data, dict) or k not in data]
    if missing:
        raise RecordError(f"{where}{run_dir / FILE} lacks {missing}: not a {FILE} a tuning run wrote")
    return RunRecord.from_json(data)


def reported_metrics(run_dir: Path, what: str = "") -> list[str]:
    """The metrics a finished run's trainer reported: the columns of its epochs.csv that are neither a
    parameter nor bookkeeping, from run.json and the table's header only (tuning.spaces asks whenever
    a Space names a replay of the run, so this stays cheap)."""
    rec = read(run_dir, what)
    path = Path(run_dir) / "epochs.csv"
    try:
        with open(path, newline="") as f:
            header = next(csv.reader(f), [])
    except OSError:
        raise RecordError(f"{what + ': ' if what else ''}{run_dir} has no readable epochs.csv (the run is "
                          f"{rec.status!r}): a run writes its tables when it ends") from None
    params = declarations(rec)
    return [c for c in header if c not in params and results.is_metric(c)]


def declarations(rec: RunRecord) -> dict:
    """The parameter declarations a run searched, as run.json holds them (spacejson.declarations; read
    back with spacejson.from_declarations): `params`, written as the run starts, else the planned
    declaration's, for a run that stopped before it started; {} for a run.json older than both.
    Every reader of a run's parameters asks here (spaces imports this module, so the parsing
    stays there and this module does not import spaces)."""
    return rec.params or rec.declaration.get("params") or {}


def exists(run_dir: Path) -> bool:
    return (Path(run_dir) / FILE).is_file()
