"""Peers: what a user would run instead of this service, as reference rows in every comparison.

A comparison's strategies run through Ray Tune (tuning/compare/runner.py). Beside them it runs Optuna
the way Optuna's own users run it, in this process, without Ray, on the same trainer:

- optuna_tpe: ``TPESampler(seed=seed)``, its defaults otherwise, every trial trained to max_t
  epochs; its value is the metric at max_t.
- optuna_tpe_hb: the same sampler with ``HyperbandPruner(min_resource=grace_period,
  max_resource=max_t, reduction_factor=...)`` from the space; each epoch ``trial.report(value,
  epoch)``, then ``trial.should_prune()`` ends the trial with ``TrialPruned``.

A space of several objectives or constraints (tuning/objectives.py) has its own two, each a study
with the space's directions and every trial trained to max_t (Optuna prunes no multi-objective
study): optuna_nsga2, ``NSGAIISampler(seed=seed)`` (Deb et al. 2002; population 50 as shipped), and
optuna_motpe, ``TPESampler(seed=seed)``, which over several objectives is MOTPE (Ozaki et al. 2022).
Each constraint's amount (above 0: violated) is told with ``trial.set_constraint``, which replaced
the samplers' ``constraints_func`` in Optuna 5; both then rank feasible trials first.

The budget is charged as the Ray runs charge it: each epoch a trial trains is 1/max_t of a full
evaluation, and a run stops at the epoch that spends its budget (a trial cut there is told to
Optuna as pruned). The rows have the shape of the Ray recorder's, so tuning.compare turns both
into runs.csv rows the same way. In process, because a peer is the library as shipped, not our
service around it; so its wall-clock time carries no Ray overhead.

In-process peers need an evaluation that is cheap to call here: a benchmark of tuning.compare.benchmarks
(``fn(config, t, max_t, seed)``, a pure function) or a replay (tuning/compare/recorded.py: the nearest
recorded configuration's epoch, a lookup). The CIFAR trainer and a user's own trainer would mean
training in this process, one trial at a time: peers are not run for them.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from typing import Callable

from tuning import conditions, objectives, spaces
from tuning.compare import mobench, recorded as replay
from tuning.compare.benchmarks import BENCHMARKS

log = logging.getLogger(__name__)

PEERS = ("optuna_tpe", "optuna_tpe_hb")
MO_PEERS = ("optuna_nsga2", "optuna_motpe")  # for a space of several objectives or constraints
NOT_RUN = "peers: not run for this trainer (in-process peers need a benchmark)"
MO_NOTE = ("Peers, marked \"(peer)\" and drawn dashed, are what a user would run instead: Optuna's "
           "multi-objective samplers in process (no Ray) on the same trainer, charged per epoch like ours, every "
           "trial trained to max_t. optuna_nsga2: NSGAIISampler (seeded, population 50 as shipped); optuna_motpe: "
           "TPESampler (seeded), MOTPE over several objectives. Constraints are told with trial.set_constraint.")
NOTE = ("Peers, marked \"(peer)\" and drawn dashed, are what a user would run instead, with "
        "Optuna's own sampler and pruner, in process (no Ray) on the same trainer, and charged per epoch "
        "like ours (each epoch a trial trains is 1/max_t of a full evaluation; a run stops at the epoch "
        "that spends its budget). optuna_tpe: TPESampler (seeded, defaults otherwise), every trial trained "
        "to max_t. optuna_tpe_hb: the same sampler with HyperbandPruner (the space's grace period as "
        "min_resource, max_t as max_resource, its reduction factor), the metric reported every epoch. "
        "Run one trial at a time without Ray, their wall-clock time carries none of Ray's overhead.")

Curve = Callable[[int], dict]  # epoch t (1..max_t) -> that epoch's result


def supported(space: spaces.Space) -> bool:
    """Whether peers can evaluate this space's trainer in process: a benchmark or a replay."""
    return (replay.is_replay(space.trainer) or mobench.name_of(space.trainer) is not None
            or (isinstance(space.trainer, str) and space.trainer in BENCHMARKS))


