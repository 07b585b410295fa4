"""Benchmarks of several objectives, for tuning.compare's hypervolume comparisons (issue 41).

Each is a pure function of (config, t, max_t, seed) that returns every metric of epoch t, and a
trainer of the project's contract (`trainer="tuning.mobench:<name>"`: keyword hyperparameters,
on_epoch once per epoch), so every strategy runs it through Ray as it runs a user's trainer, and
the peers (tuning/compare/peers.py) call the same function in process.

- zdt1, zdt2 (Zitzler, Deb & Thiele, "Comparison of multiobjective evolutionary algorithms:
  empirical results", Evolutionary Computation 8(2), 2000), ZDT_DIMS variables in [0, 1], both
  objectives minimised. At full fidelity they are the exact ZDT functions, whose front is
  f2 = 1 - sqrt(f1) (ZDT1, convex) or 1 - f1^2 (ZDT2, concave) for f1 in [0, 1]; its hypervolume
  against ZDT_REFERENCE is known in closed form (true_hypervolume), so hypervolume regret is
  exact. Fidelity t of max_t: each objective is scaled by 1 + ZDT_BIAS (1 - t/max_t) and noised
  by a Gaussian of ZDT_NOISE (1 - t/max_t): biased and noisy early, exact at max_t.
- mo_lcbench_<task> (LCBench's development tasks, YAHPO Gym's surrogate, tuning/compare/realbench.py):
  validation accuracy (max) against the training time the surrogate predicts for the epochs so
  far (min). The true front is unknown: no regret.
- mo_hpobench_<dataset>: HPOBench's MLP tables, 1 - validation accuracy against the training time
  (both min); mo_fcnet_<dataset>: FCNet's tables, validation MSE against the model's parameter
  count (both min); each the mean over the table's seeds, single fidelity. The table holds every
  configuration, so its front, and the hypervolume regret, is exact.

Reference points (what experiments declare; tuning/benchdata/mo_reference.json, made by
`python -m tuning.compare.mobench`): for the real benchmarks each objective's 90th-percentile worst value
over the whole table, or over 20,000 random configurations at epoch 27 for LCBench, so a point
worse than nine in ten on an objective adds nothing. ZDT's is ZDT_REFERENCE, beyond every point.
"""

from __future__ import annotations

import functools
import json
import sys
from dataclasses import dataclass
from typing import Callable

import numpy as np

from tuning.compare import realbench
from tuning.compare.benchmarks import noise_rng

PREFIX = "tuning.mobench:"
REFERENCES = realbench.DATA / "mo_reference.json"

ZDT_DIMS = 4  # x0 sets f1; g = 1 + 9 mean(x1..x3) in [1, 10]
ZDT_REFERENCE = (1.1, 11.0)  # beyond every point: f1 <= 1, f2 <= g <= 10
ZDT_BIAS = 0.5  # each objective is scaled by 1 + ZDT_BIAS at t = 0, falling linearly to 1 at max_t
ZDT_NOISE = 0.1  # the noise's standard deviation at t = 0, falling linearly to 0 at max_t
ZDT_FRONT_AREA = {"zdt1": 1 / 3, "zdt2": 2 / 3}  # the integral of the front's f2 over f1 in [0, 1]
QUANTILE = 0.9  # the reference point's quantile of each objective's worst values
LCBENCH_SAMPLES = 20_000


@dataclass(frozen=True)
class MOBenchmark:
    fn: Callable[[dict, int, int, int], dict]  # (config, t, max_t, seed) -> that epoch's metrics
    objectives: dict  # name -> "min" | "max", in order
    reference: tuple | None  # the point its experiments declare (None until made: python -m tuning.compare.mobench)
    true_hypervolume: float | None  # of the true front against `reference`, where it is known
    dims: int
    others: tuple = ()  # what it reports beside its objectives (and the epoch)

    @property
    def reports(self) -> set[str]:
        return {*self.objectives, *self.others}


# ---------------------------------------------------------------- ZDT

def zdt_objectives(problem: str, x: np.ndarray) -> tuple[float, float]:
    """(f1, f2) of ZDT1 or ZDT2 at x (ZDT_DIMS values in [0, 1])."""
    f1 = float(x[0])
    g = 1.0 + 9.0 * float(np.mean(x[1:]))
    h = 1.0 - (np.sqrt(f1 / g) if problem == "zdt1" else (f1 / g) ** 2)
    return f1, float(g * h)


