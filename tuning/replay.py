"""Moved to tuning.compare.recorded (issue 42). This name stays only for tuning/backend (backend/replay.py
and trainables.py import it here) until they import tuning.compare.recorded; the same module object."""

import sys

from tuning.compare import recorded

sys.modules[__name__] = recorded
