"""The Tune trainable of a replayed run (trainer ``replay:DIR``; what it serves: tuning/replay.py).

A class Trainable, as tune_parts.SyntheticBenchmark: an epoch is a pure function of (config,
epoch), so the only state is the iteration, which Tune checkpoints and restores itself (Tune saves
only when Hyperband or BOHB pauses the trial).
"""

from __future__ import annotations

import time

import ray
from ray import tune

from tuning import params as param_types
from tuning.compare import recorded as replay


class ReplayTrainable(tune.Trainable):
    """Each step waits the recorded epoch's time times time_scale, then returns what the nearest
    recorded configuration reported at that epoch; its time_this_iter_s is the recorded one, so
    Tune's clocks run at the recorded pace."""

    def setup(self, config, *, recorded: replay.Recorded, time_scale: float):
        self.recorded, self.time_scale = recorded, time_scale
        self.node_id = ray.get_runtime_context().get_node_id()
        self.reset_config(config)

    def reset_config(self, new_config):
        self.nearest = replay.order(self.recorded, {k: param_types.plain(v) for k, v in new_config.items()})
        self.restored_from = 0
        return True

    def step(self):
        result = replay.epoch(self.recorded, self.nearest, self.iteration + 1)
        time.sleep(result["time_this_iter_s"] * self.time_scale)
        # ended_at, as every result of ours has it (tuning/backend/stoppers.py): to the microsecond.
        return {**result, "restored_from": self.restored_from, "node_id": self.node_id, "ended_at": time.time()}

    def save_checkpoint(self, checkpoint_dir: str):
        return {"epoch": self.iteration}

    def load_checkpoint(self, checkpoint):
        self.restored_from = self.iteration  # Tune has restored the iteration already


def replay_trainable(spec):
    """What each trial of spec (a backend.RunSpec over a replay:DIR space) runs, once the run asked
    for is checked against what was recorded (more epochs than recorded: ReplayError, one line)."""
    space = spec.space
    recorded = replay.read(replay.folder_of(space.trainer))
    replay.check(recorded, space, spec.max_epochs)
    return tune.with_parameters(ReplayTrainable, recorded=recorded,
                                time_scale=float(space.fixed.get("time_scale", replay.TIME_SCALE)))
