"""Whether low fidelities mislead: how well a lower epoch ranks configurations like the highest
epoch enough trials reached, as Spearman's rank correlation over the trials that reached both.

A multi-fidelity search (ASHA, Hyperband, BOHB) keeps the trials that look best at a rung. That
pays only if the order at the rung is the order at the end; with a trainer whose first epochs
say little, the search spends its budget on noise. ``agreement`` measures it from the learning
curves alone: a search strategy may call it live (it is plain Python over dicts, linear in the
number of trials for each rung), and both reports show it through ``report_blocks``.

No Ray, no torch: curves in, numbers out.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from scipy import stats

if TYPE_CHECKING:
    import pandas as pd

MIN_TRIALS = 5  # fewer pairs than this and ρ swings by chance: with 4, ±1 comes 1 time in 12
MOST_SHOWN = 6  # rungs a report shows: more turns a section into a table nobody reads
TITLE = "Do low epochs rank like the last?"


@dataclass(frozen=True)
class Agreement:
    rung: int  # the lower epoch (training_iteration)
    top: int  # the highest epoch that at least min_trials trials reached
    # Spearman rank correlation between the metric at `rung` and at `top`, over trials that reached
    # both; nan if undefined (constant values)
    rho: float
    n: int  # how many trials reached both


def _finite(v) -> bool:
    return v is not None and math.isfinite(v)


def _top(curves: Mapping[Hashable, Mapping[int, float]], min_trials: int) -> tuple[int | None, Counter]:
    """(the highest epoch with a finite value in at least min_trials curves or None, the count of
    such curves per epoch)."""
    counts = Counter(e for c in curves.values() for e, v in c.items() if _finite(v))
    reached = [e for e, k in counts.items() if k >= min_trials]
    return (max(reached) if reached else None), counts


def agreement(curves: Mapping[str, Mapping[int, float]], rungs: Iterable[int] | None = None,
              min_trials: int = MIN_TRIALS) -> list[Agreement]:
    """curves: trial id -> {epoch: metric value}. rungs: the lower epochs to measure (default: every
    epoch below top at which at least min_trials trials have a finite value). Non-finite values are
    ignored. Returns [] when no epoch is reached by min_trials trials, else one Agreement per rung
    with n >= min_trials, ascending by rung.

    The direction of the metric (min or max) does not matter: a rank correlation is the same
    either way."""
    top, counts = _top(curves, min_trials)
    if top is None:
        return []
    if rungs is None:
        rungs = [e for e, k in counts.items() if k >= min_trials and e < top]
    out = []
    for rung in sorted({r for r in rungs if r < top}):
        pairs = [(c[rung], c[top]) for c in curves.values()
                 if _finite(c.get(rung)) and _finite(c.get(top))]
        if len(pairs) < min_trials:
            continue
        low, high = np.array(pairs, dtype=float).T
        # Constant values have no ranks to compare: nan, said so, rather than scipy's warning.
        rho = (math.nan if np.ptp(low) == 0 or np.ptp(high) == 0
               else float(stats.spearmanr(low, high).statistic))
        out.append(Agreement(rung=int(rung), top=int(top), rho=rho, n=len(pairs)))
    return out


FLOOR = 0.05  # a misleading rung's brackets keep a small share: the measurement itself may be wrong
TRUST = 0.5  # a rung whose ρ with the top is below this does not propose (adaptive's model)


class RungAgreement:
    """A running search's rung results and each rung's ρ with the top, recomputed only when a
    result arrived since (linear in the trials). What `adaptive` (tuning/backend/adaptive.py) and
    `tpe`'s brackets (tuning/backend/tpe.py) weigh their brackets and models by."""

    def __init__(self):
        self.curves: dict[str, dict[int, float]] = {}
        self._cached: dict[int, float] | None = None

    def observe(self, trial_id: str, budget: float, value: float) -> None:
        self.curves.setdefault(trial_id, {})[int(budget)] = float(value)
        self._cached = None

    def observe_epoch(self, trial_id: str, step, value, rungs) -> None:
        """A trial's result at any epoch: kept where the epoch is one of `rungs` and the value a
        finite number, whatever bracket the trial runs in (adaptive's and tpe's brackets)."""
        if step in rungs and isinstance(value, (int, float)) and math.isfinite(value):
            self.observe(trial_id, step, value)

    def rho(self) -> dict[int, float]:
        """rung -> ρ with the top, for the rungs measured; the top itself maps to 1."""
        if self._cached is None:
            found = agreement(self.curves, min_trials=MIN_TRIALS)
            self._cached = {a.rung: a.rho for a in found if math.isfinite(a.rho)}
            if found:
                self._cached[found[0].top] = 1.0
        return self._cached

    def trusted(self, budget: float) -> bool:
        rho = self.rho()
        top = max(rho) if rho else None
        if top is None or budget >= top or int(budget) not in rho:
            return True  # nothing measured against it yet: trusted, as BOHB trusts every rung
        return rho[int(budget)] >= TRUST

    def judges(self, budget: float, lowest: bool) -> bool:
        """Whether a random trial may first be judged at `budget`: not where its ρ with the top is
        measured below TRUST, and at the `lowest` rung only once measured at TRUST or above."""
        return self.trusted(budget) and (not lowest or int(budget) in self.rho())

    def weight(self, budget: float) -> float:
        """A bracket starting at `budget`: its ρ with the top clipped to [FLOOR, 1], 1 if unmeasured."""
        rho = self.rho().get(int(budget))
        return 1.0 if rho is None else float(np.clip(rho, FLOOR, 1.0))


