"""Counts Tune's experiment snapshots (save_to_dir calls) and the driver's time in them, in one
overhead run of tuning.bench.harness (ours: N trials x S s of CPU work on 2 CPUs), for the tuning
on PYTHONPATH: with tuning/backend/snapshots.py ("cheaper") or without it ("tune", Tune's own).

    PYTHONPATH=$PWD python docs/bench/snapshots-2026-12-03/count_snapshots.py 100 0.5"""
import json, sys, time
from ray.tune.execution.tune_controller import TuneController
from tuning.bench import harness
stats = {"snapshots": 0, "snapshot_s": 0.0}
def counting(f):
    def g(self):
        t = time.perf_counter(); f(self); stats["snapshot_s"] += time.perf_counter() - t; stats["snapshots"] += 1
    return g
try:
    from tuning.backend import snapshots
    snapshots._save_to_dir = counting(snapshots._save_to_dir)
    stats["code"] = "cheaper"
except ImportError:
    TuneController.save_to_dir = counting(TuneController.save_to_dir)
    stats["code"] = "tune"
res = harness._overhead("ours", int(sys.argv[1]), float(sys.argv[2]))
stats.update({k: v for k, v in res.items() if isinstance(v, (int, float))})
print(json.dumps(stats))
