"""The run report's hyperparameter importances: Optuna's fANOVA over the trials that ran their full
budget, or over the last epoch enough trials reached, and a fANOVA of their own for conditional
parameters that only some trials set. Optuna and scikit-learn are imported only when asked for."""

from __future__ import annotations

import logging
import math
import uuid
from contextlib import contextmanager
from importlib import metadata

import pandas as pd

from tuning import spaces
from tuning.report import runplots
from tuning.report.render import joined

# fANOVA fits a random forest to (configuration, final metric) pairs; with fewer points than this
# the forest mostly fits noise and the importances change from one seed to the next.
MIN_IMPORTANCE_TRIALS = 8
# fANOVA's time grows with the square of its trials (2.6 s at 500, 17 s at 2,000 on the development
# machine, docs/performance.md): past this many, a seeded random draw of them, and the note says so.
MAX_IMPORTANCE_TRIALS = 500


def _distribution(decl):
    """Optuna's distribution for a declaration. A log-scale one (LogUniform, IntLogUniform) enters
    as log10 of its value: Optuna's fANOVA integrates over a parameter's range on a linear scale even
    for log=True, where 1e-4..1e-3 would weigh a tenth of 1e-3..1e-2, although the search drew as
    many trials there."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    if isinstance(decl, spaces.Choice):  # lists and dicts by position: Optuna's categories must be scalars
        return CategoricalDistribution(list(range(len(decl.values))) if decl.by_position else list(decl.values))
    if isinstance(decl, runplots.LOG):
        return FloatDistribution(math.log10(decl.low), math.log10(decl.high))
    if isinstance(decl, spaces.IntUniform):
        return IntDistribution(decl.low, decl.high)
    return FloatDistribution(decl.low, decl.high)


def _value(v, decl):
    """A table cell as _distribution holds it (CSV gives back strings and floats)."""
    if isinstance(decl, spaces.Choice):
        i = decl.cell_position(v)
        if i is None:
            raise ValueError(f"{v!r} is none of the declared values {list(decl.values)}")
        return i if decl.by_position else decl.values[i]
    if isinstance(decl, runplots.LOG):
        return min(max(math.log10(float(v)), math.log10(decl.low)), math.log10(decl.high))  # rounding at the ends
    return int(v) if isinstance(decl, spaces.IntUniform) else float(v)


def _fanova(rows: pd.DataFrame, decls: dict, names: list[str], *, metric: str, mode: str, seed: int) -> dict:
    """Optuna's fANOVA importances of `names` over `rows`, every one of which sets them all."""
    import optuna

    dists = {k: _distribution(decls[k]) for k in names}
    name = f"tuning-report-{uuid.uuid4().hex}"
    with _unannounced(name):
        study = optuna.create_study(study_name=name, direction="minimize" if mode == "min" else "maximize")
    study.add_trials([optuna.trial.create_trial(params={k: _value(r[k], decls[k]) for k in names},
                                                distributions=dists, value=float(r[metric]))
                      for _, r in rows.iterrows()])
    return optuna.importance.get_param_importances(
        study, params=names, evaluator=optuna.importance.FanovaImportanceEvaluator(seed=seed))


# Where Optuna logs "A new study created in memory with name: ..." (optuna/storages/_in_memory.py).
_STUDY_LOGGER = "optuna.storages._in_memory"


@contextmanager
def _unannounced(study: str):
    """Optuna says at INFO that each in-memory study was created: a line on stderr per report, every
    30 s of a live run. A filter on that logger, only while our study is created, drops that one
    record, the one naming our study: Optuna's verbosity and handler are the user's to set, and a
    lower level for the time being would also drop what another thread (the driver's TPE searcher)
    logs there meanwhile."""
    own = logging.Filter()
    own.filter = lambda record: study not in record.getMessage()
    log = logging.getLogger(_STUDY_LOGGER)
    log.addFilter(own)
    try:
        yield
    finally:
        log.removeFilter(own)


