"""Moved to tuning.compare.mobench (issue 42). A user-facing name: the spaces, experiments and committed
comparisons name their trainers `tuning.mobench:<name>` (run.json keeps it), so this module is that
one under its old name too."""

import sys

from tuning.compare import mobench

sys.modules[__name__] = mobench
