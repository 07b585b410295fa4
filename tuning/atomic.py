"""Writing a file so that no reader ever sees half of it: the content goes to a temporary name
beside the file, which then replaces it in one rename (atomic on POSIX filesystems).

Standard library only: the trainer and the data code, which DDP ranks and Ray's workers import,
use it without pulling in pandas. tuning.results.write_atomic adds the one-line WriteError.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable


def write_atomically(path: Path, write: Callable[[Path], None]) -> None:
    """write(tmp) puts the content in a temporary file, which then replaces `path`: a crash or a
    full disk never leaves a half-written file under the name, and the previous one stays whole.
    An OSError is raised as it is, once the temporary file is removed."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    except OSError:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass
        raise