def zdt(config: dict, t: int, max_t: int, seed: int, *, problem: str) -> dict:
    x = np.array([float(config[f"x{i}"]) for i in range(ZDT_DIMS)])
    f = np.array(zdt_objectives(problem, x))
    early = 1.0 - t / max_t
    if early > 0:  # low fidelities: biased and noisy; max_t is exact, so the regret is too
        f = f * (1.0 + ZDT_BIAS * early) + noise_rng(config, t, seed).normal(0.0, ZDT_NOISE * early, 2)
    return {"f1": float(f[0]), "f2": float(f[1]), "epoch": t}


def zdt_true_hypervolume(problem: str, reference=ZDT_REFERENCE) -> float:
    """The hypervolume of the front (f1 in [0, 1], g = 1) against `reference` (r1 >= 1, r2 >= 1):
    the box r1 r2 less the area under the front's curve."""
    r1, r2 = reference
    return r1 * r2 - ZDT_FRONT_AREA[problem]


def zdt_front(problem: str, n: int = 1001) -> np.ndarray:
    """n points of the true front (x1.. = 0), as (f1, f2) rows."""
    return np.array([zdt_objectives(problem, np.r_[x0, np.zeros(ZDT_DIMS - 1)]) for x0 in np.linspace(0, 1, n)])


# ---------------------------------------------------------------- LCBench and the tables

def lcbench(config: dict, t: int, max_t: int, seed: int, *, task: str) -> dict:
    """Validation accuracy (%) and training time so far (s) at epoch t, as the surrogate predicts."""
    row = np.array([[float(config[k]) for k in realbench.LCBENCH_INPUTS]])
    out = realbench.lcbench_outputs(task, row, np.array([min(int(t), realbench.LCBENCH_MAX_EPOCH)]))[0]
    return {"accuracy": float(out[1]), "time_s": float(out[0]), "loss": float(100.0 - out[1]), "epoch": t}


TABLES = {"hpobench": ("train_time", "train_time_s"), "hpolib": ("model_size", "model_size")}


def tabular(config: dict, t: int, max_t: int, seed: int, *, family: str, dataset: str) -> dict:
    space, rows = realbench.table_rows(family, dataset)
    row = rows[realbench.table_key(space, config)]
    column, name = TABLES[family]
    return {"loss": row["loss"], name: row[column], "epoch": t}


# ---------------------------------------------------------------- the registry

@functools.lru_cache(maxsize=1)
def _references() -> dict:
    return json.loads(REFERENCES.read_text()) if REFERENCES.exists() else {}


def _registry() -> dict[str, MOBenchmark]:
    out = {p: MOBenchmark(functools.partial(zdt, problem=p), {"f1": "min", "f2": "min"}, ZDT_REFERENCE,
                          zdt_true_hypervolume(p), ZDT_DIMS) for p in ("zdt1", "zdt2")}
    refs = _references()
    for task in realbench.LCBENCH_TASKS:
        name = f"mo_lcbench_{task}"
        out[name] = MOBenchmark(functools.partial(lcbench, task=task), {"accuracy": "max", "time_s": "min"},
                                _point(refs.get(name, {}).get("reference")), None, 7, ("loss",))
    for family, prefix, datasets, dims in (("hpobench", "mo_hpobench", realbench.HPOBENCH_DATASETS, 5),
                                           ("hpolib", "mo_fcnet", realbench.FCNET_DATASETS, 9)):
        for d in datasets:
            name, known = f"{prefix}_{d}", refs.get(f"{prefix}_{d}", {})
            out[name] = MOBenchmark(functools.partial(tabular, family=family, dataset=d),
                                    {"loss": "min", TABLES[family][1]: "min"}, _point(known.get("reference")),
                                    known.get("true_hypervolume"), dims)
    return out


def _point(values) -> tuple | None:
    return tuple(values) if values is not None else None


MO_BENCHMARKS = _registry()


def name_of(trainer) -> str | None:
    """The benchmark a space's trainer names ("tuning.mobench:zdt1" -> "zdt1"), or None."""
    if isinstance(trainer, str) and trainer.startswith(PREFIX) and trainer[len(PREFIX):] in MO_BENCHMARKS:
        return trainer[len(PREFIX):]
    return None


