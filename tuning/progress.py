"""How much of a run is done and how long the rest will take: the run's planned total in epochs,
worked out from its strategy's arithmetic, and an estimate of the time left from the epochs
measured so far. Plain data: tuning.backend feeds it Tune's trials, and the CLI, the live report
and the summary print what it returns.

The planned total is what the strategy will train if every trial runs as planned:
- grid and random: every trial its full budget;
- median: the same, as an upper bound: the rule stops trials at whatever epoch their values fall
  below the median, which no arithmetic tells in advance;
- ASHA: successive halving's expected cost, n trials at the first rung and 1/rf of them promoted
  at each next one (ASHA promotes asynchronously, so a run can differ a little either way);
- Hyperband and BOHB: the brackets the trials fill, each with its own rungs, exactly as
  tuning/backend/hyperband.py opens them (largest bracket first, band after band);
- tpe: ASHA's expected cost in each of its asynchronous brackets (async_brackets), weighted by the
  share of trials Tune draws into each.

While trials run, the count never reaches the plan: every trial running or waiting trains at least
one more epoch, so the live plan is at least the epochs done plus those, and the line says why it
grew past the first plan. ASHA is why it grows: a rung's first results cannot be judged against
results not in yet, so Tune's ASHA lets them go on, and trials started together all pass the rungs
they reach first (eight trials of up to 4 epochs, rungs at 1 and 2, two at a time: planned 16
epochs, trained 21, the first two trials to the full budget before a third had reported).
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path

from tuning import atomic


def rungs(first: float, max_t: int, rf: int) -> list[int]:
    """Epochs at which a successive-halving trial is judged: first, first*rf, ..., up to max_t."""
    out, r = [], float(first)
    while r < max_t - 1e-9:
        out.append(max(1, int(round(r))))
        r *= rf
    return sorted(set(out + [max_t]))


def halving_epochs(n: float, points: list[int], rf: int) -> float:
    """Epochs trained by n trials started together and halved by rf at each of `points`."""
    total, before, alive = 0.0, 0, float(n)
    for r in points:
        total += alive * (r - before)
        before, alive = r, alive / rf
    return total


def async_brackets(first: float, max_t: int, rf: int) -> list[tuple[float, list[int]]]:
    """(share of trials, rungs) of each bracket of Tune's asynchronous Hyperband as tpe runs it
    (tuning/backend/tpe.py): as many brackets as Optuna's HyperbandPruner makes, floor(log_rf(max_t
    / first)) + 1, bracket s judging trials from first * rf^s on (the last one: none, every trial to
    max_t). Tune draws each trial's bracket with probability e^(its rungs - the most rungs),
    normalised (AsyncHyperBandScheduler.on_trial_add, Ray 2.60). tpe moves trials away from a
    first rung that ranks unlike the top (tuning/backend/agreeing.py): the plan is Tune's draw,
    and where epoch 1 misleads a trial trains more epochs than planned."""
    n = int(math.floor(math.log(max_t / first, rf) + 1e-9)) + 1 if max_t > first else 1
    points = [rungs(first * rf ** s, max_t, rf) for s in range(n)]
    return list(zip(tune_bracket_shares([len(p) for p in points]), points))


def tune_bracket_shares(rung_counts: list[int]) -> list[float]:
    """Tune's probability of drawing each asynchronous bracket, from how many rungs each has:
    e^(its rungs - the most rungs), normalised (AsyncHyperBandScheduler.on_trial_add, Ray 2.60).
    The plan above and tpe's agreeing draw (tuning/backend/agreeing.py) both start from it."""
    most = max(rung_counts)
    weights = [math.exp(n - most) for n in rung_counts]
    total = sum(weights)
    return [w / total for w in weights]


def hyperband_brackets(max_t: int, eta: int) -> list[tuple[int, int]]:
    """(n0, r0) of one band's brackets, largest first, as Ray sizes them and PaperHyperBand opens
    them: n0 = ceil(s_max_1 / (s + 1) * eta^s), r0 = int(max_t * eta^-s)."""
    s_max_1 = int(round(math.log(max_t) / math.log(eta))) + 1
    return [(math.ceil(s_max_1 / (s + 1) * eta ** s), int(max_t * eta ** -s)) for s in range(s_max_1 - 1, -1, -1)]


