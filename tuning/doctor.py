"""``python -m tuning.doctor``: one screen that answers "why won't my tuning run work?".

Software versions and the combinations known to break, the GPUs (through NVIDIA's NVML, and
GPUtil's view where GPUtil still imports), the Ray
cluster's resources (local, or the one at --address), the data, free disk at the results dir,
and a live one-trial, one-epoch run of the real trainable on tiny data. Every line says OK, WARN
or FAIL; a FAIL names the fix. Exit 0 when nothing failed, 1 when something did, 2 for bad flags.
``checks()`` returns the lines as data (what --json PATH writes); the screen is ``render()`` of them.
"""

from __future__ import annotations

import logging
import shutil
import sys
import tempfile
import time
from pathlib import Path

from tuning import cli, provenance, results
from tuning.trial import data

OK, WARN, FAIL = "OK", "WARN", "FAIL"
MIN_FREE_GB = 2.0  # a CIFAR run keeps two checkpoints per trial (~1 MB each) plus logs: 2 GB is ample
LIVE_WAIT_S = 120.0  # the live trial gives up after this: a busy cluster had it wait without a word


def _line(status: str, what: str, detail: str, fix: str = "") -> dict:
    return {"status": status, "what": what, "detail": detail, "fix": fix}


def check_software() -> list[dict]:
    v = provenance.versions()
    out = [_line(OK, "versions", ", ".join(f"{k} {v[k]}" for k in
                                           ("python", "torch", "torchvision", "ray", "hpbandster", "ConfigSpace")))]
    py = tuple(int(x) for x in v["python"].split(".")[:2])
    if py < (3, 10):
        out.append(_line(FAIL, "python", f"{v['python']} is older than tuning supports",
                         "use Python 3.10 or newer (tested on 3.11)"))
    if v["ray"] and not v["ray"].startswith("2.60."):
        out.append(_line(WARN, "ray", f"{v['ray']}: tuning works around Ray 2.60's behaviour (output engine, "
                         "BOHB resume)", "pip install 'ray[tune]==2.60.*'"))
    # torchvision 0.N pairs with torch 2.(N-15) (0.15 with 2.0, 0.29 with 2.14); a mismatched pair
    # imports, then fails in its compiled ops ("operator torchvision::nms does not exist").
    if v["torch"] and v["torchvision"]:
        t_minor, tv_minor = int(v["torch"].split(".")[1]), int(v["torchvision"].split(".")[1])
        if v["torch"].startswith("2.") and tv_minor - 15 != t_minor:
            out.append(_line(FAIL, "torchvision", f"{v['torchvision']} is built for torch 2.{tv_minor - 15}, "
                             f"not {v['torch']}", f"pip install torchvision==0.{t_minor + 15}.*"))
    out.append(_check_bohb())
    return out


def _check_bohb() -> dict:
    """BOHB needs hpbandster and ConfigSpace to import and agree with Ray's TuneBOHB: ask it for
    one configuration instead of trusting version numbers."""
    try:
        from tuning import backend, spaces

        space = spaces.load("cifar_bohb")
        config = backend.bohb_suggestion(space)
        assert config and set(space.params) <= set(config), config
    except Exception as exc:  # an import error, a ConfigSpace API change: any of them stops BOHB
        return _line(FAIL, "bohb", f"TuneBOHB cannot suggest a configuration ({type(exc).__name__}: "
                     f"{str(exc).splitlines()[0] if str(exc) else ''})",
                     "pip install hpbandster 'ConfigSpace>=1.0' (Python 3.10-3.11 are tested)")
    return _line(OK, "bohb", "TuneBOHB (hpbandster + ConfigSpace) suggests configurations")


def check_gpus() -> list[dict]:
    import torch

    if not torch.cuda.is_available():
        built = f"torch built with CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only torch build"
        return [_line(OK, "gpu", f"no GPU: trials run on CPU ({built})")]
    return gpu_lines(torch.cuda.device_count())


