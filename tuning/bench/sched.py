"""``python -m tuning.bench``'s scheduler section: what pausing costs and what made it cheap.

Epochs recomputed under BOHB, trial-seconds ASHA spent on trials it later stopped, one pause and
resume of a CIFAR trial in a reused actor and in a new one, a resumed trial's state read back or
recalled from memory, one BOHB proposal by HpBandSter's own code and by ours, and the wall time of
Hyperband and BOHB against ASHA at equal budget.
"""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from tuning import spaces
from tuning.trial import trainer, trialstate
from tuning.bench.harness import row, run_tune, synthetic


def bench_scheduler(quick: bool) -> list[dict]:
    n_img = 256 if quick else 512
    source = synthetic(n_img)
    bohb = run_tune(spaces.load("cifar_bohb"), "bohb", num_samples=9, max_epochs=3, cpus=1, source=source,
                    max_train=n_img, max_val=128)
    seen, again = set(), 0
    for r in bohb.rows:
        again += (r["trial_id"], r["epoch"]) in seen
        seen.add((r["trial_id"], r["epoch"]))
    resumed = len({r["trial_id"] for r in bohb.rows if r.get("restored_from")})
    n, max_t = (4, 2) if quick else (16, 8)
    asha = run_tune(spaces.load("cifar_asha"), "asha", num_samples=n, max_epochs=max_t, cpus=1, source=source,
                    max_train=n_img, max_val=128)
    per_trial: dict[str, list] = {}
    for r in asha.rows:
        per_trial.setdefault(r["trial_id"], []).append(r)
    stopped = sum(rs[-1]["time_total_s"] for rs in per_trial.values() if rs[-1]["training_iteration"] < max_t)
    total = sum(rs[-1]["time_total_s"] for rs in per_trial.values())
    return [row("scheduler", "bohb_recomputed_epochs", again, "epochs",
                f"9 trials, 3 epochs, eta 3; {resumed} trials paused and resumed"),
            row("scheduler", "asha_stopped_trial_seconds_share", stopped / total, "fraction",
                f"{n} trials, max {max_t} epochs, eta 2: trial-seconds of trials ASHA stopped early"),
            *_pause_cost(quick, source), *_recall_cost(), *_proposal_cost(quick), *_hyperband_wall(quick)]


def _gaps(rows: list[dict]) -> float:
    """Median time between consecutive results outside the epochs' own training and evaluation."""
    return statistics.median(b["wall_s"] - a["wall_s"] - b["train_time_s"] - b["eval_time_s"]
                             for a, b in zip(rows, rows[1:]))


def _pause_cost(quick: bool, source) -> list[dict]:
    """Two CIFAR trials that take every CPU, so one runs at a time: once back to back (FIFO), once
    paused after every epoch, so that each result is one pause and one resume (in the actor the
    other trial just left) away from the last. The difference of the median gaps is their cost.
    Then what that costs where Tune does not keep the actor (its search is finished and nothing
    else waits, as every pause of ours was before the open search): one trial alone, paused after
    every epoch, so each resume starts a new actor, against the same trial unpaused."""
    epochs, cpus = (2 if quick else 6), os.cpu_count() or 1

    def gap(n: int, pause) -> float:
        return _gaps(run_tune(spaces.load("cifar_asha"), "random", num_samples=n, max_epochs=epochs, cpus=cpus,
                              source=source, max_train=256, max_val=64, pause_every_result=pause).rows)

    detail = f"CIFAR trials x {epochs} epochs on 256 images, {cpus:g} CPUs each"
    return [row("scheduler", "pause_resume_s", gap(2, True) - gap(2, False), "s",
                f"one pause and resume in a reused actor, beyond a plain epoch boundary; 2 {detail}"),
            row("scheduler", "pause_resume_new_actor_s", gap(1, "new_actor") - gap(1, False), "s",
                f"the same where Tune ends the actor (search finished): a new actor per resume; 1 {detail}")]


