"""What produced a run or a measurement, as its files record it: software versions, the machine, the
commit of this checkout, and paths written so that they mean something on another machine.
"""

from __future__ import annotations

import os
import platform
import re
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path


def versions() -> dict:
    out = {"python": platform.python_version(), "platform": platform.platform()}
    for dist in ("torch", "torchvision", "ray", "hpbandster", "ConfigSpace", "pandas", "numpy"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    return out


def machine() -> dict:
    """What a measurement ran on: CPU model and count, GPUs, date, software versions."""
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"cpu": cpu, "cpus": os.cpu_count(), "gpus": _gpus(), "date": time.strftime("%Y-%m-%d"), **versions()}


def _gpus() -> list[str]:
    """The GPUs' names: torch's where a trainer imported it; else nvidia-smi's, since importing torch
    only to name them cost a comparison of table lookups 2 s."""
    torch = sys.modules.get("torch")
    if torch is not None:
        return [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):  # no NVIDIA driver: no GPU
        return []
    return [line.strip() for line in out.stdout.splitlines() if line.strip()] if out.returncode == 0 else []


def portable(text) -> str:
    """A path as files meant to be committed record it (provenance, experiment.json, reports): relative
    to the checkout this package runs from, else to the working folder, where it lies inside one of
    them, since /work/... or /tmp/... names nothing on another machine; elsewhere, as it was. A
    command-line token keeps what stands before its path (--out=, replay:)."""
    m = re.fullmatch(r"([^/]*[=:])?(/.*)", str(text))
    if not m:  # relative already, or not a path
        return str(text)
    path, root = Path(os.path.normpath(m[2])), Path(__file__).resolve().parents[1]
    for base in ([root] if (root / ".git").exists() else []) + [Path.cwd()]:
        if path.is_relative_to(base):
            return (m[1] or "") + str(path.relative_to(base))
    return str(text)


def git_commit() -> str | None:
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5)
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=here, capture_output=True, text=True,
                               timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return out.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
