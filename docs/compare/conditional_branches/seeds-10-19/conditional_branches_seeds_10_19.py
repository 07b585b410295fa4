"""conditional_branches, seeds 10-19, random search, BOHB and TPE: a second draw of ten seeds."""
import dataclasses, importlib.util, pathlib
_f = pathlib.Path("experiments/conditional_branches.py")
_s = importlib.util.spec_from_file_location("cb", _f); _m = importlib.util.module_from_spec(_s); _s.loader.exec_module(_m)
EXPERIMENT = dataclasses.replace(_m.EXPERIMENT, strategies=("random", "bohb", "tpe"), seeds=tuple(range(10, 20)))
