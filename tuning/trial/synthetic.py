"""Synthetic CIFAR-10-shaped images that are hard in the ways CIFAR-10 is hard.

An image is an object made of parts on a cluttered background, built in three levels:
- strokes: a glyph is two 3-pixel rays from a centre (lines, corners, V shapes: 28 of them);
- parts: an object is 4 glyphs at fixed offsets from its centre (a constellation);
- objects: each class has several constellations (modes, like poses or sub-kinds).
What makes it hard (docs/synthetic-data.md has the numbers):
- several modes per class, placed off-centre, scaled, with parts jittered and some dropped;
- overlapping classes: in look-alike pairs (cat/dog, car/truck, ...) half of the modes are
  near-copies, one glyph swapped or the same glyphs rearranged; a dropped part can make the two
  indistinguishable;
- class identity lives in local shapes and their layout, never in colour alone: colours are drawn
  per image (a class's preferred hue only sometimes), and clutter uses the same glyphs;
- a share of wrong labels (LABEL_NOISE), so 100 % validation accuracy is out of reach.
Everything is drawn from the numpy Generator it is given: the same seed, the same bytes.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from itertools import combinations

import numpy as np

# Part of the data's identity: a folder written by another version is regenerated, not reused.
VERSION = 2
LABEL_NOISE = 0.06  # share of images whose label is another class, drawn uniformly
N_CLASSES = 10
SIZE = 32
# Constellations per class. With 3, every learning rate from 2e-3 up reached the same 84-85 %
# plateau by epoch 8-10, so which one "won" at epoch 16 was chance; with 6 the best are still
# climbing at 16 epochs (docs/synthetic-data.md).
MODES = 6
SHARED_MODES = 3  # of them, in a look-alike pair, nearly the same for both classes
PARTS = 4  # glyphs per constellation
CLUTTER = 5  # clutter slots per image, each filled with probability CLUTTER_P
CLUTTER_P = 0.6
DROP_P = 0.15  # chance that a part is missing (occluded)
HUE_P = 0.3  # chance that an object takes its class's preferred hue: colour is a weak cue
NOISE_SD = 0.08
CHUNK = 1000  # images generated at a time
# Look-alike classes, as CIFAR-10 confuses them: cat/dog, automobile/truck, deer/horse,
# airplane/ship, bird/frog.
PAIRS = [(3, 5), (1, 9), (4, 7), (0, 8), (2, 6)]
_R = 3  # a glyph's ray length: glyphs are (2R+1)^2 pixels


@dataclass(frozen=True)
class Templates:
    parts: np.ndarray  # (N_CLASSES, MODES, PARTS, 3) int: glyph id, dy, dx from the object's centre
    hues: np.ndarray  # (N_CLASSES,) each class's preferred hue in [0, 1)


def glyphs() -> np.ndarray:
    """(28, 7, 7) float32 strokes: every pair of the 8 compass rays, anti-aliased. Mirroring an
    image maps the set onto itself, so random flips keep classes intact."""
    yy, xx = np.mgrid[-_R:_R + 1, -_R:_R + 1].astype(np.float64)
    rays = []
    for a in np.arange(8) * np.pi / 4:
        ey, ex = -np.sin(a), np.cos(a)  # a unit ray from the centre; its end at _R (Chebyshev)
        ey, ex = ey * _R / max(abs(ey), abs(ex)), ex * _R / max(abs(ey), abs(ex))
        t = np.clip((yy * ey + xx * ex) / (ey * ey + ex * ex), 0, 1)
        dist = np.hypot(yy - t * ey, xx - t * ex)
        rays.append(np.clip(1.25 - dist, 0, 1))
    return np.stack([np.maximum(rays[i], rays[j]) for i, j in combinations(range(8), 2)]).astype(np.float32)


def _layout(rng: np.random.Generator) -> np.ndarray:
    """PARTS offsets within +-8 px of the centre, at least 5 px apart (Chebyshev): parts that
    overlap would make new glyphs."""
    while True:
        pos = rng.integers(-8, 9, size=(PARTS, 2))
        gaps = np.abs(pos[:, None] - pos[None]).max(-1) + 99 * np.eye(PARTS, dtype=int)
        if gaps.min() >= 5:
            return pos


def templates(rng: np.random.Generator) -> Templates:
    n_glyphs = len(glyphs())
    parts = np.zeros((N_CLASSES, MODES, PARTS, 3), dtype=np.int64)
    for c in range(N_CLASSES):
        for m in range(MODES):
            parts[c, m, :, 0] = rng.choice(n_glyphs, size=PARTS, replace=False)
            parts[c, m, :, 1:] = _layout(rng)
    for a, b in PAIRS:
        for m in range(SHARED_MODES):
            parts[b, m] = parts[a, m]
            if m % 2 == 0:  # b's is a's with one glyph swapped: a fine detail to spot
                p = m // 2 % PARTS
                parts[b, m, p, 0] = (parts[a, m, p, 0] + rng.integers(1, n_glyphs)) % n_glyphs
            else:  # the same glyphs in the same places, assigned differently: only their
                parts[b, m, :, 0] = np.roll(parts[a, m, :, 0], 1)  # arrangement tells the classes apart
    return Templates(parts=parts, hues=rng.random(N_CLASSES))


def _hsv(h: np.ndarray, s: np.ndarray, v: np.ndarray) -> np.ndarray:
    from matplotlib.colors import hsv_to_rgb

    return hsv_to_rgb(np.stack([h % 1.0, s, v], axis=-1)).astype(np.float32)  # (n, 3)


def _stamp(canvas: np.ndarray, glyph_set: np.ndarray, ids: np.ndarray, y: np.ndarray, x: np.ndarray,
           on: np.ndarray) -> None:
    """Draw glyph ids[i] centred at (y[i], x[i]) into canvas[i] (padded by _R), where on[i]. A
    centre off the image is moved to its edge: parts are cut, never lost."""
    k = 2 * _R + 1
    # A window per position: indexing it by (image, y, x) moves whole 7x7 blocks, not pixels.
    windows = np.lib.stride_tricks.sliding_window_view(canvas, (k, k), axis=(1, 2), writeable=True)
    img, y, x = np.arange(len(canvas)), np.clip(y, 0, SIZE - 1), np.clip(x, 0, SIZE - 1)
    windows[img, y, x] = np.maximum(windows[img, y, x], glyph_set[ids] * on[:, None, None])


def _masks(rng: np.random.Generator, t: Templates, labels: np.ndarray, glyph_set: np.ndarray):
    """Where the object is drawn and where the clutter is, as (n, 32, 32) float32 in [0, 1]."""
    n = len(labels)
    pad = SIZE + 2 * _R
    obj = np.zeros((n, pad, pad), np.float32)
    clutter = np.zeros((n, pad, pad), np.float32)
    modes = t.parts[labels, rng.integers(0, MODES, size=n)]  # (n, PARTS, 3)
    centre = rng.integers(SIZE // 2 - 5, SIZE // 2 + 6, size=(n, 2))
    scale = rng.uniform(0.8, 1.2, size=(n, 1))
    kept = rng.random((n, PARTS)) >= DROP_P
    jitter = rng.integers(-1, 2, size=(n, PARTS, 2))
    for p in range(PARTS):
        yx = centre + np.rint(scale * modes[:, p, 1:]).astype(np.int64) + jitter[:, p]
        _stamp(obj, glyph_set, modes[:, p, 0], yx[:, 0], yx[:, 1], kept[:, p])
    ids = rng.integers(0, len(glyph_set), size=(n, CLUTTER))
    where = rng.integers(0, SIZE, size=(n, CLUTTER, 2))
    there = rng.random((n, CLUTTER)) < CLUTTER_P
    for s in range(CLUTTER):
        _stamp(clutter, glyph_set, ids[:, s], where[:, s, 0], where[:, s, 1], there[:, s])
    crop = slice(_R, _R + SIZE)
    return obj[:, crop, crop], clutter[:, crop, crop]


@functools.lru_cache(maxsize=1)
def _upsampler() -> np.ndarray:
    """(32, 4) matrix of 1-D linear interpolation, as torch's interpolate computes it."""
    import torch

    eye = torch.eye(4, dtype=torch.float32)[:, None, :]
    return torch.nn.functional.interpolate(eye, size=SIZE, mode="linear", align_corners=False)[:, 0].T.numpy()


