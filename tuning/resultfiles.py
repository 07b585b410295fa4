"""A results folder's files, read and written: each written whole (tuning.atomic) or not at all,
and a file that cannot be written or read is one line naming it (WriteError, ReadError), which each
command words as its own error. tuning.results re-exports every name here: callers say
results.write_json, results.read_table.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pandas as pd

from tuning import atomic

log = logging.getLogger(__name__)


class WriteError(Exception):
    """A results file cannot be written (a full disk, a path made unwritable): one line naming it."""

    def __init__(self, path: Path, exc: OSError):
        super().__init__(f"cannot write {path} ({exc.strerror or exc})")
        self.path = path


def write_atomic(path: Path, write) -> None:
    """write(tmp) writes the content, which then replaces `path` whole (tuning.atomic); a file that
    cannot be written raises WriteError, naming it."""
    try:
        atomic.write_atomically(path, write)
    except OSError as exc:
        raise WriteError(path, exc) from None


def write_text(path: Path, text: str) -> None:
    write_atomic(path, lambda p: p.write_text(text, encoding="utf-8"))


def write_bytes(path: Path, data: bytes) -> None:
    write_atomic(path, lambda p: p.write_bytes(data))


def write_json(path: Path, obj) -> None:
    write_atomic(path, lambda p: p.write_text(json.dumps(obj, indent=2, default=plain_json) + "\n"))


def plain_json(value):
    """What json cannot write, as the JSON it stands for: a numpy or torch array (a space's fixed
    setting, say) as a list, a numpy scalar or one-element tensor as its number, a set as a sorted
    list; pandas' missing value (an inactive categorical parameter's cell) as null; anything else as
    its text, as before."""
    if value is pd.NA or value is pd.NaT:  # str() would write the text "<NA>" into run.json's best row
        return None
    if hasattr(value, "tolist") and callable(value.tolist):  # numpy arrays and scalars, torch tensors
        try:
            return value.tolist()
        except (TypeError, ValueError, RuntimeError):
            pass
    if isinstance(value, (set, frozenset)):
        return sorted(value, key=str)
    return str(value)


def write_tables(results_dir: Path, trials: pd.DataFrame, epochs: pd.DataFrame) -> None:
    for name, df in (("trials", trials), ("epochs", epochs)):
        write_atomic(results_dir / f"{name}.csv", lambda p, df=df: df.to_csv(p, index=False))
        write_atomic(results_dir / f"{name}.parquet", lambda p, df=df: df.to_parquet(p, index=False))


# Columns read from CSV as text: a hex id such as 1234e567 would otherwise be read as a number.
# recorded_trial: the recorded trial a replayed row stands for (tuning/compare/recorded.py).
ID_COLUMNS = {"trial_id": str, "recorded_trial": str}


class ReadError(Exception):
    """A results file is there but cannot be read: `reason` is one line, `path` names the file.
    Each caller words it as its own error (a report's, a replay's)."""

    def __init__(self, path: Path, exc: Exception):
        self.path, self.reason = path, (str(exc).splitlines() or [type(exc).__name__])[0]
        super().__init__(f"cannot read {path} ({self.reason})")


def read_table(folder: Path, name: str) -> pd.DataFrame | None:
    """The table `name` of a results folder: name.parquet where there is one (it keeps the types),
    else name.csv with the ids as text; None where neither is there."""
    parquet, csv = Path(folder) / f"{name}.parquet", Path(folder) / f"{name}.csv"
    path = parquet if parquet.exists() else csv
    if not path.exists():
        return None
    try:  # pandas 3 parses floats exactly: a value read from the CSV is the one written, to the last bit
        return pd.read_parquet(path) if path == parquet else _read_csv(path)
    except Exception as exc:  # pyarrow and the CSV parser raise many types; any of them means unreadable
        if path == parquet and csv.exists():  # the same table, written beside it
            log.warning("%s cannot be read (%s): reading %s", parquet, type(exc).__name__, csv.name)
            try:
                return _read_csv(csv)
            except Exception:
                pass
        raise ReadError(path, exc) from None


def _read_csv(path: Path) -> pd.DataFrame:
    """Our CSV tables end with a newline (written whole, then renamed): one that ends mid-row was cut
    short since (a copy that stopped), and its last row would be read with a number cut mid-digit."""
    df = pd.read_csv(path, dtype=ID_COLUMNS)
    with open(path, "rb") as f:  # df is not empty: neither is the file
        cut = len(df) and f.seek(-1, os.SEEK_END) >= 0 and f.read(1) != b"\n"
    if cut:
        log.warning("%s ends mid-row (cut short, as by a copy that stopped): its last row is left out", path)
    return df.iloc[:-1] if cut else df


def read_json(path: Path):
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ReadError(path, exc) from None