def bracket_rungs(r0: int, s: int, max_t: int, eta: int) -> list[int]:
    """A synchronous bracket's rung budgets in epochs: r0, then the Hyperband paper's max_t * eta^(i - s)
    rounded, so that the last is max_t whatever max_t is. Ray's int(r * eta) from an r0 rounded down
    ends short of it (1, 2, 4, 8 for max_t 10, eta 2): no trial trained the full budget."""
    out = [max(1, r0)]
    for i in range(1, s + 1):
        out.append(max(out[-1] + 1, min(max_t, math.floor(max_t * eta ** (i - s) + 0.5))))
    return out


def bracket_epochs(n: int, rung_budgets: list[int], eta: int) -> int:
    """Epochs one bracket of n trials trains: all to its first rung, then ceil(n / eta) of them to
    the next, and so on (Ray's _Bracket.successive_halving, at bracket_rungs)."""
    total, before = 0, 0
    for r in rung_budgets:
        total += n * (r - before)
        before, n = r, math.ceil(n / eta)
    return total


def planned_epochs(strategy: str, *, trials: int, max_epochs: int, grace_period: int = 1,
                   reduction_factor: int = 2) -> int:
    """The run's planned total in epochs (module docstring). `trials`: for grid, the grid's points
    times its repeats; otherwise the number of samples."""
    if strategy in ("grid", "random", "median"):  # median: an upper bound (module docstring)
        return trials * max_epochs
    if strategy == "asha":
        first = min(grace_period, max_epochs)
        return int(round(halving_epochs(trials, rungs(first, max_epochs, reduction_factor), reduction_factor)))
    if strategy == "tpe":
        first = min(grace_period, max_epochs)
        return int(round(sum(halving_epochs(trials * share, points, reduction_factor)
                             for share, points in async_brackets(first, max_epochs, reduction_factor))))
    total, left = 0, trials
    brackets = hyperband_brackets(max_epochs, reduction_factor)
    while left > 0:  # band after band until the trials run out; the last bracket may be partial
        for i, (n0, r0) in enumerate(brackets):
            if r0 == 0:  # Ray opens no bracket whose first budget rounds down to 0 epochs
                continue
            rung_budgets = bracket_rungs(r0, len(brackets) - 1 - i, max_epochs, reduction_factor)
            total += bracket_epochs(min(n0, left), rung_budgets, reduction_factor)
            left -= n0
            if left <= 0:
                break
    return total


@dataclass
class Estimate:
    done: int  # epochs trained so far, this run in all (earlier segments included)
    planned: int  # the live plan: the first plan, or more where the run has outgrown it (estimate)
    elapsed_s: float  # the run's wall time, earlier segments included
    left_s: float | None  # None until the first epochs of this segment are in
    best: float | None
    first_plan: int | None = None  # the plan the run started with; None: the same as planned
    why: str = ""  # why the live plan is above the first one

    def line(self, metric: str, finished: bool = False) -> str:
        best = "" if self.best is None else f", best {metric} {self.best:.4g}"
        first = self.planned if self.first_plan is None else self.first_plan
        if finished:
            more = f" ({self.done - first} more: {self.why})" if self.done > first and self.why else ""
            return (f"Ended after {duration(self.elapsed_s)}: {self.done} epoch{'s' * (self.done != 1)} of {first} "
                    f"planned{more}{best}")
        # Floored, and below 100 until the end: a run whose trials still run is not done.
        share = min(99, int(100 * self.done / self.planned)) if self.planned else 0
        left = "estimating" if self.left_s is None else f"about {duration(self.left_s)} left"
        grew = f" (plan grew from {first}: {self.why})" if self.planned > first and self.why else ""
        return (f"Progress: {self.done}/{self.planned} epochs ({share} %){grew}, {duration(self.elapsed_s)} "
                f"elapsed, {left}{best}")