def read_gpus() -> list[dict]:
    """Every GPU as NVIDIA's own NVML bindings (nvidia-ml-py) read it: name, memory used and
    total (MB), utilisation (% of the last sample period). Raises ImportError without the
    package, pynvml.NVMLError without a driver."""
    import pynvml

    pynvml.nvmlInit()
    try:
        out = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            name, mem = pynvml.nvmlDeviceGetName(handle), pynvml.nvmlDeviceGetMemoryInfo(handle)
            out.append({"index": i, "name": name.decode() if isinstance(name, bytes) else name,
                        "memory_used_mb": mem.used / 2**20, "memory_total_mb": mem.total / 2**20,
                        "utilization_pct": float(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu)})
        return out
    finally:
        pynvml.nvmlShutdown()


def gpu_lines(cuda_devices: int) -> list[dict]:
    """The GPUs through NVML, GPUtil's view where GPUtil imports, and torch's memory figures for
    the `cuda_devices` torch sees when NVML cannot read them."""
    out = []
    try:
        for g in read_gpus():
            out.append(_line(OK, f"gpu {g['index']}", f"{g['name']}: {g['memory_used_mb']:.0f}/"
                             f"{g['memory_total_mb']:.0f} MB used, {g['utilization_pct']:.0f}% busy (NVML)"))
    except ImportError as exc:
        out.append(_line(WARN, "nvml", f"nvidia-ml-py is not installed ({exc})", "pip install nvidia-ml-py"))
    except Exception as exc:  # pynvml.NVMLError_*: no driver library, no permission, a GPU fallen off the bus
        out.append(_line(WARN, "nvml", f"NVML cannot read the GPUs: {exc}",
                         "check the NVIDIA driver: nvidia-smi should list the GPUs"))
    nvml_ok = any(line["what"].startswith("gpu ") for line in out)
    out.append(gputil_line(nvml_ok))
    if not nvml_ok:
        import torch

        for i in range(cuda_devices):
            free, total = torch.cuda.mem_get_info(i)
            out.append(_line(OK, f"gpu {i}", f"{torch.cuda.get_device_name(i)}: "
                             f"{(total - free) / 2**20:.0f}/{total / 2**20:.0f} MB used (torch)"))
    return out


def gputil_line(nvml_ok: bool) -> dict:
    """GPUtil's view (a common tool for watching GPUs), or why there is none. GPUtil 1.4.0, its
    last release (2018), imports distutils, which Python 3.12 removed: there it fails to import
    at all, and nvidia-smi on PATH would not help."""
    try:
        import GPUtil
    except Exception as exc:  # ModuleNotFoundError: distutils on 3.12+, or GPUtil not installed
        cause = f"GPUtil cannot be imported: {exc}"
        if "distutils" in str(exc):
            cause += " (Python 3.12 removed distutils; tuning reads the GPUs through NVML instead)"
        return _line(OK if nvml_ok else WARN, "gputil", cause,
                     "pip install setuptools (it provides distutils) for GPUtil's view, or nvidia-ml-py for NVML's")
    try:
        gpus = GPUtil.getGPUs()  # runs nvidia-smi; an empty list when it cannot
    except Exception as exc:  # nvidia-smi's output not as GPUtil expects
        return _line(WARN, "gputil", f"GPUtil cannot read the GPUs ({type(exc).__name__}: {exc})",
                     "check that nvidia-smi runs and lists the GPUs")
    if not gpus:
        return _line(WARN, "gputil", "GPUtil sees no GPU: it reads them by running nvidia-smi",
                     "put nvidia-smi on PATH")
    return _line(OK, "gputil", "; ".join(f"gpu {g.id} {g.name}: {g.memoryUsed:.0f}/{g.memoryTotal:.0f} MB used, "
                                         f"{100 * g.load:.0f}% busy" for g in gpus))


def check_ray(backend, address: str | None) -> tuple[list[dict], dict | None]:
    try:
        backend.start_ray(address=address)
        info = backend.cluster_info()
    except backend.ClusterError as exc:
        return [_line(FAIL, "ray", str(exc), "see docs/cluster.md")], None
    alive = [n for n in info["nodes"] if n["alive"]]
    r = info["resources"]
    where = f"cluster at {info['address']}" if address else "local Ray"
    out = [_line(OK, "ray", f"{where}: {len(alive)} node(s), {r.get('CPU', 0):g} CPUs, {r.get('GPU', 0):g} GPUs, "
                 f"{r.get('object_store_memory', 0) / 2**30:.1f} GB object store")]
    for n in alive:
        out.append(_line(OK, "  node", f"{n['ip']}: {n['cpus']:g} CPUs, {n['gpus']:g} GPUs, "
                         f"{n['memory_gb']:.1f} GB memory"))
    return out, info