def _colours(rng: np.random.Generator, t: Templates, labels: np.ndarray):
    """Background field (n, 3, 32, 32), object and clutter colours (n, 3): drawn per image, so
    colour says little about the class; objects contrast with the background in brightness."""
    n = len(labels)
    bg_v = rng.uniform(0.3, 0.7, size=n)
    base = _hsv(rng.random(n), rng.uniform(0, 0.6, n), bg_v)
    coarse = base[:, :, None, None] + rng.normal(0, 0.12, size=(n, 3, 4, 4)).astype(np.float32)
    up = _upsampler()
    field = up @ coarse @ up.T  # bilinear 4x4 -> 32x32 as two small matrix products
    hue = np.where(rng.random(n) < HUE_P, t.hues[labels] + rng.normal(0, 0.03, n), rng.random(n))
    bright = rng.random(n) < 0.5  # light on dark or dark on light, whatever the class
    up_by, down_by = rng.uniform(0.3, 0.5, n), rng.uniform(0.3, 0.5, n)
    fg_v = np.where(bright, np.minimum(bg_v + up_by, 1), np.maximum(bg_v - down_by, 0))
    fg = _hsv(hue, rng.uniform(0.3, 1.0, n), fg_v)
    same = rng.random(n) < 0.5  # clutter in the object's colour half of the time
    other = _hsv(rng.random(n), rng.uniform(0.3, 1.0, n), np.where(rng.random(n) < 0.5, fg_v, 1 - fg_v))
    return field, fg, np.where(same[:, None], fg, other)