def _recall_cost(repeats: int = 50) -> list[dict]:
    """A resumed CIFAR trial's state: read back from the checkpoint it just wrote, or recalled from
    the process's memory (tuning.backend.trainables), median of `repeats`."""
    import tempfile

    from tuning.backend import trainables

    model = trainer.make_model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    F.cross_entropy(model(torch.randn(8, 3, 32, 32)), torch.zeros(8, dtype=torch.long)).backward()
    opt.step()  # the optimizer's moments exist, as in a real checkpoint
    state = {"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": 1}
    with tempfile.TemporaryDirectory() as d:
        trialstate.write_checkpoint(state, d)
        trainables.remember(state, d)
        times = {}
        for name, read in (("read", lambda: trialstate.read_checkpoint(d)), ("recall", lambda: trainables.recalled(Path(d)))):
            took = []
            for _ in range(repeats):
                t = time.perf_counter()
                assert read() is not None
                took.append(1000 * (time.perf_counter() - t))
            times[name] = statistics.median(took)
        size = (Path(d) / trialstate.CHECKPOINT_FILE).stat().st_size / 1e6
    detail = f"the CIFAR model's state (width 16, AdamW), {size:.2f} MB on local disk; median of {repeats}"
    return [row("scheduler", "resume_state_read_ms", times["read"], "ms", f"read back from the checkpoint; {detail}"),
            row("scheduler", "resume_state_recall_ms", times["recall"], "ms", f"recalled from memory; {detail}")]


def _proposal_cost(quick: bool) -> list[dict]:
    """One BOHB proposal from a fitted KDE on counting ones (16 dimensions): HpBandSter's own
    get_config, which draws its candidates one scalar at a time, against ours (vectorised), on the
    same model."""
    import numpy as np
    from hpbandster.optimizers.config_generators.bohb import BOHB

    from tuning.compare import benchmarks
    from tuning.backend import bohb

    space = spaces.load("counting_ones")
    model = bohb.VectorisedBOHB(bohb.configspace(space, seed=0))
    np.random.seed(0)
    for _ in range(2 * model.min_points_in_model):  # enough points for its KDEs at budget 9
        config = dict(model.configspace.sample_configuration())
        bohb.observe(model, config, benchmarks.counting_ones(config, 9, 81, 0), 9)
    assert model.kde_models, "no KDE fitted"
    model.random_fraction = 0  # every proposal from the model
    n = 5 if quick else 20
    times = {}
    for name, propose in (("hpbandster", lambda: BOHB.get_config(model, 9)), ("ours", lambda: model.get_config(9))):
        t = time.perf_counter()
        for _ in range(n):
            propose()
        times[name] = 1000 * (time.perf_counter() - t) / n
    detail = f"counting ones, 16 dimensions, {model.num_samples} candidates each; mean of {n}"
    return [row("scheduler", "bohb_proposal_hpbandster_ms", times["hpbandster"], "ms", f"HpBandSter's get_config; {detail}"),
            row("scheduler", "bohb_proposal_ms", times["ours"], "ms", f"ours, vectorised; {detail}")]


def _hyperband_wall(quick: bool) -> list[dict]:
    """Wall time of Hyperband and BOHB (synchronous brackets: many pauses) against ASHA (none)
    on counting ones at the same budget of full evaluations."""
    if quick:  # minutes even at small budgets; tests/test_hyperband.py runs these paths
        return []
    budget, max_t = 100, 81
    wall = {s: run_tune(spaces.load("counting_ones"), s, num_samples=budget * max_t + 1, max_epochs=max_t, cpus=1,
                        budget_iterations=budget * max_t, snapshot_every_step=False).wall_s
            for s in ("asha", "hyperband", "bohb")}
    detail = f"counting ones, {budget} full evaluations of {max_t} iterations; ASHA {wall['asha']:.1f} s"
    return [row("scheduler", f"{s}_to_asha_wall_ratio", wall[s] / wall["asha"], "x", detail)
            for s in ("hyperband", "bohb")]
