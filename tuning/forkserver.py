"""Moved to tuning.trial.forkserver (issue 42). This name stays only for tuning/backend, which imports it
here until it imports tuning.trial.forkserver; the same module object, so its state and patches are one."""

import sys

from tuning.trial import forkserver

sys.modules[__name__] = forkserver
