"""results.jsonl: every result appended as it arrives, the file the tables are built from.

Part of tuning.backend (every Ray call of the project lives in this package).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from tuning import results


def row_log(path: Path):
    """A Tune callback appending every result to `path` as it arrives, before the step's
    experiment snapshot: after a crash the file holds what the snapshot on storage knows, or more
    (the snapshot is copied there in the background); a resume trains those epochs again, and
    the tables count them as recomputed.

    A row that cannot be written (a full disk) raises results.WriteError out of tune.run: Tune
    calls this before it records the result and its checkpoint, so the saved experiment stays
    behind the file, and a resume trains that epoch again and logs it then."""
    from ray.tune import Callback

    def append(text: str) -> None:
        try:
            with open(path, "a") as f:
                f.write(text)
        except OSError as exc:
            raise results.WriteError(path, exc) from None

    # A line cut short by a crash or a full disk must not swallow the next row.
    if path.exists() and path.stat().st_size:
        with open(path, "rb") as f:
            f.seek(-1, os.SEEK_END)
            if f.read(1) != b"\n":
                append("\n")

    class RowLog(Callback):
        error: results.WriteError | None = None

        def on_trial_result(self, iteration, trials, trial, result, **info):
            try:
                append(json.dumps({**result, "trial_id": trial.trial_id}, default=str) + "\n")
            except results.WriteError as exc:
                self.error = exc
                raise

    return RowLog()


def raising_write_errors(tune_run, rows):
    """tune.run, except that a row the `rows` callback could not write comes out as the
    results.WriteError it is: Tune wraps a callback's exception in a TuneError of its traceback."""

    def call(*args, **kwargs):
        try:
            return tune_run(*args, **kwargs)
        except Exception:
            if rows.error is not None:
                raise rows.error from None
            raise

    return call
