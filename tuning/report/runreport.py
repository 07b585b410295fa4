"""The report of one ``python -m tuning.run``: report.md, a self-contained report.html (figures
inlined as base64 PNG) and the PNGs beside them, in the run's results dir.

tuning.run writes it at the end of every run and, while the run is going, at most every 30 s
(the live page reloads itself and says it is live). ``python -m tuning.report DIR`` writes it
again from the files of DIR: run.json and the trials and epochs tables (results.jsonl when a
killed run left none). Every file is replaced atomically, so a browser or a reader never sees
half a report. Nothing here knows about Ray.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import shlex
import time
from datetime import datetime
from importlib import metadata
from pathlib import Path

import pandas as pd

from tuning import record as records
from tuning import fidelity, objectives, progress, provenance, results, spacejson, spaces
from tuning.report import fanova, front, runplots
from tuning.report import hypervolume as hv
from tuning.report.analysis import ReportError
from tuning.record import RunRecord
from tuning.results import TrialRecord
from tuning.report.render import flatten, joined, number, render_html, render_markdown

log = logging.getLogger(__name__)

FIGURES = {"curves": "report-curves.png", "best": "report-best-so-far.png",
           "params": "report-params.png", "parallel": "report-parallel.png"}
RELOAD_S = 30  # the live page reloads this often: the run rewrites it at most this often
# A live page not rewritten for this long belongs to a run that stopped without its final report
# (killed, crashed): it stops reloading and says so. The live writer waits max(RELOAD_S, 9x the
# time a write took) between writes, so a fresh page on a loaded machine stays far below this.
STALE_S = 900


def searched(rec: RunRecord) -> tuple[dict, str, str]:
    """(parameter declarations, metric, mode) of a run, from its record: the axes the run searched,
    even if the space file has changed since."""
    decls = records.declarations(rec)
    try:
        if decls:
            return spacejson.from_declarations(decls), rec.metric, rec.mode
        space = spaces.load(rec.space)  # a run dir from before run.json kept them: the space file as it is now
    except spaces.SpaceError as exc:
        raise ReportError(f"run.json's parameter declarations cannot be read, and its space does not load ({exc})") \
            from None
    return dict(space.params), space.metric, space.mode


def is_run_dir(path: Path) -> bool:
    return records.exists(path)


def _table(run_dir: Path, name: str) -> pd.DataFrame:
    try:
        table = results.read_table(run_dir, name)
    except results.ReadError as exc:
        raise ReportError(f"cannot read {name} table in {run_dir}: {exc.reason}") from None
    if table is None:
        raise ReportError(f"{run_dir} has no {name}.csv: the run has not written its tables yet "
                          f"(it is still running, or it stopped: continue it with python -m tuning.run "
                          f"--resume {run_dir})")
    return table


def load(run_dir: Path) -> tuple[pd.DataFrame, pd.DataFrame, RunRecord]:
    """(trials, epochs, record) of a tuning.run results dir; of a run killed before it wrote its
    tables, built from results.jsonl."""
    run_dir = Path(run_dir)
    try:
        plan = records.read(run_dir)
    except records.RecordError as exc:
        raise ReportError(str(exc)) from None
    tables = [run_dir / f"{name}.{ext}" for name in ("trials", "epochs") for ext in ("csv", "parquet")]
    rows = results.read_rows(run_dir / results.ROWS_FILE) if not any(map(Path.exists, tables)) else {}
    if rows:  # killed or crashed before writing its tables: what its stale live page promises
        plan = _killed(plan)
        return (*_tables_from_records(_records_from_rows(rows, plan), plan), plan)
    metric = searched(plan)[1]
    try:
        trials, epochs = _table(run_dir, "trials"), _table(run_dir, "epochs")
        for name, df, need in (("trials", trials, ["trial_id", "status", metric]),
                               ("epochs", epochs, ["trial_id", "training_iteration", metric])):
            if len(df.columns) and not set(need) <= set(df.columns):  # damaged too: garbage parses as a column
                raise ReportError(f"{name} table in {run_dir} lacks columns {sorted(set(need) - set(df.columns))}")
    except ReportError as exc:  # a table deleted or damaged since: results.jsonl holds what it was made from
        rows = results.read_rows(run_dir / results.ROWS_FILE)
        if not rows:
            raise
        log.warning("%s; the report is rebuilt from %s", str(exc).split(": the run has not")[0], results.ROWS_FILE)
        plan = plan if plan.status == "finished" else _killed(plan)
        return (*_tables_from_records(_records_from_rows(rows, plan), plan), plan)
    return trials, epochs, plan


# ---------------------------------------------------------------- text

def _cell(v) -> str:
    """A value as a table cell: 4 significant digits (a run's losses differ late), empty for a missing one."""
    return number(v, 4, missing="")


def _outcome(row) -> str:
    text = {"full": "full budget", "early": "stopped early", "ended": "ended by its trainer", "diverged": "diverged",
            "failed": f"failed: {_cell(row.get('error'))}", "running": str(row["status"]).lower(),
            "stopped": "short of its budget when the run stopped"}[runplots.fate(row)]
    back = runplots.resumed_epochs(row.get("resumed_at"))
    return text + (f"; paused, resumed at epoch {', '.join(map(str, back))}" if back else "")


def _trials_block(trials: pd.DataFrame, params: list[str], metric: str) -> pd.DataFrame:
    cols = [c for c in results.metric_columns(trials, params)[:4] if trials[c].notna().any()]
    out = trials[["trial_id", *params, *cols, "epochs"]].copy()
    out["outcome"] = trials.apply(_outcome, axis=1)
    out["wall time (s)"] = trials.get("wall_time_s")
    for c in (objectives.FEASIBLE, objectives.RANK):  # a run of several objectives or constraints
        if c in trials:
            out[c] = trials[c]
    return out.apply(lambda c: c.map(_cell))


def _best_block(best: dict | None, decls: dict, metrics: list[str], note: str, cifar: bool) -> list[tuple]:
    if best is None:
        return [("p", "No trial has reported a usable result yet.")]
    keys = ["trial_id", *decls, *metrics, "epochs", "test_loss", "test_accuracy", "test_images"]
    rows = [(k, _cell(best.get(k)) or f"— (not set: only when {runplots.condition(decls.get(k))})")
            for k in keys if _cell(best.get(k)) or runplots.condition(decls.get(k))]  # conditional: not set
    how = note or "The best final value among the trials that trained the full budget."
    test = ("" if best.get("test_accuracy") is not None or not cifar else
            " Test metrics: measured once the run has finished, for the best configuration only.")
    return [("table", pd.DataFrame(rows, columns=["", "value"])), ("p", how[0].upper() + how[1:].rstrip(".") + "." + test)]


def _absent_note(trials: pd.DataFrame, decls: dict, metric: str, figure: str) -> str:
    """What a parameter figure did with the trials that do not set a conditional parameter: a
    sentence per group of such parameters (empty for an unconditional space)."""
    pts = runplots.plotted(trials, metric)
    groups: dict[tuple, list[str]] = {}  # (trials that set it, its condition) -> parameters
    for k, d in decls.items():
        n = int((~runplots.absent(pts[k])).sum()) if k in pts else 0
        if n < len(pts):
            groups.setdefault((n, runplots.condition(d)), []).append(k)
    out = []
    for (n, when), names in groups.items():
        gone, one = len(pts) - n, len(names) == 1
        them = f"the other {gone}" if n else ("it" if gone == 1 else f"all {gone}")
        what = (f"{'is' if gone == 1 else 'are'} left out of {'its panel' if one else 'their panels'}"
                if figure == "params" else
                f"cross{'es' if gone == 1 else ''} {'its axis' if one else 'their axes'} at a separate mark, "
                "\"absent\", below the axis")
        out.append(f"{joined(names)} {'is' if one else 'are'} set in {n} of these {len(pts)} trials"
                   f"{f' (only when {when})' if when else ''}; {them} {what}.")
    return "".join(" " + s for s in out)


def _label(plan: RunRecord, metric: str) -> str:
    kind = plan.data.kind if plan.data else ""
    if kind in ("cifar10", "synthetic"):
        return f"validation {metric}"
    return f"{metric} (benchmark objective)" if kind.startswith("benchmark") else metric


def _provenance(rec: RunRecord) -> pd.DataFrame:
    """What produced the run. Its paths as provenance.portable gives them, as a report gets committed;
    run.json keeps them whole, for --resume."""
    plan = rec.to_json()
    command = ("python -m tuning.run " + shlex.join(map(provenance.portable, rec.argv)) if rec.argv is not None
               else "tuning.search() in Python")
    if rec.data and rec.data.root:
        plan["data"] = {**plan["data"], "root": provenance.portable(rec.data.root)}
    for k in ("space", "storage_path"):  # a space's .py file; a shared folder (or s3://, kept)
        plan[k] = plan[k] and provenance.portable(plan[k])
    plan["space"] = plan["space"] or "a Space built in Python, without name= (its declaration: run.json)"
    keep = {"command": command, "trainer": rec.trainer,
            **{k: plan.get(k) for k in ("status", "started", "wall_time_s", "resumes", "git_commit", "space",
                                         "strategy", "seed", "num_samples", "max_epochs", "data",
                                         "fixed", "precision", "resources_per_trial", "workers_per_trial",
                                         "max_concurrent_trials", "points_to_evaluate", "address", "storage_path")},
            "versions": plan.get("versions"),
            "report rendered with": {d: _version(d) for d in ("matplotlib", "optuna", "scikit-learn")}}
    return pd.DataFrame(list(flatten({k: v for k, v in keep.items() if v is not None})), columns=["key", "value"])


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _header(plan: RunRecord, trials: pd.DataFrame, live: bool, line: str | None = None) -> list[tuple]:
    b = [("h1", f"Tuning run: {plan.space or spaces.trainer_name(plan.trainer)} ({plan.strategy})")]
    if plan.data and plan.data.kind == "synthetic":
        b.append(("banner", "SYNTHETIC DATA: generated CIFAR-10-shaped images, not CIFAR-10. "
                            "These accuracies say nothing about CIFAR-10."))
    now = time.strftime("%Y-%m-%d %H:%M:%S")
    if live:
        b.append(("banner", f"LIVE: the run is going. This page reloads itself every {RELOAD_S} s; "
                            f"last written {now}."))
    else:
        b.append(("p", f"Status: {plan.status}; written {now}."))
    if line:  # the run's last progress line (tuning/progress.py), as the terminal shows it
        b.append(("p", line + ("" if line.endswith(".") else ".")))
    fates = trials.apply(runplots.fate, axis=1) if len(trials) else pd.Series(dtype=str)
    counts = ", ".join(f"{(fates == k).sum()} {text}" for k, (_, _, text) in runplots.FATES.items()
                       if (fates == k).any())
    resumed = sum(bool(runplots.resumed_epochs(v)) for v in trials.get("resumed_at", []))
    b.append(("p", f"{len(trials)} trials" + (f": {counts}" if counts else "") +
              (f"; {resumed} paused and resumed from a checkpoint" if resumed else "") + "."))
    return b


def _blocks(trials, epochs, plan, decls, figures, imps: dict, live: bool, line: str | None = None,
            g: hv.Goals | None = None, mo: front.Measured | None = None) -> list[tuple]:
    params, metric, mode = list(decls), plan.metric, plan.mode
    label = _label(plan, metric)
    best, note = (plan.best.row, plan.best_note) if plan.status == "finished" and plan.best else (None, "")
    if best is None and len(trials):
        best, note = (objectives.incumbent(trials, g, plan.max_epochs) if g else
                      results.incumbent(trials, metric, mode, plan.max_epochs))
    if mo and best is not None and not note:
        note = (f"with several objectives there is no single best: this is the member of the Pareto front best on "
                f"{metric}, the first objective, the others breaking a tie (docs/multi-objective.md)")
    b = _header(plan, trials, live, line)
    cifar = plan.data is not None and plan.data.kind in ("cifar10", "synthetic")
    b += [("h2", "Best configuration"), *_best_block(best, decls, results.metric_columns(trials, params), note, cifar)]
    b += front.sections(trials, mo, decls, figures) if mo else []
    b += [("h2", "Learning curves")]
    b += [("img", figures["curves"], "learning curves of every trial"),
          ("p", f"One line per trial (at most {runplots.MAX_CURVES}: past that, the best quarter of them and a "
                "random draw of the rest, as the title says), coloured by its final value. Line style and end "
                "marker tell how it ended; a circle marks an epoch it was paused at and resumed from. A diverged trial's stand-in "
                "value is not drawn.")] if "curves" in figures else [("p", "No trial has reported yet.")]
    b += _fidelity(trials, epochs, plan, label)
    if "best" in figures:
        b += [("h2", "Best so far"), ("img", figures["best"], "best so far against wall time and epochs"),
              ("p", f"Solid: the best {label} any trial has reported so far, at any epoch. Dashed: the best "
                    f"among trials that reached the full budget of {plan.max_epochs} epochs.")]
    if "params" in figures:
        b += [("h2", "Each hyperparameter against the final metric"),
              ("img", figures["params"], "hyperparameters against the final metric"),
              ("p", "One point per trial at its last reported epoch. Categories are jittered sideways; "
                    "diverged and failed trials are left out." + _absent_note(trials, decls, metric, "params"))]
    if "parallel" in figures:
        b += [("h2", "Parallel coordinates"), ("img", figures["parallel"], "parallel coordinates")]
        note = _absent_note(trials, decls, metric, "parallel")
        b += [("p", note.strip())] if note else []
    if mo:
        b += front.importance_blocks(imps)
    else:
        table, note = imps[metric]
        b += [("h2", "Hyperparameter importance"), ("p", note)]
        b += [("table", table)] if table is not None else []
    b += [("h2", "Trials"), ("table", _trials_block(trials, params, metric)) if len(trials) else
          ("p", "No trials yet.")]
    b += [("h2", "Provenance"), ("table", _provenance(plan))]
    return b


def _fidelity(trials: pd.DataFrame, epochs: pd.DataFrame, plan: RunRecord, label: str) -> list[tuple]:
    """Whether this trainer's low epochs rank configurations as its last does (tuning.fidelity),
    at the rungs of the run's scheduler where it has one."""
    declared = plan.declaration or {}
    curves = fidelity.from_rows(epochs, value=plan.metric)
    shown = fidelity.shown(curves, reduction_factor=declared.get("reduction_factor"),
                           grace=declared.get("grace_period") or 1)
    return fidelity.report_blocks(shown, trials=len(trials), metric=label)


def _started(plan: RunRecord) -> float | None:
    try:
        return datetime.strptime(plan.started, "%Y-%m-%dT%H:%M:%S%z").timestamp()
    except (KeyError, TypeError, ValueError):
        return None


def _figures(run_dir: Path, trials, epochs, plan, decls, mo: front.Measured | None = None) -> dict:
    metric, mode = plan.metric, plan.mode
    label = _label(plan, metric)
    figs = {"curves": runplots.learning_curves(trials, epochs, metric=metric, mode=mode, label=label),
            "best": runplots.best_so_far(epochs, metric=metric, mode=mode, label=label, started=_started(plan),
                                         max_epochs=plan.max_epochs,
                                         constraints=(plan.declaration or {}).get("constraints")),
            "params": runplots.params_vs_metric(trials, decls, metric=metric, label=label)}
    if len(decls) > 2:
        figs["parallel"] = runplots.parallel_coordinates(trials, decls, metric=metric, mode=mode, label=label)
    if mo:
        figs.update(front.figures(trials, mo, plan.max_epochs))
    out = {}
    for key, fig in figs.items():
        if fig is not None:
            out[key] = run_dir / {**FIGURES, **front.FIGURES}[key]  # front's: several objectives only
            results.write_bytes(out[key], runplots.png(fig))
    return out


def write_report(run_dir: Path, trials: pd.DataFrame, epochs: pd.DataFrame, plan: RunRecord, *,
                 live: bool = False) -> dict:
    """Write report.md, report.html and the figures into run_dir; a live page reloads itself and
    says so. Returns the paths and the importances (with several objectives, the hypervolume too)."""
    decls, metric, mode = searched(plan)
    run_dir, plan = Path(run_dir), dataclasses.replace(plan, metric=metric, mode=mode)  # what the parts below read
    g, mo = hv.goals(plan.declaration or {}, metric, mode), None
    if g is not None:  # ranked as tuning.objectives ranks them: the live report's tables are not yet
        trials = objectives.annotate(trials, g, plan.max_epochs)
        if g.several:
            mo = front.measure(trials, epochs, g, (plan.declaration or {}).get("reference_point"),
                               max_epochs=plan.max_epochs, started=_started(plan))
    figures = _figures(run_dir, trials, epochs, plan, decls, mo)
    kw = dict(max_epochs=plan.max_epochs, seed=plan.seed or 0, epochs=epochs)
    imps = (front.importances(trials, g, decls, **kw) if mo else
            {metric: fanova.importance(trials, decls, metric=metric, mode=mode, **kw)})
    line = progress.read_line(run_dir)
    if line and not live and line.startswith("Progress:"):  # a run killed before its last line: it is stale
        line = f"The last progress line the run wrote, before it stopped: {line}; {len(epochs)} epochs are recorded"
    blocks = _blocks(trials, epochs, plan, decls, figures, imps, live, line, g, mo)
    md, page = run_dir / "report.md", run_dir / "report.html"
    results.write_text(md, render_markdown(blocks))
    head = _live_head(run_dir, time.time()) if live else ""
    results.write_text(page, render_html(blocks, blocks[0][1], in_head=head))
    imp = imps[metric]
    return {"markdown": md, "html": page, "figures": figures, "importance": imp[0], "importance_note": imp[1],
            **({"importances": imps, "reference": mo.reference, "hypervolume": mo.curve} if mo else {})}


def _live_head(run_dir: Path, written: float) -> str:
    """What makes a live page live: it reloads every RELOAD_S while it is fresh. Older than STALE_S,
    its run stopped without a final report: the page stops reloading and its LIVE banner says so.
    Without JavaScript, a plain refresh."""
    notice = (f"NOT LIVE ANY MORE: this page was last rewritten %MIN% min ago, and a live run rewrites it "
              f"about every {RELOAD_S} s, so the run stopped without writing its final report (killed, or "
              f"crashed). This page no longer reloads. python -m tuning.report {run_dir} writes the final "
              f"report; python -m tuning.run --resume {run_dir} continues the run.")
    script = ("(function(){var age=(Date.now()-%d)/1000;"
              "if(age<%d){setTimeout(function(){location.reload();},%d);return;}"
              "document.addEventListener('DOMContentLoaded',function(){"
              "document.querySelectorAll('p').forEach(function(p){if(p.textContent.startsWith('LIVE:')){"
              "p.id='stale';p.textContent=%s.replace('%%MIN%%',Math.round(age/60));}});});})();"
              % (written * 1000, STALE_S, RELOAD_S * 1000, json.dumps(notice)))
    script = script.replace("</", "<\\/")  # a path with "</" in it must not end the script
    return f'<noscript><meta http-equiv="refresh" content="{RELOAD_S}"></noscript><script>{script}</script>'


def write_from_records(run_dir: Path, records: list[TrialRecord], plan: RunRecord, *, live: bool = True) -> dict:
    """The report from tuning.backend's per-trial records: what the live report is built from."""
    return write_report(run_dir, *_tables_from_records(records, plan), plan, live=live)


def _tables_from_records(records: list[TrialRecord], plan: RunRecord) -> tuple[pd.DataFrame, pd.DataFrame]:
    decls, metric, mode = searched(plan)
    params = list(decls)
    trials = results.trials_table(records, params, strategy=plan.strategy, max_epochs=plan.max_epochs,
                                  metric=metric, mode=mode, constraints=(plan.declaration or {}).get("constraints"))
    return trials, results.epochs_table(records, params, metric)


def regenerate(run_dir: Path) -> dict:
    """``python -m tuning.report RUN_DIR``: the report again, from the files of the run dir. A
    report regenerated this way never reloads itself, whatever the run is doing."""
    from tuning import inputs

    if inputs.held(Path(run_dir)):
        raise ReportError(f"{run_dir} is a run still going (a tuning.run holds it): its report.html rewrites itself as "
                          f"the run goes; run python -m tuning.report {run_dir} once it has ended")
    trials, epochs, plan = load(run_dir)
    return write_report(run_dir, trials, epochs, plan, live=False)


def _killed(plan: RunRecord) -> RunRecord:
    return dataclasses.replace(plan, status=(f"stopped before writing its tables (killed or crashed; run.json still says "
                               f"{plan.status!r}). This report is rebuilt from "
                               f"{results.ROWS_FILE}: a trial short of its full budget was stopped early "
                               f"or cut off by the stop, and python -m tuning.run --resume continues it"))


def _records_from_rows(rows: dict[str, list[dict]], plan: RunRecord) -> list[TrialRecord]:
    """Records from results.jsonl alone. Which trials the scheduler stopped is Tune's to know, not
    the rows': a trial short of its full budget is runplots.STOPPED, and _killed's status says so."""
    return [TrialRecord(trial_id=tid, config=r[-1].get("config") or {}, rows=r,
                        status="TERMINATED" if max(int(x.get("training_iteration") or 0) for x in r)
                        >= plan.max_epochs else runplots.STOPPED) for tid, r in rows.items()]
