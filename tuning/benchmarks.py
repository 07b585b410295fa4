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


def _rng(config: dict, t: int, seed: int) -> np.random.Generator:
    """Noise drawn from (seed, t, config) alone: the same evaluation gives the same number,
    whichever process runs it and whether or not the trial was paused in between."""
    key = zlib.crc32(json.dumps(config, sort_keys=True, default=str).encode())
    return np.random.default_rng([seed, t, key])


def counting_ones(config: dict, t: int, max_t: int, seed: int) -> float:
    b = 9 * t
    cats = sum(int(config[f"c{i}"]) for i in range(8))
    probs = np.array([float(config[f"x{i}"]) for i in range(8)])
    means = _rng(config, t, seed).binomial(b, probs) / b
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
        value += float(_rng(config, t, seed).normal(0.0, 0.1 * (1 - s)))
    return value


BENCHMARKS = {
    "counting_ones": Benchmark(counting_ones, optimum=-16.0, regret="normalized_counting_ones", dims=16),
    "mf_hartmann": Benchmark(mf_hartmann6, optimum=HARTMANN6_OPTIMUM, regret="difference", dims=6),
}
