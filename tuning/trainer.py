"""Moved to tuning.trial.trainer (issue 42). This name stays only for tuning/backend, which imports it
here until it imports tuning.trial.trainer; the same module object, so its state and patches are one."""

import sys

from tuning.trial import trainer

sys.modules[__name__] = trainer