# Epochs shorter than this are cheap ones: what a trial costs the driver and Ray (starting it, its
# result, its checkpoint; tens of milliseconds) is then most of an epoch's wall time, which the
# trials' own epoch times do not hold.
CHEAP_EPOCH_S = 1.0


def estimate(*, done: int, done_at_start: int, planned: int, elapsed_s: float, epoch_s: list[float],
             at_once: int, best: float | None, running: int = 0, waiting: int = 0, strategy: str = "",
             recent_rate: float | None = None, budget_left_s: float | None = None) -> Estimate:
    """The live plan and the time left: the epochs still planned times the mean measured epoch time,
    divided by the trials that ran at once. `done_at_start`: the epochs an earlier segment had
    trained (a resume), which this segment's clock did not see. `running`, `waiting`: trials
    training or not started yet, each at least one epoch still to come, so the live plan is at least
    done + running + waiting and the line never shows the end while one runs. `recent_rate`: epochs
    per second since the last estimate; where epochs are cheap (CHEAP_EPOCH_S), the time left is
    the epochs left at that rate: 10,000 trials of nothing were said to have 13 s left with 4
    minutes to go. `budget_left_s`: what a --time-budget has left, where the run ends first (it
    said "about 18 s left" 4 s before its budget stopped it)."""
    live = max(planned, done + running + waiting)
    left_s = None
    if epoch_s and done > done_at_start:
        mean = sum(epoch_s) / len(epoch_s)
        left_s = (live - done) * mean / max(1, at_once)
        if mean < CHEAP_EPOCH_S and recent_rate:
            left_s = max(left_s, (live - done) / recent_rate)
    if left_s is not None and budget_left_s is not None and budget_left_s < left_s:
        left_s = max(0.0, budget_left_s)
    return Estimate(done=done, planned=live, elapsed_s=elapsed_s, left_s=left_s, best=best, first_plan=planned,
                    why=why_grown(strategy, done=done, planned=planned, running=running, waiting=waiting))


# Why a strategy trains past its first plan, where its arithmetic knows it can (module docstring;
# docs/strategies.md): ASHA's asynchronous rungs, and the agreement-weighted brackets of tpe and
# adaptive, which start trials past rungs the run has not seen rank like the top.
OUTGROWN = {
    "asha": "ASHA let trials on before their rungs could judge them",
    "tpe": "tpe started trials past rungs not yet seen to rank like the top, and let trials on before "
           "their rungs could judge them",
    "adaptive": "adaptive opened brackets that start past rungs seen to rank unlike the top",
}


def why_grown(strategy: str, *, done: int, planned: int, running: int, waiting: int) -> str:
    """Why a run's live plan is above its first one, in words; "" where it is not."""
    reasons = []
    if done > planned:
        reasons.append(OUTGROWN.get(strategy, "the strategy trained more than its arithmetic expected"))
    if done + running + waiting > max(planned, done):
        reasons.append(" and ".join(f"{n} {what}" for n, what in ((running, "running"), (waiting, "waiting")) if n)
                       + ", each with an epoch to come")
    return "; ".join(reasons)


def duration(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h} h {m:02d} min" if h else f"{m} min {s:02d} s" if m else f"{s} s"


PROGRESS_FILE = "progress.json"  # in the results dir: the last progress line, for the live report


def write(path: Path, est: Estimate, line: str, *, finished: bool) -> None:
    """The progress line and its numbers, replaced atomically (the live report reads it)."""
    data = {**dataclasses.asdict(est), "line": line, "finished": finished}
    atomic.write_atomically(path, lambda p: p.write_text(json.dumps(data, indent=1) + "\n"))


def read_line(results_dir) -> str | None:
    """The last progress line a run wrote, if any."""
    try:
        return json.loads((Path(results_dir) / PROGRESS_FILE).read_text())["line"]
    except (OSError, ValueError, KeyError):
        return None