def check_data(data_dir: Path) -> list[dict]:
    if data_dir.exists() and not data_dir.is_dir():  # tuning.run refuses it
        return [_line(FAIL, "data", f"{data_dir} is a file, not a folder", "give --data-dir a folder")]
    data_dir = data.data_root(data_dir)
    problems = data.cifar10_problems(data_dir)
    if not problems:
        return [_line(OK, "data", f"real CIFAR-10 in {data_dir}, every file's md5 verified")]
    if (data_dir / "cifar-10-batches-py").exists():
        return [_line(FAIL, "data", data.damaged(problems), "copy or download CIFAR-10 again (docs/data.md)")]
    tarball = data_dir / "cifar-10-python.tar.gz"
    if tarball.is_file():
        from torchvision.datasets.utils import check_integrity

        if not check_integrity(str(tarball), data._cifar10().tgz_md5):  # what a run checks before unpacking it
            return [_line(FAIL, "data", f"{tarball} fails its md5 check (corrupt or partial download)",
                          "copy or download it again (docs/data.md)")]
        return [_line(OK, "data", f"cifar-10-python.tar.gz in {data_dir}: a run unpacks it, its md5 verified")]
    where = _unwritable(data_dir)
    if where:  # a run would write its synthetic images there
        return [_line(FAIL, "data", f"no CIFAR-10 in {data_dir}, and {where}: a run cannot write synthetic images "
                      "there either", "give --data-dir a folder you can write, or one holding CIFAR-10")]
    return [_line(WARN, "data", f"no CIFAR-10 in {data_dir}: runs download it if they can, else use "
                  "synthetic images (accuracies then say nothing about CIFAR-10)",
                  f"put CIFAR-10's files in {data_dir}" if data_dir.name == "cifar-10-batches-py"
                  else f"unpack cifar-10-python.tar.gz into {data_dir}")]


def _unwritable(folder: Path) -> str | None:
    """Why nothing can be written in folder (or where it would be made), or None (cli.unwritable)."""
    refused = cli.unwritable(folder)
    return f"{refused[0]} cannot be written ({refused[1]})" if refused else None


def check_disk(results_dir: Path) -> list[dict]:
    here = results_dir
    while not here.exists():  # the results dir may not exist yet: measure where it will be
        here = here.parent
    if not here.is_dir():  # tuning.run refuses it
        return [_line(FAIL, "disk", f"{here} is a file: no results dir can be made under it",
                      "give --results-dir a folder")]
    where = _unwritable(here)
    if where:  # tuning.run refuses it
        return [_line(FAIL, "disk", where, "give --results-dir a folder you can write")]
    free = shutil.disk_usage(here).free / 2**30
    if free < MIN_FREE_GB:
        return [_line(FAIL, "disk", f"{free:.1f} GB free at {here}",
                      f"free space or choose another --results-dir (at least {MIN_FREE_GB:g} GB)")]
    return [_line(OK, "disk", f"{free:.1f} GB free at {here}")]


