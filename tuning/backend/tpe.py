"""The tpe strategy: Optuna's TPE sampler through Ray's OptunaSearch, under asynchronous Hyperband
brackets (Tune's AsyncHyperBandScheduler, as many brackets as Optuna's HyperbandPruner makes:
tuning.progress.async_brackets). Imported lazily (it imports Ray).

Asynchronous, as Optuna's own pruner is: a trial is stopped at a rung as soon as it ranks below
the rung's cut, so TPE hears of it before the next proposal. Under the synchronous brackets of
hyperband and bohb (tuning/backend/hyperband.py) a whole bracket was proposed before any of its
rungs was decided: 27 proposals of LCBench's first bracket came from the prior, the rung losers
were told only when the rung filled, and TPE's good set closed around the first few trials
promoted on noisy early rungs (mean regret 9.0 on lcbench_126029, random search 4.0; 3.8 now,
Optuna's TPE with its pruner 3.9: docs/strategies.md). Each trial's bracket is drawn away from a
first rung that ranks unlike the top (tuning/backend/agreeing.py, strategies.TpeBrackets), and a
trial drawn at random (Interleaved.explored) starts past a first rung not yet known to agree.

Optuna is told what its own HyperbandPruner would tell it (Pruned): a trial that Hyperband stopped
before the full budget is PRUNED, with its curve as intermediate values, and only a trial that
reached max_t is COMPLETE with its value there. TPE then ranks every complete trial above every
pruned one, and pruned ones by how far they got, then by their last value (Optuna's
_split_pruned_trials). Ray's OptunaSearch told it every stopped trial was COMPLETE with the value
at the rung where it stopped, so TPE compared epoch-1 losses with epoch-27 ones as if they were
the same measurement; on real learning curves, whose first epoch ranks configurations almost at
random, it then did worse than random search (docs/strategies.md). Optuna's sampler is used as it
ships (TPESampler with its defaults, seeded), so a comparison against it is against what users
would leave for, with two changes: a fifth of the trials are drawn at random (Interleaved below),
and past 1,000 finished trials it sees a window of them (tuning/backend/tpewindow.py), so a
proposal's cost stops growing with the run.

A space with several objectives or constraints (tuning.objectives) runs MultiObjective below instead:
Optuna's multi-objective TPE (MOTPE) under the same brackets, whose rungs promote by non-dominated
sorting (MO-ASHA: tuning/backend/mo.py), and a trial stopped early is told as pruned, without
intermediate values (tuning/backend/tpewindow.py, pruned_by_front).
"""

from __future__ import annotations

import numpy as np
import optuna
from ray.tune.search.optuna import OptunaSearch

from tuning import objectives, spaces
from tuning import params as param_types
from tuning.compare import peers
from tuning.backend import mo, rayinternals
from tuning.backend.tpewindow import FINISHED, RUNG_ATTR, WindowedTPE


class DefineByRun:
    """The space as an Optuna define-by-run function (tuning.peers.ask). A class, not a closure:
    OptunaSearch pickles it with its state for resumes."""

    def __init__(self, params: dict):
        self.params = params

    def __call__(self, trial) -> dict:
        # The values, which OptunaSearch hands the trial in place of what Optuna holds (a choice
        # of lists or dicts is held by its index: peers.ask).
        return peers.ask(trial, self.params)


# SMAC3's default for hyperparameter optimisation (HyperparameterOptimizationFacade's random design),
# not tuned here: BOHB's is 1/3 (docs/strategies.md#tpe).
RANDOM_FRACTION = 0.2


class Interleaved(WindowedTPE):
    """WindowedTPE that draws about RANDOM_FRACTION of its trials at random, whatever its densities
    say: random configurations interleaved with the model's, as SMAC does (Hutter et al., LION 2011)
    and BOHB does (Falkner et al., ICML 2018). TPE's good set is a handful of trials, and once the
    first ones to reach the full budget agree, nothing in the sampler looks away from them (on
    lcbench_168910 one seed ended at regret 44, random search's mean 12.7: docs/strategies.md#tpe).
    Which trials are random is fixed by the seed and the trial's number, so a repeated or resumed
    run draws the same ones."""

    def __init__(self, *args, seed: int | None = None, random_fraction: float = RANDOM_FRACTION, **kwargs):
        super().__init__(*args, seed=seed, **kwargs)
        self.turn_seed, self.random_fraction = seed, random_fraction
        self.explored: set[int] = set()  # the numbers of the trials drawn at random, startup ones too

    def before_trial(self, study, trial):
        super().before_trial(study, trial)
        # TPESampler's own test for its startup trials, which it draws at random.
        starting = len(study._get_trials(deepcopy=False, states=FINISHED, use_cache=True)) < self._n_startup_trials
        if starting or self._random_turn(trial):
            self.explored.add(trial.number)

    def _random_turn(self, trial) -> bool:
        key = [trial.number] if self.turn_seed is None else [self.turn_seed, trial.number]
        return bool(np.random.default_rng(key).random() < self.random_fraction)

    def sample_relative(self, study, trial, search_space):
        return {} if self._random_turn(trial) else super().sample_relative(study, trial, search_space)

    def sample_independent(self, study, trial, param_name, param_distribution):
        if self._random_turn(trial):  # Optuna's own random sampler, as for its startup trials
            return self._random_sampler.sample_independent(study, trial, param_name, param_distribution)
        return super().sample_independent(study, trial, param_name, param_distribution)