def importance(trials: pd.DataFrame, decls: dict, *, metric: str, mode: str, max_epochs: int,
               seed: int = 0, epochs: pd.DataFrame | None = None) -> tuple[pd.DataFrame | None, str]:
    """fANOVA importances (Optuna's, on scikit-learn's random forest) as an in-memory Optuna study,
    or None and why not. Over the trials that ran their full budget; where fewer than
    MIN_IMPORTANCE_TRIALS did (ASHA stops most), over the metric at the last epoch that many trials
    reached, from `epochs`: importance per budget, as HpBandSter's and CAVE's analyses give it.

    A conditional parameter (tuning.conditions) that some of these trials do not set is not in that
    fANOVA: Optuna's evaluator takes the parameters every trial sets (its intersection search space)
    and would leave it out without a word. Its importance comes from a second fANOVA over the trials
    that set it, and the table's "computed over" column and the note say so."""
    fates = trials.apply(runplots.fate, axis=1) if len(trials) else pd.Series(dtype=str)
    done = trials[(fates == "full") & trials[metric].notna()] if len(trials) else trials
    rows, at = done, None
    if len(done) < MIN_IMPORTANCE_TRIALS and epochs is not None and len(epochs):
        at, rows = _last_common_epoch(epochs, metric, max_epochs)
    if len(rows) < MIN_IMPORTANCE_TRIALS:
        earlier = f", and no earlier epoch was reached by {MIN_IMPORTANCE_TRIALS}" if epochs is not None else ""
        return None, (f"Not computed: {len(done)} trial(s) ran their full budget of {max_epochs} epochs{earlier}; "
                      f"fANOVA needs at least {MIN_IMPORTANCE_TRIALS} trials, or its importances are mostly "
                      "noise. Run more samples (--num-samples).")
    among = len(rows)
    if among > MAX_IMPORTANCE_TRIALS:
        rows = rows.sample(n=MAX_IMPORTANCE_TRIALS, random_state=seed)
    is_set = pd.DataFrame({k: ~runplots.absent(rows[k]) if k in rows else False for k in decls}, index=rows.index)
    always = [k for k in decls if is_set[k].all()]
    branches: dict[tuple, list[str]] = {}  # the trials that set a conditional parameter -> the parameters
    for k in decls:
        if not is_set[k].all():
            branches.setdefault(tuple(is_set.index[is_set[k]]), []).append(k)
    try:
        imp = _fanova(rows, decls, always, metric=metric, mode=mode, seed=seed)
        parts = [(imp, f"all {len(rows)} trials")]
        late = []  # (parameters, trials that set them, importances or None)
        for index, names in branches.items():
            sub = rows.loc[list(index)]
            got = None
            if len(sub) >= MIN_IMPORTANCE_TRIALS:
                have = [k for k in decls if is_set.loc[list(index), k].all()]
                got = {k: v for k, v in _fanova(sub, decls, have, metric=metric, mode=mode, seed=seed).items()
                       if k in names}
                parts.append((got, f"the {len(sub)} trials that set it"))
            late.append((names, len(sub), got))
    except ImportError as exc:  # an environment installed before they were dependencies
        return None, f"Not computed: {exc} (pip install optuna scikit-learn, or make install)."
    except (ValueError, RuntimeError) as exc:  # e.g. every trial scored the same
        return None, f"Not computed: fANOVA failed on these {len(rows)} trials ({exc})."
    table = pd.DataFrame({"parameter": [k for p, _ in parts for k in p],
                          "importance": [round(v, 3) for p, _ in parts for v in p.values()]})
    if branches:
        table["computed over"] = [over for p, over in parts for _ in p]
    logs = [k for k, d in decls.items() if isinstance(d, runplots.LOG)]
    how = (f"fANOVA (Optuna {metadata.version('optuna')}'s FanovaImportanceEvaluator, a random forest of "
           f"scikit-learn {metadata.version('scikit-learn')})")
    some = " set in all of them" if branches else ""
    if at is None:
        what = (f"{how} over the {len(rows)} trials that ran their full budget: the share of the variance of "
                f"the final {metric} each parameter{some} explains on its own; the shares add up to 1.")
    else:
        what = (f"{how} over the {len(rows)} trials that reached epoch {at}: only {len(done)} ran the full "
                f"budget of {max_epochs} epochs, so this is the share of the variance of the {metric} at "
                f"epoch {at}, the last epoch at least {MIN_IMPORTANCE_TRIALS} trials reached, that each "
                f"parameter{some} explains on its own; the shares add up to 1. The scheduler kept the better "
                "trials that long, so these describe the better part of the space, and may change with more "
                "epochs.")
    if among > len(rows):
        what += (f" These {len(rows)} trials are a random draw (seed {seed}) of the {among:,} there are: fANOVA's "
                 "time grows with the square of its trials.")
    what += "".join(" " + _branch_note(names, n, len(rows), got, decls) for names, n, got in late)
    return table, what + (f" Log-scale parameters ({', '.join(logs)}) enter as log10 of their value, so each "
                          "decade of their range weighs the same, as in the search." if logs else "")


def _branch_note(names: list[str], n: int, total: int, got: dict | None, decls: dict) -> str:
    """What the importances did with conditional parameters set in `n` of the `total` trials."""
    when = "; ".join(dict.fromkeys(f"only when {runplots.condition(decls[k])}" for k in names
                                   if runplots.condition(decls[k])))
    who = f"{joined(names)} {'is' if len(names) == 1 else 'are'} set in {n} of these {total} trials" + \
        (f" ({when})" if when else "")
    one = len(names) == 1
    if n == 0:
        return f"{who}: no importance for {'it' if one else 'them'}."
    if got is None:
        return (f"{who}: too few for a fANOVA of {'its' if one else 'their'} own (at least "
                f"{MIN_IMPORTANCE_TRIALS}), so no importance for {'it' if one else 'them'}.")
    return (f"{who}, so {'it is' if one else 'they are'} not in that first fANOVA; {'its' if one else 'their'} "
            f"importance comes from a fANOVA of {'its' if one else 'their'} own over those {n} trials alone, with "
            "the parameters they all set: a share of the variance among those trials, not comparable with the "
            "first ones.")


def _last_common_epoch(epochs: pd.DataFrame, metric: str, max_epochs: int) -> tuple[int | None, pd.DataFrame]:
    """(epoch, one row per trial at it): the last epoch before the full budget at which at least
    MIN_IMPORTANCE_TRIALS trials reported a real value (a diverged trial's stand-in is not one)."""
    bad = epochs["diverged"].map(lambda v: str(v).lower() == "true") if "diverged" in epochs else False
    real = epochs[epochs[metric].notna() & ~bad].drop_duplicates(["trial_id", "training_iteration"], keep="last")
    counts = real.groupby("training_iteration")["trial_id"].nunique()
    reached = counts[(counts >= MIN_IMPORTANCE_TRIALS) & (counts.index < max_epochs)]
    if reached.empty:
        return None, real.iloc[:0]
    at = int(reached.index.max())
    return at, real[real["training_iteration"] == at]