def declared(names: tuple, space: spaces.Space) -> tuple:
    """An experiment's peers for its space: the default, PEERS, means MO_PEERS for a space of several
    objectives or constraints (the single-metric ones would optimise its first objective alone)."""
    return MO_PEERS if objectives.multi(space) and tuple(names) == PEERS else tuple(names)


def report_lines(exp: dict) -> list[str]:
    """What the report says about peers: what they are where they ran, why not where they did not."""
    if exp.get("peers"):
        return [MO_NOTE if set(exp["peers"]) <= set(MO_PEERS) else NOTE]
    return [NOT_RUN] if exp.get("peers_not_run") else []


def _evaluator(space: spaces.Space, max_t: int, seed: int,
               recorded: replay.Recorded | None) -> Callable[[dict], Curve]:
    """config -> its learning curve, evaluated lazily one epoch at a time, as the Ray trainables
    (tune_parts.SyntheticBenchmark, backend/replay.ReplayTrainable) evaluate it."""
    if replay.is_replay(space.trainer):
        rec = recorded or replay.read(replay.folder_of(space.trainer))

        def replayed(config: dict) -> Curve:
            nearest = replay.order(rec, config)  # once per trial, as ReplayTrainable.reset_config
            return lambda t: replay.epoch(rec, nearest, t)

        return replayed
    several = mobench.name_of(space.trainer)
    if several:
        fn = mobench.MO_BENCHMARKS[several].fn
        return lambda config: (lambda t: fn(config, t, max_t, seed))
    fn = BENCHMARKS[space.trainer].fn
    return lambda config: (lambda t: {"loss": fn(config, t, max_t, seed), "epoch": t})


def _suggest(trial, name: str, p: spaces.Param):
    if isinstance(p, (spaces.LogUniform, spaces.Uniform)):
        return trial.suggest_float(name, p.low, p.high, log=isinstance(p, spaces.LogUniform))
    if isinstance(p, (spaces.IntUniform, spaces.IntLogUniform)):
        return trial.suggest_int(name, p.low, p.high, log=isinstance(p, spaces.IntLogUniform))
    if p.by_position:  # Optuna's categories must be None, bools, numbers or strings: lists and dicts by index
        return p.values[trial.suggest_categorical(name, list(range(len(p.values))))]
    return trial.suggest_categorical(name, list(p.values))


def ask(trial, params: dict) -> dict:
    """The space as Optuna's define-by-run, for the peers and the tpe strategy alike (so both sample
    one space the same way): parents first, a parameter asked for only where its conditions hold,
    so an inactive one is never sampled (absent from the configuration) and TPE fits each parameter
    on the trials where it existed."""
    chosen: dict = {}
    for name in conditions.order(params):
        if conditions.holds(params[name], chosen):
            chosen[name] = _suggest(trial, name, params[name])
    return {k: chosen[k] for k in params if k in chosen}  # declaration order, as Tune's configs


@contextlib.contextmanager
def _warnings_only(optuna):
    """Optuna logs an INFO line per trial; a peer run's hundreds would bury the comparison's own
    lines. Its level is raised for this call only and put back as it was, so a user's or a CLI's own
    setting survives: library code configures no logging (only a CLI does)."""
    before = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(max(before, optuna.logging.WARNING))
    try:
        yield
    finally:
        optuna.logging.set_verbosity(before)


def _study(optuna, peer: str, space: spaces.Space, seed: int, max_t: int):
    """The peer's study: its sampler, its pruner, the space's direction or directions."""
    if peer in MO_PEERS:  # Optuna prunes no multi-objective study: every trial to max_t
        sampler = (optuna.samplers.NSGAIISampler(seed=seed) if peer == "optuna_nsga2"
                   else optuna.samplers.TPESampler(seed=seed))
        return optuna.create_study(study_name=f"{peer}-s{seed}", sampler=sampler,
                                   directions=[f"{w}imize" for w in objectives.of(space).values()])
    # A smoke run's max_t can be below the space's grace period: then there is one rung, max_t.
    pruner = (optuna.pruners.HyperbandPruner(min_resource=min(space.grace_period, max_t), max_resource=max_t,
                                             reduction_factor=space.reduction_factor)
              if peer == "optuna_tpe_hb" else optuna.pruners.NopPruner())
    # A fixed study name: HyperbandPruner picks each trial's bracket from a hash of the study name
    # and the trial number, and the default name is a random UUID. Same seed, same rows.
    return optuna.create_study(study_name=f"{peer}-s{seed}", direction=f"{space.mode}imize",
                               sampler=optuna.samplers.TPESampler(seed=seed), pruner=pruner)


