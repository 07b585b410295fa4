"""Shared by the report tests: whether a report page renders in a real browser (headless Chromium)."""

import shutil
import subprocess

import numpy as np
import pytest


needs_chromium = pytest.mark.skipif(not shutil.which("chromium"), reason="needs Chromium (apt install chromium)")


def _chromium(tmp_path, *flags) -> list[str]:
    return [shutil.which("chromium"), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
            "--no-first-run", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}", *flags]


def dom_in_chromium(page, tmp_path) -> str:
    """The page's DOM once headless Chromium has loaded it and run its scripts."""
    done = subprocess.run(_chromium(tmp_path, "--dump-dom", page.resolve().as_uri()),
                          capture_output=True, text=True, timeout=120, check=False)
    assert "<body" in done.stdout, done.stderr[-2000:]
    return done.stdout


def assert_renders_in_chromium(page, tmp_path):
    """Screenshot `page` in headless Chromium and check it shows text, tables and plots."""
    import matplotlib.image

    shot = tmp_path / "shot.png"
    subprocess.run(_chromium(tmp_path, f"--screenshot={shot}", "--window-size=1400,3000", page.resolve().as_uri()),
                   capture_output=True, timeout=120, check=False)
    assert shot.exists(), "Chromium wrote no screenshot"
    img = matplotlib.image.imread(shot)[..., :3]
    rgb = (img.reshape(-1, 3) * 255).astype(np.int64)
    colours = np.unique(rgb[:, 0] << 16 | rgb[:, 1] << 8 | rgb[:, 2])  # packed: fast, unlike axis=0
    assert len(colours) > 200  # text, tables and the embedded plots; a blank page has 1
    assert (img < 0.9).any(axis=-1).mean() > 0.02  # a real share of the page is not white
