"""Starting Ray, or joining a running cluster (--address), and describing what it offers.

Part of tuning.backend (every Ray call of the project lives in this package).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys

from tuning.cli import TuningError


class ClusterError(TuningError):
    """The Ray cluster named by --address cannot be joined: a one-line reason and the fix."""


GCS_PORT = "HOST:PORT (the head's GCS port, 6379 unless `ray start --head --port` chose another)"


def started_address() -> str:
    """--address auto: RAY_ADDRESS, else the address the latest `ray start --head` on this machine
    wrote down. Where it wrote none, Ray's own "auto" falls back to any Ray running on the machine,
    and a search joined another user's short-lived local Ray (found in a new-user trial)."""
    from tuning.backend import rayinternals

    env = os.environ.get("RAY_ADDRESS", "")
    if env and env not in ("auto", "local"):
        return env
    found = rayinternals.started_address()
    if not found:
        raise ClusterError("--address auto: no cluster was started on this machine with `ray start --head` (one "
                           "started with --temp-dir elsewhere leaves no address where Ray looks): start one, or "
                           f"give --address {GCS_PORT}")
    return found


def _check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """ray.init on an address nobody listens at retries for minutes; a TCP connect says it at once.
    And on one where a web server answers (the dashboard's port, 8265, which `ray job submit` takes)
    it retried for ten minutes and more: one HTTP request tells that apart, as Ray's GCS speaks gRPC."""
    import socket

    if "://" in address:
        raise ClusterError(f"--address {address}: give {GCS_PORT}, without a scheme (ray:// is Ray Client, and "
                           "http:// the dashboard, neither of which a search runs through)")
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ClusterError(f"--address {address}: expected auto or {GCS_PORT}")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s) as probe:
            probe.settimeout(2.0)
            probe.sendall(b"GET / HTTP/1.0\r\n\r\n")
            try:
                head = probe.recv(8)
            except OSError:  # no answer to it: not a web server
                head = b""
    except OSError as exc:
        raise ClusterError(f"--address {address}: no Ray cluster answers there ({exc.strerror or exc}); "
                           "start one with `ray start --head` on that machine, or fix the address") from None
    if head.startswith(b"HTTP/"):
        raise ClusterError(f"--address {address}: a web server answers there (Ray's dashboard and job server "
                           f"listen on 8265), not Ray's GCS: give {GCS_PORT}")


# Tune gives every trial actor runtime_env={"env_vars": {"PL_DISABLE_FORK": "1"}} (its class_cache,
# for PyTorch Lightning: Ray #28197). Ray runs an actor with a runtime env only in a worker started
# with it, so it left the workers it prestarted idle and started a fresh one per trial actor: 1.0 s
# here before a trial's imports even began (docs/performance.md). A local Ray started here gets
# the variable in every worker's environment instead, and prestarted_workers() leaves Tune's copy out.
# Tune also copies the driver's AWS credentials and Ray Train's variables into that runtime env; the
# workers inherited the values the driver had when it started Ray, so those are left out as well.
TUNE_WORKER_ENV = {"PL_DISABLE_FORK": "1"}
# The local Ray start_ray started with TUNE_WORKER_ENV, and the variables Tune propagates as they were then.
_local_node: dict = {"id": None, "env": {}}


def start_ray(address: str | None = None, worker_logs: bool = False, num_cpus: int | None = None) -> None:
    """Start a local Ray, or join the running cluster at `address` ("auto" or HOST:PORT); what it
    offers is cluster_info()'s to tell. `num_cpus`: the local Ray's CPUs (default: the machine's);
    a cluster offers what its nodes have.

    Trial processes' output is not forwarded unless worker_logs: it is mostly Ray's own INFO
    lines and SIGTERM tracebacks of actors shut down at the end, and it buried the progress
    table. Trial errors still reach the driver through Tune, and every line is in Ray's logs.
    Logging is left as the caller set it: ray.init would set the "ray" logger to INFO, so it is
    given the level that logger has (the commands filter Ray's noise: tuning.cli.quiet_libraries)."""
    import signal

    import ray

    if ray.is_initialized() and address is not None:
        _check_same_ray(address)
    if not ray.is_initialized():
        level = logging.getLogger("ray").level
        # ray.init takes SIGTERM over: its Python handler stops the local Ray and exits 1, and its
        # C++ failure handler prints a stack dump and aborts. A handler the command installed
        # (tuning.cli: stop like Ctrl-C) gets it back; Ray's processes still stop at exit.
        sigterm = signal.getsignal(signal.SIGTERM)
        try:
            _init(address, num_cpus, worker_logs, level)
        except SystemExit as exc:  # SIGTERM within ray.init, whose own handler exits with status 15
            if exc.code != signal.SIGTERM or not callable(sigterm):
                raise
            signal.signal(signal.SIGTERM, sigterm)
            sigterm(signal.SIGTERM, None)  # the command's handler (tuning.cli) stops it as at any other moment
            raise
        if callable(sigterm):
            signal.signal(signal.SIGTERM, sigterm)


