"""Moved to tuning.trial.data (issue 42). This name stays only for tuning/backend, which imports it
here until it imports tuning.trial.data; the same module object, so its state and patches are one."""

import sys

from tuning.trial import data

sys.modules[__name__] = data