def reference(task: str) -> tuple:
    """The reference point a task's experiment declares; one line saying how to make it if missing."""
    point = MO_BENCHMARKS[task].reference
    if point is None:
        from tuning.cli import TuningError

        raise TuningError(f"{task} has no reference point in {REFERENCES.name}: run python -m tuning.compare.mobench")
    return point


def true_hypervolume(name: str, point) -> float | None:
    """The hypervolume of the benchmark's true front against `point`, where the front is known: ZDT's
    in closed form (for a point at or beyond (1, 1)), a table's by moocore over every configuration;
    None otherwise (LCBench, or ZDT against a point that cuts its front)."""
    point = tuple(float(v) for v in point)
    if name in ZDT_FRONT_AREA:
        return zdt_true_hypervolume(name, point) if min(point) >= 1 else None
    bench = MO_BENCHMARKS[name]
    if bench.true_hypervolume is None:
        return None
    if point == bench.reference:
        return bench.true_hypervolume
    import moocore

    family, dataset = bench.fn.keywords["family"], bench.fn.keywords["dataset"]
    table = realbench.table_rows(family, dataset)[1]
    points = np.array([[r["loss"], r[TABLES[family][0]]] for r in table.values()])
    return float(moocore.hypervolume(points, ref=point))


def _trainer(name: str):
    bench = MO_BENCHMARKS[name]

    def train(*, epochs: int, on_epoch, seed: int = 0, state=None, **config):
        """The benchmark as a trainer: each epoch's metrics, a pure function of (config, epoch, seed)."""
        for t in range((state or {}).get("epoch", 0) + 1, epochs + 1):
            on_epoch(bench.fn(config, t, epochs, seed), {"epoch": t})

    train.__name__ = train.__qualname__ = name  # so Ray's workers find it here by name
    train.__module__ = __name__
    return train


globals().update({name: _trainer(name) for name in MO_BENCHMARKS})


# ---------------------------------------------------------------- reference points

def _quantile_point(values: np.ndarray, ways: list[str]) -> list[float]:
    """Each column's QUANTILE-worst value: the upper quantile of a minimised objective, the lower
    of a maximised one."""
    return [float(np.quantile(values[:, j], QUANTILE if w == "min" else 1 - QUANTILE)) for j, w in enumerate(ways)]


def make_references() -> dict:
    """mo_reference.json's content: every real benchmark's reference point, and where the table
    holds every configuration, the true front's hypervolume against it (moocore's)."""
    import moocore

    out: dict = {"how": f"each objective's {QUANTILE:.0%}-worst value: over the whole table (tables) or "
                        f"{LCBENCH_SAMPLES:,} random configurations (seed 0) at epoch "
                        f"{realbench.LCBENCH_FULL_EPOCH} (LCBench); true_hypervolume: moocore's, of the "
                        "table's front. Made by python -m tuning.compare.mobench"}
    rows = realbench.lcbench_sample(LCBENCH_SAMPLES, np.random.default_rng(0))
    for task in realbench.LCBENCH_TASKS:
        pred = realbench.lcbench_outputs(task, rows, np.full(len(rows), realbench.LCBENCH_FULL_EPOCH))
        point = _quantile_point(np.column_stack([pred[:, 1], pred[:, 0]]), ["max", "min"])
        out[f"mo_lcbench_{task}"] = {"reference": [round(v, 4) for v in point]}
    for family, prefix, datasets in (("hpobench", "mo_hpobench", realbench.HPOBENCH_DATASETS),
                                     ("hpolib", "mo_fcnet", realbench.FCNET_DATASETS)):
        for d in datasets:
            table = realbench.table_rows(family, d)[1]
            points = np.array([[r["loss"], r[TABLES[family][0]]] for r in table.values()])
            point = _quantile_point(points, ["min", "min"])
            out[f"{prefix}_{d}"] = {"reference": point,
                                    "true_hypervolume": float(moocore.hypervolume(points, ref=point))}
    return out


def main(argv: list[str] | None = None) -> int:
    """`python -m tuning.compare.mobench`: write tuning/benchdata/mo_reference.json."""
    REFERENCES.write_text(json.dumps(make_references(), indent=1) + "\n")
    print(f"wrote {REFERENCES}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
