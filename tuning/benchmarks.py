"""Moved to tuning.compare.benchmarks (issue 42). This name stays only for tuning/backend, which imports it
here until it imports tuning.compare.benchmarks; the same module object, so its state is one."""

import sys

from tuning.compare import benchmarks

sys.modules[__name__] = benchmarks