def _check_same_ray(address: str) -> None:
    """A process whose Ray is up (an earlier ray.init) runs on that Ray: one named elsewhere is refused,
    where it was once ignored and that Ray's address recorded as the one asked for."""
    import socket

    import ray

    here = ray.get_runtime_context().gcs_address
    wanted = started_address() if address == "auto" else address
    this_machine = {ray.util.get_node_ip_address()}

    def ip_port(a: str) -> tuple:  # this machine's addresses (127.0.0.1, its own IP) as one
        host, _, port = a.rpartition(":")
        try:
            ip = socket.gethostbyname(host)
        except OSError:
            ip = host
        return ("this machine" if ip.startswith("127.") or ip in this_machine else ip), port

    if ip_port(wanted) != ip_port(here):
        raise ClusterError(f"--address {address}: this process already runs Ray at {here} (ray.init): call "
                           "ray.shutdown() first to join another, or leave out address= to run on this one")


def _init(address: str | None, num_cpus: int | None, worker_logs: bool, level: int) -> None:
    import ray

    from tuning.backend import rayinternals

    if address is None:
        # "local": a new Ray of its own, even when `ray start` left a cluster on this machine
        # (ray.init() alone joins that one; --address auto is the way to ask for it).
        with environ(TUNE_WORKER_ENV):  # the raylet, and so every worker, inherits it
            inherited = rayinternals.tune_propagated_env()
            ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, log_to_driver=worker_logs,
                     logging_level=level)
        _local_node.update(id=ray.get_runtime_context().get_node_id(), env=inherited)
        return
    if address == "auto":
        address = started_address()
    _check_reachable(address)
    _check_token(address)
    try:
        ray.init(address=address, log_to_driver=worker_logs, logging_level=level)
    except (ConnectionError, ray.exceptions.AuthenticationError) as exc:
        raise ClusterError(_refusal(address, exc)) from None


AUTH_REFUSED = ("--address {address}: the cluster refused this driver's auth token (missing or wrong); put the "
                "head's `ray get-auth-token` in ~/.ray/auth_token, RAY_AUTH_TOKEN_PATH or RAY_AUTH_TOKEN")


def _check_token(address: str) -> None:
    """Ray picks up this machine's token (RAY_AUTH_TOKEN[_PATH], ~/.ray/auth_token) by itself
    only for --address auto: naming the head's HOST:PORT, a driver joined without it and was
    refused, after 20 s of retries. So ask the head (one GCS call, milliseconds) whether it
    wants a token, and whether it takes ours. Turning token mode on for a head that has auth off
    is no fix either: its workers then cannot call the driver, and every trial's actor dies."""
    from tuning.backend import rayinternals

    if not _auth_refused(address):
        return
    mode = os.environ.get("RAY_AUTH_MODE")
    if mode is None and rayinternals.enable_token_auth_if_available() and not _auth_refused(address):
        return
    if mode is not None and mode.lower() != "token":
        raise ClusterError(f"--address {address}: the cluster wants an auth token, and RAY_AUTH_MODE={mode} here "
                           "keeps this driver from sending one; unset RAY_AUTH_MODE or set it to token")
    raise ClusterError(AUTH_REFUSED.format(address=address))


