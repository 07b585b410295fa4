"""Moved to tuning.compare.peers (issue 42). This name stays only for tuning/backend, which imports it
here until it imports tuning.compare.peers; the same module object, so its state is one."""

import sys

from tuning.compare import peers

sys.modules[__name__] = peers