def check_live(backend, info: dict) -> list[dict]:
    """One trial of the real CIFAR trainable, one epoch on 512 synthetic images, through the same
    backend.run as tuning.run: Ray scheduling, the trainable, checkpointing, reading results."""
    from tuning import spaces

    gpus = 1 if info["resources"].get("GPU", 0) >= 1 else 0
    if max((n["cpus"] for n in info["nodes"] if n["alive"]), default=0) < 1:  # it waited for ever
        return [_line(FAIL, "live trial", "not run: no node of the cluster has a CPU for a trial",
                      "start a node with CPUs (`ray start --num-cpus N`); a head of 0 CPUs runs none")]
    with tempfile.TemporaryDirectory() as d:
        try:
            source = data.prepare("synthetic", Path(d) / "data", seed=0, synthetic_train=600, synthetic_test=100)
            spec = backend.RunSpec(space=spaces.load("cifar_asha"), strategy="random", num_samples=1, max_epochs=1,
                                   seed=0, cpus_per_trial=1, gpus_per_trial=gpus, source=source,
                                   results_dir=Path(d) / "results", max_train=512, max_val=88, progress=False,
                                   time_budget_s=LIVE_WAIT_S)  # a cluster whose CPUs stay busy ends it
            started = time.monotonic()
            records, _ = backend.run(spec)
            took = time.monotonic() - started
        except Exception as exc:
            return [_line(FAIL, "live trial", f"{type(exc).__name__}: {exc}", "run with --worker-logs to see "
                          "the trial's output")]
    rec = records[0] if records else None
    if rec is not None and not rec.rows and took >= LIVE_WAIT_S:
        return [_line(FAIL, "live trial", f"did not start within {LIVE_WAIT_S:.0f} s: no CPU of the cluster came free",
                      "other jobs hold the cluster's CPUs: check `ray status`, or try again later")]
    if rec is None or rec.status != "TERMINATED" or not rec.rows:
        return [_line(FAIL, "live trial", f"the trial ended {rec.status if rec else 'without starting'}: "
                      f"{(rec and rec.error) or 'no result'}", "rerun tuning.run with --worker-logs to see why")]
    row = rec.rows[-1]
    return [_line(OK, "live trial", f"1 trial, 1 epoch of the CIFAR trainable on {'GPU' if gpus else 'CPU'} "
                  f"in {took:.1f} s (loss {row['loss']:.3f}, peak RSS {row.get('peak_rss_mb', 0):.0f} MB)")]


def checks(address: str | None = None, data_dir: Path = Path("data"), results_dir: Path = Path("results"),
           live: bool = True) -> list[dict]:
    """Every check, in the order the screen shows them: a list of {status, what, detail, fix}.
    Starts Ray (the cluster at `address`, else a local one) and stops it again."""
    from tuning import backend

    lines = check_software() + check_gpus()
    ray_lines, info = check_ray(backend, address)
    lines += ray_lines + check_data(data_dir) + check_disk(results_dir)
    if live:
        lines += check_live(backend, info) if info else [_line(FAIL, "live trial", "not run: no Ray cluster")]
    backend.stop_ray()
    return lines


def render(lines: list[dict]) -> str:
    """The lines as the screen shows them: status, what, detail; a fix under each line not OK."""
    out = []
    for line in lines:
        out.append(f"{line['status']:<5} {line['what']:<12} {line['detail']}")
        if line["fix"] and line["status"] != OK:
            out.append(f"{'':<5} {'':<12} fix: {line['fix']}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = cli.Parser(prog="python -m tuning.doctor", description=__doc__.split("\n\n")[0])
    p.add_argument("--address", metavar="auto|HOST:PORT", help="check the Ray cluster there instead of a local Ray")
    p.add_argument("--data-dir", default="./data", help="where CIFAR-10 should be (default ./data)")
    p.add_argument("--results-dir", default="results", help="where results will go (default ./results)")
    p.add_argument("--no-live", action="store_true", help="skip the live one-trial run")
    p.add_argument("--json", metavar="PATH", type=cli.output_file, help="also write the checks to PATH as JSON, as gpucheck reads them")
    try:
        args = p.parse_args(argv)
        for flag in ("data_dir", "results_dir"):  # as tuning.run: '' checked the current folder
            cli.check_folder_named(flag, getattr(args, flag))
    except cli.UsageError as exc:
        print(f"tuning.doctor: error: {exc}", file=sys.stderr)
        return 2

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("tuning.trial.data").setLevel(logging.ERROR)  # "generating synthetic data" for the live check
    cli.quiet_libraries()
    lines = checks(args.address, Path(args.data_dir).absolute(), Path(args.results_dir).absolute(),
                   live=not args.no_live)
    print(render(lines))
    if args.json:
        try:
            results.write_json(args.json, lines)
        except results.WriteError as exc:  # the checks are on the screen: only the file is missing
            print(f"tuning.doctor: error: {exc}", file=sys.stderr)
            return 2
    failed = [line for line in lines if line["status"] == FAIL]
    print(f"\n{len(failed)} problem(s): see the FAIL lines" if failed else "\nAll checks passed.")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