class PrunedAware(OptunaSearch):
    """OptunaSearch that tells Optuna a trial stopped below max_t was pruned (module docstring)."""

    def __init__(self, *args, max_t: int, **kwargs):
        super().__init__(*args, **kwargs)
        self.max_t = max_t

    def explores(self, trial_id: str) -> bool:
        """Whether the sampler drew `trial_id` at random (tuning/backend/agreeing.py starts it
        past a first rung that may mislead). The trial's study's sampler: a resume replaces it."""
        ot_trial = rayinternals.optuna_trial(self, trial_id)
        return ot_trial is not None and ot_trial.number in getattr(ot_trial.study.sampler, "explored", ())

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False):
        ot_trial = rayinternals.optuna_trial(self, trial_id)
        step = (result or {}).get("training_iteration")
        value = (result or {}).get(self.metric)
        if ot_trial is None or error or step is None or value is None or step >= self.max_t:
            return super().on_trial_complete(trial_id, result, error)
        # Tune does not pass the result it stopped the trial on to on_trial_result (Ray calls the
        # searcher only on CONTINUE): it is the trial's last intermediate value, so report it here.
        if step not in ot_trial.storage.get_trial(ot_trial._trial_id).intermediate_values:
            ot_trial.report(value, step)
        rayinternals.tell_optuna(self, trial_id, optuna.trial.TrialState.PRUNED)


def searcher(space: spaces.Space, seed: int, max_t: int, points: list[dict] | None = None) -> OptunaSearch:
    """OptunaSearch over the space, seeded, with random trials interleaved, told of trials stopped
    below max_t as pruned; `points`: configurations to run first (a warm start)."""
    return PrunedAware(space=DefineByRun(space.params), metric=space.metric, mode=space.mode, max_t=max_t,
                       sampler=Interleaved(seed=seed),
                       points_to_evaluate=[param_types.to_positions(space.params, p) for p in points or []] or None)


class MultiObjective(OptunaSearch):
    """OptunaSearch over several objectives, or under constraints: Optuna's TPE, which with several
    objectives is MOTPE (Ozaki et al., JAIR 2022: the good/bad split by non-domination rank, ties
    broken by hypervolume contribution), a fifth of its trials drawn at random as with one
    (Interleaved). Each constrained metric's amount (tuning.objectives.amounts: above 0 violated)
    is told through Trial.set_constraint, which replaced TPESampler's constraints_func in Optuna 5,
    before the trial's values: TPE then puts every feasible trial before every infeasible one, and
    infeasible ones by their total violation (Deb's rules, as tuning.objectives ranks the tables).
    A trial stopped below max_t is told as pruned, with where it stopped and its point there as
    RUNG_ATTR (tpewindow.pruned_by_front orders them)."""

    def __init__(self, *args, constraints: dict, rule: mo.Rule, max_t: int, **kwargs):
        super().__init__(*args, **kwargs)
        self.constraints, self.rule, self.max_t = constraints, rule, max_t

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False):
        ot_trial = rayinternals.optuna_trial(self, trial_id)
        if result and self.constraints and ot_trial is not None:
            for name, amount in objectives.amounts(result, self.constraints).items():
                ot_trial.set_constraint(name, amount)
        step = (result or {}).get("training_iteration")
        if ot_trial is None or error or step is None or step >= self.max_t:
            return super().on_trial_complete(trial_id, result, error)
        values, violation = self.rule.point(result)
        ot_trial.set_user_attr(RUNG_ATTR, {"step": step, "values": values.tolist(), "violation": violation})
        rayinternals.tell_optuna(self, trial_id, optuna.trial.TrialState.PRUNED)


def multi_objective_searcher(space: spaces.Space, seed: int, max_t: int,
                             points: list[dict] | None = None) -> OptunaSearch:
    """MultiObjective over the space's objectives and constraints, seeded, told of trials stopped
    below max_t as pruned; `points`: configurations to run first (a warm start)."""
    ways = objectives.of(space)
    several = len(ways) > 1
    return MultiObjective(space=DefineByRun(space.params), metric=list(ways) if several else space.metric,
                          mode=list(ways.values()) if several else space.mode, constraints=dict(space.constraints),
                          rule=mo.Rule.of(space), max_t=max_t,
                          sampler=Interleaved(seed=seed, by_front=True),
                          points_to_evaluate=[param_types.to_positions(space.params, p) for p in points or []] or None)
