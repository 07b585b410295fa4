"""BOHB's densities (tuning/backend/bohb.py fits them): a product kernel over ConfigSpace vectors
whose categorical columns learn (an Aitchison-Aitken kernel with a TPE-like bandwidth) and whose
conditional columns speak only where a parameter was active. numpy only: no Ray, no HpBandSter.
"""

from __future__ import annotations

import numpy as np


def categorical_bandwidth(n: int, k: np.ndarray | int, d: int = 1) -> np.ndarray:
    """The probability a categorical kernel puts on the other k - 1 values, fitted to n points in a
    product kernel over d parameters. At n0 = d + 1 points (HpBandSter's fewest for a model) it is
    Optuna's TPE kernel (optuna/samplers/_tpe/parzen_estimator.py), which weights the observed value
    1 against a prior weight of 1 spread over the k values and the n0 + 1 kernels:
    lambda = (k - 1) / (n0 + 1 + k); past n0 it shrinks as ((n + 1) / (n0 + 1)) ** (-1 / (d + 4)),
    the rate of HpBandSter's normal-reference bandwidths on continuous columns.

    Why not TPE's own (k - 1) / (n + 1 + k) at every n: TPE fits each parameter alone, BOHB one
    product over all d, where a kernel shrinking as 1/n makes the bad density (about six times the
    good one's points) so much sharper that g/l ranks candidates by their distance from bad points,
    not by their loss (docs/strategies.md, measured on paired choices). d = 1 is TPE's formula.
    It stays below (k - 1) / k, so the observed value always weighs more than any other."""
    k = np.asarray(k, dtype=float)
    n0 = d + 1
    return (k - 1) / (n0 + 1 + k) * ((np.maximum(n, n0) + 1) / (n0 + 1)) ** (-1 / (d + 4))


def active_bandwidths(data: np.ndarray, d: int) -> np.ndarray:
    """statsmodels' normal-reference bandwidth (1.06 std n ** (-1 / (d + 4)), what HpBandSter fits)
    of each continuous column over the points where it is active (not NaN), n that column's count.
    A column active in fewer than two points has no spread to measure: it gets the bandwidth
    uniform values would, std = sqrt(1 / 12). One whose active values all agree gets 0, which the
    caller clips to min_bandwidth: HpBandSter's spike, so a column active everywhere gets exactly
    HpBandSter's bandwidth (with the uniform one there, LCBench at one fidelity ended higher on 21
    of 29 tasks, lower on 6, p = 0.021: docs/lab/strategies-log.md)."""
    bw = np.empty(data.shape[1])
    for j, column in enumerate(data.T):
        values = column[np.isfinite(column)]
        spread = np.std(values) if len(values) > 1 else np.sqrt(1 / 12)
        bw[j] = 1.06 * spread * max(len(values), 1) ** (-1 / (4 + d))
    return bw


class MixedKDE:
    """A product-kernel density over ConfigSpace vectors: statsmodels' Gaussian kernel (as
    KDEMultivariate's, untruncated) on continuous columns, an Aitchison-Aitken kernel on categorical
    ones (1 - lambda on the observed value, lambda / (k - 1) on each other) with k the parameter's
    number of values and lambda from categorical_bandwidth (d: the number of columns, n: the points
    where that column is active).

    In a conditional space a vector has NaN where its parameter is inactive, in the data and in the
    points evaluated. A point's kernel is a density over the parameters it has, so a parameter
    inactive in the point evaluated drops out of the product (its kernel integrates to 1), and one
    inactive in a data point but active in the point evaluated gets that point's prior (uniform:
    1 on a continuous column's [0, 1], 1 / k on a categorical one): each data point speaks only
    about the parameters it had, as in TPE's tree-structured densities (Bergstra et al., NeurIPS
    2011), while the product kernel over the parameters two points share is BOHB's.

    statsmodels' own unordered kernel, as HpBandSter fits it, takes its bandwidth from the normal
    reference rule on the integer codes: about 1.1 for a five-value parameter whose good points
    disagree, past (k - 1) / k = 0.8, where the observed value weighs less than each other one
    (measured in docs/strategies.md). It also counts only the values present in the data, so what
    an absent value gets depends on how many others the points have. Same attributes as
    KDEMultivariate (data, bw, pdf), so HpBandSter's own get_config still runs on it
    (tuning.bench.sched times it)."""

    def __init__(self, data: np.ndarray, bw: np.ndarray, vartypes: np.ndarray):
        self.data, self.vartypes = np.asarray(data, dtype=float), vartypes
        self.bw = np.array(bw, dtype=float)
        cat, active = vartypes > 0, np.isfinite(self.data)
        self.bw[cat] = categorical_bandwidth(active[:, cat].sum(axis=0), vartypes[cat], len(vartypes))

    def pdf(self, x) -> np.ndarray | float:
        """The density at one vector (a float) or at each row of a 2-D array."""
        points = np.atleast_2d(np.asarray(x, dtype=float))
        cont = self.vartypes == 0
        if np.isnan(self.data).any() or np.isnan(points).any():
            kernel = self._conditional_kernel(points)
        else:
            kernel = np.ones((len(points), len(self.data)))
            if cont.any():
                z = (points[:, None, cont] - self.data[None, :, cont]) / self.bw[cont]
                kernel *= np.exp(-0.5 * np.sum(z ** 2, axis=2)) / np.prod(np.sqrt(2 * np.pi) * self.bw[cont])
            for j in np.flatnonzero(~cont):
                kernel *= self._categorical(points[:, None, j], self.data[None, :, j], j)
        dens = kernel.mean(axis=1)
        return dens if np.ndim(x) == 2 else float(dens[0])

    def _categorical(self, points: np.ndarray, data: np.ndarray, j: int) -> np.ndarray:
        lam = self.bw[j]
        return np.where(np.rint(points) == data, 1 - lam, lam / max(self.vartypes[j] - 1, 1))

    def _conditional_kernel(self, points: np.ndarray) -> np.ndarray:
        """Each column's factor (points x data) with the absent ones as the class docstring says."""
        kernel = np.ones((len(points), len(self.data)))
        for j, k in enumerate(self.vartypes):
            x, y = points[:, None, j], self.data[None, :, j]
            if k == 0:
                factor = np.exp(-0.5 * ((x - y) / self.bw[j]) ** 2) / (np.sqrt(2 * np.pi) * self.bw[j])
                prior = ((x >= 0) & (x <= 1)).astype(float)  # uniform on the vector's [0, 1]
            else:
                factor, prior = self._categorical(x, y, j), 1 / k
            factor = np.where(np.isnan(y), prior, factor)
            kernel *= np.where(np.isnan(x), 1.0, factor)
        return kernel
