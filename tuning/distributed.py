"""Moved to tuning.trial.distributed (issue 42). This name stays only for tuning/backend, which imports it
here until it imports tuning.trial.distributed; the same module object, so its state and patches are one."""

import sys

from tuning.trial import distributed

sys.modules[__name__] = distributed
