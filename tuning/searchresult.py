"""What a search comes to: the SearchResult that tuning.search and tuning.resume return, its Best
trial, and the summary it prints (what tuning.run shows at the end). Built by tuning.session.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from tuning import objectives
from tuning.record import DataOrigin, RunRecord

# What a finished run's folder holds for its user, in the order the summary names them.
FILES = ("report.html", "report.md", "trials.csv", "epochs.csv", "pareto.csv", "best_config.json", "run.json")


@dataclass
class Best:
    """The incumbent: the best trial at the full budget (results.incumbent). With several objectives
    or constraints, the feasible front member best on the first objective (tuning.objectives)."""

    trial_id: str
    config: dict  # the searched parameters
    metrics: dict  # every final metric, and test_loss / test_accuracy where measured
    epochs: int
    note: str = ""  # empty at the full budget; else how it was chosen
    # Its last checkpoint: the folder (a Path; a URI with --storage-path) whose state
    # tuning.load_checkpoint reads back; None where the trial kept none (a trainer that returns its
    # metrics, a synthetic benchmark).
    checkpoint: Path | str | None = None


@dataclass
class SearchResult:
    """What tuning.search() and tuning.resume() return."""

    results_dir: Path
    status: str  # "finished", "interrupted" or "time budget spent"
    trials: pd.DataFrame  # one row per trial (trials.csv)
    epochs: pd.DataFrame  # one row per trial and epoch: the learning curves (epochs.csv)
    best: Best | None
    record: RunRecord  # run.json
    report: Path | None  # report.html, None where it could not be written
    tracking: list = field(default_factory=list)  # the summary's lines on MLflow (tuning.tracking)
    # With several objectives or constraints: the feasible, non-dominated trials at the full budget
    # (pareto.csv; rows of trials.csv). None for a space with one metric.
    pareto: pd.DataFrame | None = None

    @property
    def best_config(self) -> dict | None:
        return dict(self.best.config) if self.best else None

    @property
    def succeeded(self) -> int:
        """Trials that trained to their end (or a scheduler's stop) without diverging."""
        t = self.trials
        if t.empty:
            return 0
        return int(((t["status"] == "TERMINATED") & ~t["diverged"].astype(bool)).sum())

    def __repr__(self) -> str:
        best = f"best {self.record.metric}={self.best.metrics.get(self.record.metric)!r}" if self.best else "no best"
        return f"SearchResult({self.status}, {len(self.trials)} trials, {best}, {self.results_dir})"

    def without_best(self) -> str | None:
        """Why a finished run has no best trial, in the summary's words on one line; None where it has one."""
        if self.best is not None or self.status != "finished":
            return None
        return " ".join(line.strip() for line in self._best_lines() + self._failure_lines())

    def summary(self) -> str:
        """What tuning.run prints at the end: the trials' fates, device time, the incumbent."""
        r = self.record
        lines = [f"{r.trials} trials: {r.stopped_early} stopped early by the scheduler, {r.failed} failed, "
                 f"{r.resumed_trials} paused and resumed from a checkpoint, {r.recomputed_epochs} epochs recomputed",
                 f"  device time: {r.cpu_hours:.3g} CPU-hours, {r.gpu_hours:.3g} GPU-hours "
                 "(each trial's resources times its running time)"]
        if r.memory_growing:
            lines.append(f"  {r.memory_growing} trial(s) grew in memory epoch after epoch: see memory_growing and "
                         "peak_rss_mb in trials.csv; a tensor kept alive across steps is the usual cause")
        lines += self._best_lines() + self._front_lines() + self._failure_lines()
        banner = data_banner(r.data)
        if banner:
            lines.append(banner)
        lines += self.tracking
        # The files there: a run whose trials all failed has no best_config.json.
        written = [f for f in FILES if (self.results_dir / f).exists()]
        lines += [f"Results: {self.results_dir}  ({', '.join(written)})"]
        lines += [f"Report: {self.report}"] if self.report else []
        return "\n".join(lines + self._go_on_lines())

    def _go_on_lines(self) -> list[str]:
        """How to take an unfinished run further, from the command line and from Python (Ray's own
        hint names tune.run, which a tuning user never calls)."""
        d, r = self.results_dir, self.record
        if self.status not in ("interrupted", "time budget spent"):
            return []
        budget = self.status == "time budget spent"
        # A function defined in a script or a notebook has no name to import: only Python can hand it back.
        script = r.trainer.startswith("__main__:")
        # On a cluster, the cluster again: without --address a resume starts a local Ray.
        call = (f"tuning.resume({str(d)!r}" + (f", trainer={r.trainer.rpartition(':')[2]}" if script else "") +
                (f", address={r.address!r}" if r.address else "") + (", time_budget=LONGER)" if budget else ")"))
        shell = (f"python -m tuning.run --resume {shlex.quote(str(d))}" + (f" --address {r.address}" if r.address else "")
                 + (" --time-budget LONGER" if budget else ""))
        lines = ["", f"Time budget spent: {r.time_used_s:.0f} s of running time against {r.time_budget_s:.0f} s. "
                 "Trials not finished wait with their checkpoints. Go on with:" if budget else
                 "Interrupted; the experiment's state is saved. Continue with:"]
        lines += [f"  {call}"] if script else [f"  {shell}", f"  (from Python: {call})"]
        if budget:
            lines.append("  (the budget is a total across resumes; " + ("" if script else "--add-samples N, ") +
                         "add_samples=N for trials beyond the plan)")
        return lines

    def _best_lines(self) -> list[str]:
        b, r = self.best, self.record
        if b is None:
            if self.status != "finished" and (self.trials.empty or not (self.trials["epochs"] > 0).any()):
                return ["No trial reported a result before the run stopped."]  # not the trainer's fault
            if r.diverged and r.diverged >= r.trials - r.failed:  # a range that only diverges
                return [f"No trial reported a usable {r.metric} ({r.diverged} diverged: their {r.metric} turned NaN "
                        "or infinite): narrow the ranges that make training unstable, the learning rate's first, "
                        "and run again (docs/troubleshooting.md)"]
            diverged = f" ({r.diverged} diverged)" if r.diverged else ""
            return [f"No trial reported a usable {r.metric}{diverged}."]
        cfg = ", ".join(f"{p}={v:.4g}" if isinstance(v, float) else f"{p}={v}" for p, v in b.config.items())
        label = f"validation {r.metric}" if r.data and r.data.kind in ("cifar10", "synthetic") else r.metric
        others = [f"{k} {_fmt(v)}" for k, v in b.metrics.items()
                  if k != r.metric and not k.startswith(("best_", "test_"))]
        out = [f"Best trial {b.trial_id}: {cfg}",
               f"  {label} {_fmt(b.metrics.get(r.metric))}" + (f" ({', '.join(others)})" if others else "") +
               f" after {b.epochs} epoch{'s' * (b.epochs != 1)}"]
        if b.note:
            out.append(f"  ({b.note})")
        if b.metrics.get("test_accuracy") is not None:
            out.append(f"  test loss {b.metrics['test_loss']:.4f}, accuracy {b.metrics['test_accuracy']:.4f} "
                       f"on {b.metrics.get('test_images')} test images")
        return out

    def _front_lines(self) -> list[str]:
        if self.pareto is None:
            return []
        ways = self.record.declaration.get("objectives") or {self.record.metric: self.record.mode}
        # A trial at the full budget whose other objective is NaN or missing stays off the front: said, not dropped.
        unmeasured = objectives.unmeasured(self.trials, ways, self.record.max_epochs)
        off = [f"  {n} trial(s) at the full budget left off the front: their {k} is missing or not a number "
               "(see trials.csv)" for k, n in unmeasured.items()]
        if self.pareto.empty:
            t = self.trials
            reached = not t.empty and (pd.to_numeric(t["epochs"]) >= self.record.max_epochs).any()
            why = ("no trial met the constraints at the full budget" if reached and "feasible" in t and not off else
                   "no trial reached the full budget with every objective measured")
            return [f"  Pareto front: empty ({why}); pareto.csv has none"] + off
        points = "; ".join(", ".join(f"{k} {_fmt(row[k])}" for k in ways) for _, row in self.pareto.head(5).iterrows())
        more = f"; and {len(self.pareto) - 5} more" if len(self.pareto) > 5 else ""
        return [f"  Pareto front ({', '.join(f'{k} {v}' for k, v in ways.items())}): {len(self.pareto)} trial(s) in "
                f"pareto.csv: {points}{more}"] + off

    def _failure_lines(self) -> list[str]:
        t = self.trials
        failed = t[t["status"] == "ERROR"] if len(t) else t
        if failed.empty:
            return []
        first = failed.iloc[0]
        # error_file: relative to the results dir (errors/<trial_id>.txt)
        where = f"; its traceback: {self.results_dir / first['error_file']}" if first.get("error_file") else ""
        return [f"  {len(failed)} trial(s) failed; trial {first['trial_id']}: {first['error']}{where}"]


def _fmt(v) -> str:
    if isinstance(v, float) and v.is_integer() and abs(v) >= 1000:  # a count read back as a float (num_params)
        return str(int(v))
    return f"{v:.4f}" if isinstance(v, float) else str(v)


def data_banner(origin: DataOrigin | None) -> str | None:
    kind = origin.kind if origin else None
    if kind == "synthetic":
        return (f"DATA: SYNTHETIC CIFAR-10-shaped images ({origin.root}); no real CIFAR-10 was used, "
                "so accuracies say nothing about CIFAR-10")
    if kind == "cifar10":
        return f"DATA: real CIFAR-10 ({origin.root})"
    return None
