"""Moved to tuning.trial.trialstate (issue 42). This name stays only for tuning/backend, which imports it
here until it imports tuning.trial.trialstate; the same module object, so its state and patches are one."""

import sys

from tuning.trial import trialstate

sys.modules[__name__] = trialstate
