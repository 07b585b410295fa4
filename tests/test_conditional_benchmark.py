"""The conditional branches benchmark: its optimum, its declaration and function agreeing on which
parameters exist, the branches' averages and optima in opposite orders, noise that shrinks with t,
and a comparison smoke run over its experiment."""

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from conftest import ROOT
from tuning.compare import benchmarks as B
from tuning import conditions, spaces

F = B.conditional_branches
OPTIMUM = {"branch": "a", "a_x0": 0.3, "a_x1": 0.64, "a_x2": 0.45, "a_c0": 1, "a_c1": 1, "a_x3": 0.7}
BEST_B = {"branch": "b", "b_x0": 0.35, "b_n": 16}
BEST_C = {"branch": "c", "c_x0": 0.01}
# A value for every parameter, to set the inactive ones with.
EVERY = {"branch": "a", "a_x0": 0.9, "a_x1": 0.1, "a_x2": 0.2, "a_c0": 4, "a_c1": 0, "a_x3": 0.3,
         "b_x0": 0.9, "b_n": 200, "c_x0": 5.0}


@pytest.fixture(scope="module")
def space():
    return spaces.load("conditional_branches")


def _sample(space, rng, branch=None) -> dict:
    """A random configuration as random search draws one: every declaration sampled on its own
    scale, then the inactive ones dropped."""
    config = {}
    for name, p in space.params.items():
        kind = type(p).__name__
        if kind == "Choice":
            config[name] = p.values[int(rng.integers(len(p.values)))]
        elif kind == "Uniform":
            config[name] = float(rng.uniform(p.low, p.high))
        elif kind == "LogUniform":
            config[name] = float(np.exp(rng.uniform(np.log(p.low), np.log(p.high))))
        elif kind == "IntLogUniform":
            config[name] = int(np.clip(round(np.exp(rng.uniform(np.log(p.low), np.log(p.high)))), p.low, p.high))
        else:
            raise AssertionError(f"{kind} not sampled here")
    if branch:
        config["branch"] = branch
    return spaces.drop_inactive(space, config)


def _configs(space, n, seed=0, branch=None):
    rng = np.random.default_rng(seed)
    return [_sample(space, rng, branch) for _ in range(n)]


class _Reads(dict):
    """A configuration that records which keys the benchmark reads."""

    def __init__(self, *args):
        super().__init__(*args)
        self.read = set()

    def __getitem__(self, key):
        self.read.add(key)
        return super().__getitem__(key)

    def get(self, key, default=None):
        self.read.add(key)
        return super().get(key, default)


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_optimum_is_0_at_the_full_budget_and_in_the_space(space, seed):
    assert F(OPTIMUM, 27, 27, seed) == 0.0 == B.BENCHMARKS["conditional_branches"].optimum
    assert spaces.active(space, OPTIMUM) == set(OPTIMUM)  # nothing missing, nothing inactive
    assert all(spaces.contains(space.params[k], v) for k, v in OPTIMUM.items())
    # The other branches' optima, at their declared floors, and in the space too.
    assert F(BEST_B, 27, 27, seed) == B.BRANCH_B_FLOOR
    assert F(BEST_C, 27, 27, seed) == pytest.approx(B.BRANCH_C_FLOOR)
    for best in (BEST_B, BEST_C):
        assert spaces.active(space, best) == set(best)
        assert all(spaces.contains(space.params[k], v) for k, v in best.items())


def test_nothing_beats_each_branchs_optimum(space):
    floors = {"a": 0.0, "b": B.BRANCH_B_FLOOR, "c": B.BRANCH_C_FLOOR}
    for c in _configs(space, 6000, seed=1):
        assert F(c, 27, 27, 0) > floors[c["branch"]]
    # Over the grid too (every valid combination: 840, none at an optimum).
    grid = list(conditions.grid(space.params, spaces.grid_points(space)))
    assert len(grid) == spaces.grid_size(space) == 840
    assert min(F(c, 27, 27, 0) for c in grid) > 0.0


def test_the_function_reads_exactly_the_declared_active_parameters(space):
    # Declaration and function agree: every active parameter is read, no inactive one is, on
    # random configurations and on every grid point (all three branches, a_x3 present and absent).
    grid = list(conditions.grid(space.params, spaces.grid_points(space)))
    for c in _configs(space, 500, seed=2) + grid:
        reads = _Reads({**EVERY, **c})  # inactive parameters set too: they must not be read
        F(reads, 5, 27, 0)
        assert reads.read == spaces.active(space, c), c
    assert {frozenset(spaces.active(space, c)) for c in grid} == {
        frozenset({"branch", "a_x0", "a_x1", "a_x2", "a_c0", "a_c1", "a_x3"}),
        frozenset({"branch", "a_x0", "a_x1", "a_x2", "a_c0", "a_c1"}),
        frozenset({"branch", "b_x0", "b_n"}), frozenset({"branch", "c_x0"})}