def sentence(a: Agreement) -> str:
    """An agreement in words: "epoch 1 ranks like epoch 27: ρ = 0.06 (12 trials)"."""
    if math.isnan(a.rho):
        return (f"epoch {a.rung} ranks like epoch {a.top}: ρ undefined, every trial has the same value at "
                f"one of them ({a.n} trials)")
    return f"epoch {a.rung} ranks like epoch {a.top}: ρ = {_two(a.rho)} ({a.n} trials)"


def _two(rho: float) -> str:
    return f"{round(rho, 2) + 0.0:.2f}"  # + 0.0: -0.001 reads 0.00, not -0.00


# ---------------------------------------------------------------- for the reports

def from_rows(df: pd.DataFrame, trial: str | list[str] = "trial_id", epoch: str = "training_iteration",
              value: str = "loss", stand_in: str | None = "diverged") -> dict:
    """Curves from a table of rows, one per trial and epoch: {trial: {epoch: value}}. `trial` may
    name several columns (a comparison's trial ids are unique only within a run): the key is then
    a tuple. Rows whose `stand_in` column is true carry a diverged epoch's stand-in value, not a
    measurement, and are left out. Where an epoch was reported twice (recomputed after a resume),
    the later row counts."""
    import pandas as pd

    if df.empty or value not in df.columns:
        return {}
    keys = [trial] if isinstance(trial, str) else list(trial)
    rows = df
    if stand_in and stand_in in df.columns:
        rows = df[~df[stand_in].map(lambda v: str(v).lower() in ("true", "1", "1.0"))]  # bools or CSV text
    curves: dict = {}
    for key, e, v in zip(zip(*(rows[k] for k in keys)), rows[epoch], rows[value]):
        if pd.isna(e):
            continue
        v = math.nan if pd.isna(v) else float(v)
        curves.setdefault(key[0] if isinstance(trial, str) else key, {})[int(e)] = v
    return curves


def shown(curves: Mapping[Hashable, Mapping[int, float]], *, reduction_factor: int | None = None,
          grace: int = 1, min_trials: int = MIN_TRIALS, most: int = MOST_SHOWN) -> list[Agreement]:
    """The agreements a report shows: at most `most` rungs, those a multi-fidelity search decides
    at. Those are the epochs where some trial's curve ended below the top (where a scheduler
    stopped or paused it) and grace · reduction_factor^k (the rungs ASHA and Hyperband use with that
    factor). A FIFO run has neither, and every epoch is measurable: then a geometric spread, as
    rungs are, because a 27-epoch table of ρ hides the few numbers that matter."""
    every = agreement(curves, None, min_trials)
    if not every:
        return []
    top = every[0].top
    ended = {max(e for e, v in c.items() if _finite(v)) for c in curves.values() if any(map(_finite, c.values()))}
    ladder = set()
    if reduction_factor and reduction_factor > 1:
        r = max(1, int(grace))
        while r < top:
            ladder.add(r)
            r *= int(reduction_factor)
    preferred = [a for a in every if a.rung in (ended | ladder) - {top}]
    return _spread(preferred or every, most)


def _spread(pool: list[Agreement], most: int) -> list[Agreement]:
    """At most `most` of `pool` (ascending by rung), spread evenly on a log scale of the epoch,
    the first and the last always among them."""
    if len(pool) <= most:
        return pool
    logs = np.log([a.rung for a in pool])
    picked = {int(np.abs(logs - t).argmin()) for t in np.linspace(logs[0], logs[-1], most)}
    return [pool[i] for i in sorted(picked)]


def report_blocks(agreements: list[Agreement], *, trials: int, metric: str, pooled: str = "",
                  min_trials: int = MIN_TRIALS) -> list[tuple]:
    """The section both reports show (blocks as tuning.report.render draws them): a sentence per
    rung, what ρ means, and a table. Nothing with fewer than min_trials trials in all; a line
    saying why where there are enough trials but no epoch below the top that enough reached."""
    import pandas as pd

    if trials < min_trials:
        return []
    head = [("h2", TITLE)]
    if not agreements:
        return head + [("p", f"Not measured: it needs at least {min_trials} trials with a {metric} at a lower epoch "
                             "and at a later one (a run of one epoch a trial has no lower one).")]
    top = agreements[0].top
    table = pd.DataFrame({"rung (epoch)": [a.rung for a in agreements], "top (epoch)": [a.top for a in agreements],
                          "ρ": [_two(a.rho) if math.isfinite(a.rho) else "n/a" for a in agreements],
                          "n (trials)": [a.n for a in agreements]})
    return head + [
        ("ul", [sentence(a) for a in agreements]),
        ("p", f"Spearman's rank correlation between each trial's {metric} at a lower epoch and at epoch {top}, "
              f"the last epoch at least {min_trials} trials reached{pooled}, over the trials that reached both. "
              "Near 1: the lower epoch orders configurations as the last does, so a multi-fidelity search that "
              "stops trials there keeps the right ones. Near 0 (or below): it misleads, and a search that "
              "trusts it spends its budget on noise. Under a scheduler the trials at the top are the ones it "
              "promoted, so ρ is measured among survivors, which differ less than all trials do. Shown: the "
              "epochs where trials were stopped or paused, and the scheduler's rungs where the run records "
              f"them; for a run with neither, every epoch; at most {MOST_SHOWN}, spread on a log scale."),
        ("table", table)]
