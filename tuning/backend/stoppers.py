"""What ends a trial or a whole run besides the scheduler: max_epochs, a comparison's budget, and a
result tuning cannot use (tuning.session turns it into one line). Imported lazily by
tuning.backend (it imports Ray)."""

from __future__ import annotations

from ray.tune.stopper import CombinedStopper, MaximumIterationStopper, Stopper

from tuning import contract, results

# Every result a trial reports through on_epoch (or its return) carries it (trainables._epoch_reporter):
# one without it came from Ray's own tune.report called by the trainer.
OURS = "ended_at"


class BudgetStopper(Stopper):
    """Stops the whole run once its trials have trained budget_iterations iterations (epochs,
    fidelity units) between them."""

    def __init__(self, budget_iterations: int):
        self.budget_iterations, self.used = budget_iterations, 0

    def __call__(self, trial_id, result):
        self.used += 1  # one result is one iteration of one trial
        # Past the budget, stop each trial at its next result: stop_all alone lets the
        # running trials report many more iterations before they stop.
        return self.used >= self.budget_iterations

    def stop_all(self):
        return self.used >= self.budget_iterations


class MetricErrorStopper(Stopper):
    """Stops the whole run at the first result whose metrics cannot be used (the space's metric
    missing, or not a number, or a result the trainer reported to Ray itself): every other trial
    would only repeat it. tuning.session turns the result into one line."""

    def __init__(self):
        self.error = None

    def __call__(self, trial_id, result):
        if OURS not in result and not result.get(results.METRIC_ERROR):
            # Tune hands the callbacks this same dict next: results.jsonl and the tables see why.
            result[results.METRIC_ERROR] = contract.RAY_REPORT
        if result.get(results.METRIC_ERROR):
            self.error = self.error or result[results.METRIC_ERROR]
            return True
        return False

    def stop_all(self):
        return self.error is not None


class EveryStopper(CombinedStopper):
    """Tune's CombinedStopper asks its stoppers with any() over a generator: once one says stop
    (max_epochs, at a trial's last epoch) the rest never see the result, and a budget missed one
    iteration of every trial trained to the end (a comparison's random search ran 491 of 486)."""

    def __call__(self, trial_id, result):
        return any([s(trial_id, result) for s in self._stoppers])


def stopper(max_t: int, budget_iterations: int | None):
    """Each trial stops at max_t; the whole run at a result whose metrics cannot be used and, with a
    budget, once the budget is spent (BudgetStopper)."""
    stoppers = [MaximumIterationStopper(max_t), MetricErrorStopper()]
    if budget_iterations is not None:
        stoppers.append(BudgetStopper(budget_iterations))
    return EveryStopper(*stoppers)