def test_inactive_parameters_passed_anyway_change_nothing_and_missing_active_ones_raise(space):
    for c in _configs(space, 200, seed=3) + [OPTIMUM, BEST_B, BEST_C]:
        padded = {**EVERY, **c}  # the active values kept, every inactive one set
        for t in (1, 4, 27):  # the noise too is drawn from the active parameters alone
            assert F(padded, t, 27, 5) == F(c, t, 27, 5)
        for name in c:  # any active parameter missing: an error, never a silent default
            with pytest.raises(KeyError):
                F({k: v for k, v in c.items() if k != name}, 27, 27, 0)
    # a_x3 exists only under a_c1 in 0, 1, 2: with a_c1 = 3 it is not needed, and set it changes nothing.
    no_x3 = {k: v for k, v in OPTIMUM.items() if k != "a_x3"} | {"a_c1": 3}
    assert F(no_x3, 27, 27, 0) == pytest.approx(B.BRANCH_A_C1_LOSS[3] + B.BRANCH_A_NO_X3)
    assert F({**no_x3, "a_x3": 0.0}, 27, 27, 0) == F(no_x3, 27, 27, 0)
    with pytest.raises(ValueError, match="branch 'd'"):
        F({"branch": "d"}, 27, 27, 0)


def test_the_best_branch_is_the_worst_on_average_and_random_search_ends_in_a_or_b(space):
    final = {br: np.array([F(c, 27, 27, 0) for c in _configs(space, 2000, seed=4, branch=br)]) for br in "abc"}
    mean = {br: v.mean() for br, v in final.items()}
    # Averages rank the branches c, b, a; optima a (0), b (0.1), c (0.2). Measured: 0.229, 0.309, 0.486.
    assert mean["c"] < mean["b"] < mean["a"], mean
    assert mean == pytest.approx({"a": 0.486, "b": 0.309, "c": 0.229}, abs=0.02)
    # a's best tail reaches below b's optimum (about 1 % of its samples): a model that learns
    # within a can see it.
    assert (final["a"] < B.BRANCH_B_FLOOR).mean() > 0.005
    # Random search's best of 100 (docstring: about 0.094), each branch a third of them.
    rng = np.random.default_rng(5)
    pool = _configs(space, 10_000, seed=6)
    values = np.array([F(c, 27, 27, 0) for c in pool])
    best = np.array([values[rng.integers(len(pool), size=100)].min() for _ in range(400)])
    assert best.mean() == pytest.approx(0.094, abs=0.006)


def test_same_evaluation_same_number(space):
    for c in _configs(space, 50, seed=7):
        assert F(c, 3, 27, 11) == F(dict(c), 3, 27, 11)
        assert F(c, 3, 27, 11) != F(c, 3, 27, 12)  # another seed, other noise
        assert F(c, 3, 27, 11) != F(c, 4, 27, 11)  # another epoch, other noise
        assert F(c, 27, 27, 11) == F(c, 27, 27, 12)  # none at the full budget


@pytest.mark.parametrize("config", [OPTIMUM, BEST_B, BEST_C], ids=["a", "b", "c"])
def test_noise_shrinks_with_t_to_nothing_at_the_full_budget(config):
    def draws(t):
        return np.array([F(config, t, 27, seed=s) for s in range(400)]) - F(config, 27, 27, 0)

    def declared(t):
        return B.BRANCH_NOISE * (t ** -0.5 - 27 ** -0.5) / (1 - 27 ** -0.5)

    for t in (1, 3, 9):
        d = draws(t)
        assert d.std() == pytest.approx(declared(t), rel=0.15) and abs(d.mean()) < 3 * declared(t) / 20
    assert set(draws(27)) == {0.0}


@pytest.mark.slow  # a comparison's Ray start and report; tests/test_conditions.py runs the strategies on conditions
@pytest.mark.timeout(300)
def test_compare_smoke_runs_and_respects_the_conditions(tmp_path, space):
    # Grid walks the conditional grid, random samples absent values, BOHB proposes through its
    # model. Smaller than the experiment's own smoke size (3 iterations, not 27; one seed): the
    # conditions are what is tested here. 70 to 106 s on the loaded 2-core machine, most of it Ray's
    # start and the report; each run about 10 s.
    exp = tmp_path / "branches_smoke.py"
    exp.write_text("from tuning.compare import Experiment\n"
                   "EXPERIMENT = Experiment(space='conditional_branches', budget=4, max_epochs=3, seeds=(0,),\n"
                   "                        strategies=('grid', 'random', 'bohb'), peers=())\n")
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "tuning.compare", str(exp), "--smoke", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = pd.read_csv(out / "runs.csv")
    assert set(runs["strategy"]) == {"grid", "random", "bohb"}
    for _, row in runs.iterrows():  # every row holds exactly its active parameters
        config = {k: row[k] for k in space.params if not pd.isna(row[k])}
        assert set(config) == spaces.active(space, config), row.to_dict()
    exp_json = json.loads((out / "experiment.json").read_text())
    assert exp_json["optimum"] == 0.0 and exp_json["regret"] == "difference"
    finals = pd.read_csv(out / "finals.csv").set_index("run_id")
    for run_id, run in runs.groupby("run_id"):  # regret = loss - 0, at the full budget only
        full = run[run["full_fidelity"]]
        expected = full["loss"].min() if len(full) else float("nan")
        assert finals.loc[run_id, "final"] == pytest.approx(expected, nan_ok=True), run_id