def _auth_refused(address: str) -> bool:
    from ray.exceptions import AuthenticationError

    from tuning.backend import rayinternals

    # The refused call also logs a C++ warning to stderr; the refusal is the answer we asked for.
    sys.stderr.flush()
    with open(os.devnull, "w") as devnull:
        saved = os.dup(2)
        try:
            os.dup2(devnull.fileno(), 2)
            rayinternals.connect_gcs(address)
        except AuthenticationError:
            return True
        except Exception:  # anything else, ray.init meets and reports
            return False
        finally:
            os.dup2(saved, 2)
            os.close(saved)
    return False


def _refusal(address: str, exc: Exception) -> str:
    """One line for a failed join. A wrong token met by ray.init surfaces as a ConnectionError
    (after Ray's retries) whose cause is the AuthenticationError."""
    if "AuthenticationError" in f"{type(exc).__name__} {exc.__cause__!r}":
        return AUTH_REFUSED.format(address=address)
    first = (str(exc).splitlines() or [type(exc).__name__])[0].rstrip(".")
    return f"--address {address}: {first}. Start one with `ray start --head`, or give HOST:PORT of its head"


def cluster_info() -> dict:
    """The joined cluster as plain data: its nodes (address, CPUs, GPUs, memory, alive) and
    totals, for tuning.doctor."""
    import ray

    nodes = [{"ip": n["NodeManagerAddress"], "alive": bool(n["Alive"]), "cpus": n["Resources"].get("CPU", 0),
              "gpus": n["Resources"].get("GPU", 0), "memory_gb": n["Resources"].get("memory", 0) / 2**30,
              "object_store_gb": n["Resources"].get("object_store_memory", 0) / 2**30} for n in ray.nodes()]
    return {"address": ray.get_runtime_context().gcs_address, "nodes": nodes,
            "resources": dict(ray.cluster_resources())}


def stop_ray() -> None:
    import ray

    ray.shutdown()
    _local_node.update(id=None, env={})


@contextlib.contextmanager
def environ(values: dict[str, str | None], keep_set: bool = False):
    """The process's environment with `values` set for the block (None: left alone), put back as it
    was afterwards. keep_set: a variable already set keeps its value (a value the user set is theirs)."""
    before = {k: os.environ.get(k) for k in values}
    for k, v in values.items():
        if v is not None and not (keep_set and before[k] is not None):
            os.environ[k] = v
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def prestarted_workers():
    """A block within which, on the local Ray start_ray started, Tune's default trial-actor environment
    (TUNE_WORKER_ENV, which its workers already have) is left out of the actors' runtime env, so
    Ray runs trial actors in the workers it prestarted. Of the variables Tune propagates from the
    driver (AWS credentials, Ray Train's), only those set or changed since Ray started still go in,
    and then Ray starts workers for them as before."""
    import ray

    from tuning.backend import rayinternals

    ours = (_local_node["id"] is not None and ray.is_initialized()
            and ray.get_runtime_context().get_node_id() == _local_node["id"]
            and rayinternals.tune_actor_env() == TUNE_WORKER_ENV)
    if not ours:
        return contextlib.nullcontext()
    now, then = rayinternals.tune_propagated_env(), _local_node["env"]
    return rayinternals.without_tune_actor_env({k for k, v in now.items() if then.get(k) != v})


def worker_import_error(module: str) -> str | None:
    """Whether the processes Ray runs trials in can import `module`, on every alive node: None, or
    the first failure ("node IP: ModuleNotFoundError: ..."). The driver importing it proves
    nothing: a folder put on sys.path after Ray started, or a file only on this machine, is not
    on the workers'."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    @ray.remote(num_cpus=0, max_retries=0)
    def try_import(name: str) -> str | None:
        import importlib

        try:
            importlib.import_module(name)
        except Exception as exc:  # whatever the import raises, the trials would meet it too
            return f"{type(exc).__name__}: {exc}"
        return None

    nodes = [n for n in ray.nodes() if n["Alive"] and n["Resources"].get("CPU", 0) > 0]
    refs = [(n["NodeManagerAddress"], try_import.options(
        scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote(module)) for n in nodes]
    for ip, ref in refs:
        error = ray.get(ref, timeout=300)
        if error:
            return f"{error} (on node {ip})" if len(refs) > 1 else error
    return None
