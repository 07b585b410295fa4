"""Synthetic multi-fidelity benchmarks with known optima, for many-seed strategy comparisons.

Each maps its fidelity onto ``training_iteration`` t = 1..max_t, so ASHA and HyperBandForBOHB
treat it exactly like epochs, and each evaluation is a pure function of (config, t, seed): a
paused trial resumes without state, and a run is reproducible.

- counting ones (Falkner, Klein & Hutter, BOHB, ICML 2018, section 5.1 and appendix H): 8
  categorical parameters in {0, 1} and 8 continuous ones in [0, 1];
  loss = -(sum of the categorical ones + sum over the continuous ones of the mean of b
  Bernoulli(x_j) samples), with b = 9 t samples, t = 1..81: at eta = 3 the rungs 1, 3, 9, 27, 81
  are the paper's budgets 9 to 729. Optimum -16; the paper's normalised regret is loss/16 + 1.
- multi-fidelity Hartmann-6: Hartmann-6 whose fidelity s = t / max_t biases the first term
  (as BoTorch's AugmentedHartmann: alpha_1 - 0.1 (1 - s)) and adds Gaussian noise with standard
  deviation 0.1 (1 - s). At full fidelity it is the exact Hartmann-6, optimum -3.32237.
- paired choices: six categorical parameters of 5, 5, 6, 6, 8 and 8 values whose best values
  interact (each follower's best value depends on its leader's), noise shrinking with t; optimum 0.
- misleading first epoch: seven continuous and integer parameters over LCBench's space, whose
  first epoch ranks configurations by how fast they start, not by where they end; optimum 0.1.
- conditional branches: a choice between three functions of 6 (with one nested condition), 2
  and 1 parameters, each branch's parameters absent unless it is chosen; the branch with the best
  optimum has the worst average and the one with the best average the worst optimum; noise
  shrinking with t; optimum 0.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass
from typing import Callable

import numpy as np


@dataclass(frozen=True)
class Benchmark:
    fn: Callable[[dict, int, int, int], float]  # (config, t, max_t, seed) -> loss
    optimum: float
    regret: str  # how report.py turns loss into regret
    dims: int


def noise_rng(config: dict, t: int, seed: int) -> np.random.Generator:
    """Noise drawn from (seed, t, config) alone: the same evaluation gives the same number,
    whichever process runs it and whether or not the trial was paused in between."""
    key = zlib.crc32(json.dumps(config, sort_keys=True, default=str).encode())
    return np.random.default_rng([seed, t, key])


def counting_ones(config: dict, t: int, max_t: int, seed: int) -> float:
    b = 9 * t
    cats = sum(int(config[f"c{i}"]) for i in range(8))
    probs = np.array([float(config[f"x{i}"]) for i in range(8)])
    means = noise_rng(config, t, seed).binomial(b, probs) / b
    return -(cats + float(means.sum()))


# Hartmann-6 constants (Surjanovic & Bingham's library of test functions; BoTorch uses the same).
_ALPHA = np.array([1.0, 1.2, 3.0, 3.2])
_A = np.array([[10, 3, 17, 3.5, 1.7, 8], [0.05, 10, 17, 0.1, 8, 14],
               [3, 3.5, 1.7, 10, 17, 8], [17, 8, 0.05, 10, 0.1, 14]])
_P = 1e-4 * np.array([[1312, 1696, 5569, 124, 8283, 5886], [2329, 4135, 8307, 3736, 1004, 9991],
                      [2348, 1451, 3522, 2883, 3047, 6650], [4047, 8828, 8732, 5743, 1091, 381]])
HARTMANN6_OPTIMUM = -3.32237
HARTMANN6_ARGMIN = (0.20169, 0.150011, 0.476874, 0.275332, 0.311652, 0.6573)


def mf_hartmann6(config: dict, t: int, max_t: int, seed: int) -> float:
    x = np.array([float(config[f"x{i}"]) for i in range(6)])
    s = t / max_t
    alpha = _ALPHA.copy()
    alpha[0] -= 0.1 * (1 - s)  # low fidelities are biased ...
    value = -float(np.sum(alpha * np.exp(-np.sum(_A * (x - _P) ** 2, axis=1))))
    if s < 1:  # ... and noisy; full fidelity is exact, so regret at the incumbent is exact too
        value += float(noise_rng(config, t, seed).normal(0.0, 0.1 * (1 - s)))
    return value


# Paired choices. Each pair's leader has a main effect (LEADER_LOSS: 0 at its best value, whose
# code is at neither end, so a model that reads the codes as an order gains nothing from them); its
# follower has none: it costs MISMATCH unless it takes FOLLOWS[pair][leader], a different value for
# every leader value (7 is prime to 5, 6 and 8, so 7 a + 2 mod k is a permutation).
PAIR_SIZES = (5, 6, 8)
LEADER_LOSS = ((0.5, 0.75, 0.0, 1.0, 0.25),
               (0.6, 0.2, 1.0, 0.0, 0.8, 0.4),
               (0.43, 1.0, 0.14, 0.71, 0.0, 0.86, 0.29, 0.57))
FOLLOWS = tuple(tuple((7 * a + 2) % k for a in range(k)) for k in PAIR_SIZES)
MISMATCH = 1.0
PAIRED_NOISE = 1.0  # the noise's standard deviation at t = 1


def paired_choices(config: dict, t: int, max_t: int, seed: int) -> float:
    """Three pairs of categorical choices, a leader a_p and a follower b_p, whose best values
    interact: loss = sum over pairs of LEADER_LOSS[p][a_p] + MISMATCH [b_p != FOLLOWS[p][a_p]].

    What it models: choices that work only together, such as an optimizer and the schedule tuned
    for it, or a cell's operation and the one after it (NAS-Bench-201, Dong & Yang, ICLR 2020: six
    edges of five operations, where HpBandSter's own kernel learned nothing). In the terms of Kauffman's
    NK landscapes (Kauffman & Weinberger, J. Theor. Biol. 1989) each follower's contribution depends
    on one other parameter (K = 1): no follower value is better than another on its own, so a model
    that adds up main effects cannot find the optimum, and every matched pair is a local optimum
    for a search that changes one parameter at a time. Optimum 0 (each leader at its best value,
    each follower matching it), exact at every fidelity. Fidelity: Gaussian noise whose standard
    deviation PAIRED_NOISE (1/sqrt(t) - 1/sqrt(max_t)) / (1 - 1/sqrt(max_t)) is that of a mean
    over t epochs, less what is left at max_t: PAIRED_NOISE at t = 1, 0 at t = max_t."""
    loss = 0.0
    for p in range(len(PAIR_SIZES)):
        a, b = int(config[f"a{p}"]), int(config[f"b{p}"])
        loss += LEADER_LOSS[p][a] + MISMATCH * (b != FOLLOWS[p][a])
    if t < max_t:
        shrink = (t ** -0.5 - max_t ** -0.5) / (1 - max_t ** -0.5)
        loss += float(noise_rng(config, t, seed).normal(0.0, PAIRED_NOISE * shrink))
    return loss


# Misleading first epoch, on LCBench's space. Where the final loss is lowest (the learning rate's
# best at LC_BEST's batch size), and how much each parameter's distance from it costs, in positions.
LC_BEST = {"lr": 1.5e-3, "batch_size": 128, "momentum": 0.9, "weight_decay": 1e-3, "num_layers": 3,
           "max_units": 256, "max_dropout": 0.3}
LC_WEIGHT = {"lr": 2.0, "batch_size": 0.3, "momentum": 0.6, "weight_decay": 0.5, "num_layers": 0.4,
             "max_units": 0.4, "max_dropout": 0.4}
LC_LR_PER_BATCH = 0.3  # the best lr's position moves by this per unit of batch_size's (linear scaling)
LC_FLOOR = 0.1  # the final loss at the optimum
LC_START = 40.0  # scale of the excess loss after the first epoch
LC_DECAY = 0.13  # the excess loss is multiplied by this with every epoch
LC_NOISE = 0.03  # the noise's standard deviation at t = 1, falling linearly to 0 at max_t


def lc_position(config: dict) -> dict:
    """Each parameter as its position in [0, 1] of its range, on the scale it is sampled on."""
    return {"lr": (np.log10(float(config["lr"])) + 4) / 3,  # 1e-4 .. 1e-1
            "batch_size": (float(config["batch_size"]) - 16) / 496,  # 16 .. 512
            "momentum": (float(config["momentum"]) - 0.1) / 0.89,  # 0.1 .. 0.99
            "weight_decay": (np.log10(float(config["weight_decay"])) + 5) / 4,  # 1e-5 .. 1e-1
            "num_layers": (float(config["num_layers"]) - 1) / 4,  # 1 .. 5
            "max_units": (float(config["max_units"]) - 64) / 960,  # 64 .. 1024
            "max_dropout": float(config["max_dropout"])}  # 0 .. 1


_LC_BEST_X = lc_position(LC_BEST)


def misleading_first_epoch(config: dict, t: int, max_t: int, seed: int) -> float:
    """A learning curve loss(t) = final + start * LC_DECAY^(t - 1), over LCBench's seven
    parameters (Zimmer, Lindauer & Hutter, TPAMI 2021: learning rate, batch size, momentum, weight
    decay, layers, units, dropout, with its ranges), whose first epoch misleads.

    What it models: after one epoch a large learning rate and a small network are ahead, whatever
    they end at; a few epochs later the curves have crossed and the ranking is the final one. The
    excess `start` = LC_START exp(-4 lr) (0.5 + layers) (0.5 + units), in positions, is unrelated
    to the final loss (Spearman about 0 at t = 1 over random configurations) and has shrunk to a
    fraction by t = 3 (Spearman about 0.87; tests/test_benchmarks.py pins both). The final loss is
    LC_FLOOR plus a weighted sum of squares around LC_BEST, the best learning rate moving with the
    batch size (Goyal et al. 2017, linear scaling); its optimum, LC_FLOOR, is at integer layers (3),
    units (256) and batch size (128), so the space holds it. Gaussian noise of LC_NOISE (1 - t/max_t):
    exact at the full budget."""
    x = lc_position(config)
    best = dict(_LC_BEST_X)
    best["lr"] += LC_LR_PER_BATCH * (x["batch_size"] - _LC_BEST_X["batch_size"])
    final = LC_FLOOR + sum(LC_WEIGHT[k] * (x[k] - best[k]) ** 2 for k in LC_WEIGHT)
    start = LC_START * np.exp(-4 * x["lr"]) * (0.5 + x["num_layers"]) * (0.5 + x["max_units"])
    loss = final + start * LC_DECAY ** (t - 1)
    if t < max_t:
        loss += noise_rng(config, t, seed).normal(0.0, LC_NOISE * (1 - t / max_t))
    return float(loss)


# Conditional branches. Positions in [0, 1] on each parameter's sampled scale, as lc_position.
# Branch "a": where its loss is 0, what each categorical value costs (0 at a code at neither end),
# the codes of a_c1 under which a_x3 exists, and what the other codes pay for lacking it.
BRANCH_A_BEST = {"a_x0": 0.3, "a_x1": 0.64, "a_x2": 0.45, "a_x3": 0.7}
BRANCH_A_C0_LOSS = (0.06, 0.0, 0.15, 0.03, 0.1)
BRANCH_A_C1_LOSS = (0.12, 0.0, 0.05, 0.025, 0.08, 0.15)
BRANCH_A_X3_UNDER = (0, 1, 2)  # a_x3 is declared with when={"branch": "a", "a_c1": [0, 1, 2]}
BRANCH_A_NO_X3 = 0.04
BRANCH_A_WEIGHT = 0.5  # per squared position of distance
BRANCH_A_DIVERGES = 0.75  # a_x0 above this position diverges ...
BRANCH_A_DIVERGED = 1.0  # ... to this loss, whatever the rest
BRANCH_B_FLOOR, BRANCH_B_WEIGHT, BRANCH_B_BEST = 0.1, 1.0, {"b_x0": 0.35, "b_n": 16}
BRANCH_C_FLOOR, BRANCH_C_WEIGHT, BRANCH_C_BEST = 0.2, 0.2, {"c_x0": 0.01}
BRANCH_N_MAX = 256  # b_n is IntLogUniform(1, 256): position log2(b_n) / 8; 16 is at 0.5
BRANCH_C_RANGE = (1e-3, 10.0)  # c_x0 is LogUniform over this range
BRANCH_NOISE = 0.1  # the noise's standard deviation at t = 1, shrinking as PAIRED_NOISE's to 0 at max_t


def _c_position(value: float) -> float:
    low, high = BRANCH_C_RANGE
    return float(np.log(value / low) / np.log(high / low))


def conditional_branches(config: dict, t: int, max_t: int, seed: int) -> float:
    """A choice of `branch` between three functions of different dimension, each with its own
    parameters, which exist only under it (absent from the configuration otherwise, and never read
    here: a missing active parameter raises KeyError, an inactive one passed anyway changes nothing).

    What it models: choosing a model family and its hyperparameters together (CASH, Thornton et al.,
    Auto-WEKA, KDD 2013), where the family whose random configurations do best on average is not
    the one that ends best.
    - "a", six parameters, one of them nested: a_x0..a_x2 in [0, 1], a_c0 of 5 and a_c1 of 6
      categorical values (labels: the codes are not an order), and a_x3 in [0, 1] only under a_c1
      in BRANCH_A_X3_UNDER (a regulariser with a strength, beside three without one, which pay
      BRANCH_A_NO_X3). Loss BRANCH_A_WEIGHT x the squared distance from BRANCH_A_BEST plus each
      categorical value's cost; a_x0 beyond BRANCH_A_DIVERGES diverges to BRANCH_A_DIVERGED, as
      too large a learning rate does. Optimum 0; on average the worst branch (mean about 0.48).
    - "b", two parameters (b_x0 in [0, 1], b_n an integer on a log scale): BRANCH_B_FLOOR plus a
      bowl around BRANCH_B_BEST; easy to come close to, so its random configurations are the best
      ones more often than a's, but its optimum is 0.1 (mean about 0.31).
    - "c", one parameter (c_x0 on a log scale): a plateau, BRANCH_C_FLOOR plus at most 0.11: the
      best average of the three (about 0.23), the worst optimum (0.2).
    Random search's best of 100 (a third in each branch) is about 0.094: a strategy that settles on
    the branch its samples favour ends at b's 0.1, only one that learns a within its conditions
    does better. Fidelity: Gaussian noise as paired_choices' (BRANCH_NOISE at t = 1, 0 at max_t),
    drawn from the active parameters alone. Optimum 0: branch "a" at BRANCH_A_BEST, a_c0 = a_c1 = 1,
    exact at the full budget."""
    branch = config["branch"]
    if branch == "a":
        names = ["a_x0", "a_x1", "a_x2", "a_c0", "a_c1"]
        if int(config["a_c1"]) in BRANCH_A_X3_UNDER:
            names.append("a_x3")
        used = {k: config[k] for k in names}
        if float(used["a_x0"]) > BRANCH_A_DIVERGES:
            loss = BRANCH_A_DIVERGED
        else:
            distance = sum((float(used[k]) - best) ** 2 for k, best in BRANCH_A_BEST.items() if k in used)
            loss = (BRANCH_A_WEIGHT * distance + BRANCH_A_C0_LOSS[int(used["a_c0"])]
                    + BRANCH_A_C1_LOSS[int(used["a_c1"])] + (0.0 if "a_x3" in used else BRANCH_A_NO_X3))
    elif branch == "b":
        used = {k: config[k] for k in ("b_x0", "b_n")}
        n_shift = np.log2(int(used["b_n"]) / BRANCH_B_BEST["b_n"]) / np.log2(BRANCH_N_MAX)  # in positions
        x_shift = float(used["b_x0"]) - BRANCH_B_BEST["b_x0"]
        loss = BRANCH_B_FLOOR + BRANCH_B_WEIGHT * (x_shift ** 2 + n_shift ** 2)
    elif branch == "c":
        used = {"c_x0": config["c_x0"]}
        loss = BRANCH_C_FLOOR + BRANCH_C_WEIGHT * (_c_position(float(used["c_x0"]))
                                                   - _c_position(BRANCH_C_BEST["c_x0"])) ** 2
    else:
        raise ValueError(f"conditional_branches: branch {branch!r} is none of 'a', 'b', 'c'")
    if t < max_t:
        shrink = (t ** -0.5 - max_t ** -0.5) / (1 - max_t ** -0.5)
        loss += noise_rng({"branch": branch, **used}, t, seed).normal(0.0, BRANCH_NOISE * shrink)
    return float(loss)


BENCHMARKS = {
    "counting_ones": Benchmark(counting_ones, optimum=-16.0, regret="normalized_counting_ones", dims=16),
    "mf_hartmann": Benchmark(mf_hartmann6, optimum=HARTMANN6_OPTIMUM, regret="difference", dims=6),
    "paired_choices": Benchmark(paired_choices, optimum=0.0, regret="difference", dims=6),
    "misleading_first_epoch": Benchmark(misleading_first_epoch, optimum=LC_FLOOR, regret="difference", dims=7),
    # dims: the parameters declared (a configuration holds at most 7: branch and a's six)
    "conditional_branches": Benchmark(conditional_branches, optimum=0.0, regret="difference", dims=10),
}

# Real benchmarks (tuning/compare/realbench.py): LCBench's development tasks through its surrogate, and the
# HPOBench-MLP and FCNet tables. Declared here without their optional packages; a run says what is missing.
from tuning.compare import realbench  # noqa: E402  (after Benchmark: realbench's specs only name functions)

BENCHMARKS.update({name: Benchmark(*spec) for name, spec in realbench.specs().items()})