def _told(trial, space: spaces.Space, result: dict) -> tuple:
    """A multi-objective trial's values at its last epoch, its constraints set first (a missing or
    diverged objective is NaN: Optuna records the trial as failed)."""
    for name, amount in objectives.amounts(result, space.constraints).items():
        trial.set_constraint(name, amount)
    values = []
    for name in objectives.of(space):
        v = result.get(name)
        ok = v is not None and not result.get("diverged") and math.isfinite(float(v))
        values.append(float(v) if ok else math.nan)
    return tuple(values)


def run(peer: str, space: spaces.Space, *, seed: int, budget: float, max_t: int,
        recorded: replay.Recorded | None = None) -> list[dict]:
    """One peer run until its trials have trained `budget` full evaluations between them: its
    results in order, each as the Ray recorder keeps one (trial_id, training_iteration, the
    metrics, epoch, time_this_iter_s, wall_s, config; a replay's "replayed")."""
    import optuna  # only when a peer runs: a second or so of import

    if peer not in PEERS + MO_PEERS:
        raise ValueError(f"peer {peer!r} unknown: use any of {', '.join(PEERS + MO_PEERS)}")
    if (peer in MO_PEERS) != objectives.multi(space):
        raise ValueError(f"peer {peer!r} searches {'several objectives' if peer in MO_PEERS else 'one metric'}, "
                         f"and the space {objectives.describe(space)}: use any of "
                         f"{', '.join(MO_PEERS if objectives.multi(space) else PEERS)}")
    curve_of = _evaluator(space, max_t, seed, recorded)
    pruning, several = peer == "optuna_tpe_hb", peer in MO_PEERS
    budget_epochs = int(round(budget * max_t))  # as the Ray runs' BudgetStopper counts it
    rows: list[dict] = []
    started = time.monotonic()

    def objective(trial):
        config = ask(trial, space.params)
        curve, trial_id = curve_of(config), f"t{trial.number:05d}"
        value = space.worst
        for t in range(1, max_t + 1):
            tick = time.perf_counter()
            result = curve(t)
            seconds = time.perf_counter() - tick
            if "replayed" not in result:  # a replayed epoch carries its recorded time and cost
                result["time_this_iter_s"] = seconds
            rows.append({**result, "training_iteration": t, "trial_id": trial_id,
                         "wall_s": time.monotonic() - started, "config": dict(config)})
            metric = result.get(space.metric)
            # A diverged or missing value is told to Optuna as the space's worst, as Ray's trials report it.
            finite = metric is not None and math.isfinite(float(metric)) and not result.get("diverged")
            value = float(metric) if finite else space.worst
            if pruning:
                trial.report(value, t)
            if len(rows) >= budget_epochs:  # the budget is spent: this trial is the run's last
                trial.study.stop()
                if t < max_t:
                    raise optuna.TrialPruned()
                return _told(trial, space, result) if several else value
            if result.get("done"):  # a recorded epoch that diverged ended its trial there
                return _told(trial, space, result) if several else value
            if pruning and trial.should_prune():
                raise optuna.TrialPruned()
        return _told(trial, space, result) if several else value

    with _warnings_only(optuna):
        study = _study(optuna, peer, space, seed, max_t)
        # Every trial trains at least one epoch, so the budget bounds the trials; study.stop ends it.
        study.optimize(objective, n_trials=budget_epochs)
    pruned = sum(t.state == optuna.trial.TrialState.PRUNED for t in study.trials)
    log.debug("%s-s%d: %d trials (%d pruned), %d epochs, %.1f s", peer, seed, len(study.trials), pruned,
              len(rows), time.monotonic() - started)
    return rows