def images(rng: np.random.Generator, t: Templates, n: int, glyph_set: np.ndarray | None = None):
    """n images as uint8 (n, 3, 32, 32), their labels as written (some wrong), and the true classes."""
    glyph_set = glyphs() if glyph_set is None else glyph_set
    # In chunks: arrays of a few MB are recycled by the allocator, while each fresh 100 MB array
    # costs its page faults again (half of the time at 10,000 images a batch, measured).
    parts = [_chunk(rng, t, min(CHUNK, n - i), glyph_set) for i in range(0, n, CHUNK)]
    return tuple(np.concatenate(p) for p in zip(*parts))


def _chunk(rng: np.random.Generator, t: Templates, n: int, glyph_set: np.ndarray):
    clean = rng.integers(0, N_CLASSES, size=n)
    obj, clutter = _masks(rng, t, clean, glyph_set)
    flip = rng.random(n) < 0.5  # mirrored scenes; the background field is symmetric in distribution
    obj[flip], clutter[flip] = obj[flip][..., ::-1], clutter[flip][..., ::-1]
    out, fg, cl = _colours(rng, t, clean)
    tmp = np.subtract(cl[:, :, None, None], out)  # one scratch array, used in place
    out += np.multiply(tmp, clutter[:, None], out=tmp)
    np.subtract(fg[:, :, None, None], out, out=tmp)
    out += np.multiply(tmp, obj[:, None], out=tmp)
    rng.standard_normal(out=tmp, dtype=np.float32)
    out += np.multiply(tmp, np.float32(NOISE_SD), out=tmp)
    np.clip(out, 0, 1, out=out)
    out *= 255
    out += 0.5
    wrong = rng.random(n) < LABEL_NOISE
    labels = np.where(wrong, (clean + rng.integers(1, N_CLASSES, size=n)) % N_CLASSES, clean)
    return out.astype(np.uint8), labels, clean
