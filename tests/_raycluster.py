"""A Ray cluster (a head and worker nodes) on this machine, in a network namespace of its own.

Ray announces this machine's primary address and listens on it unless told
otherwise, and a test must never reach past loopback. So the cluster, its
driver and every process they start (raylets, Ray's workers, node hosts,
kernels) run in a new network namespace whose only interface is ``lo``:
nothing in it can reach any other address, or be reached from one, whatever
a default somewhere says. Every node is also told ``127.0.0.1`` and gets no
dashboard, and usage stats are off.

Two sides, one module:

- ``run_in_cluster("module:function")``, called by a test, starts this file
  as a script under ``unshare --net`` (as root), holds the namespace open by
  a descriptor while it runs, waits for the script's JSON answer, then looks
  through /proc for any process still in that namespace: each is a leak,
  killed by pid, and fails the run.
- The script brings ``lo`` up, checks that it is the only interface (listed,
  never connected to), starts the cluster with ``ray.cluster_utils.Cluster``
  (Ray's files in a temp dir of the run's own: ``RAY_TMPDIR``), connects a
  driver, imports and calls the scenario with a ``ClusterInfo``, and writes
  what it returned (JSON) with the timings. Then it stops the cluster and
  kills, by pid, whatever is left in the namespace after a grace, saying so.

A scenario is a plain function in a module under tests/ (the script's folder,
which is also on every Ray worker's path) taking a ``ClusterInfo`` and
returning something JSON can write; it runs in the driver, connected.
An exception in it comes back as the run's ``error``, with its traceback.

Run a scenario's test with a Python that has ray (``pip install -e '.[ray]'``),
as root: ``python -m pytest tests/test_ray.py``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _netns import held_namespace, interfaces
from _pids import end_netns
from _readme_shell import loopback_up

__all__ = ["ClusterInfo", "ClusterRun", "ray_unavailable", "run_in_cluster"]

HERE = Path(__file__).resolve().parent
LOOPBACK = "127.0.0.1"
# What each worker node has, in turn: the second has a resource and a label the first lacks.
WORKER_NODES: list[dict[str, Any]] = [
    {"num_cpus": 2, "num_gpus": 2, "labels": {"zone": "a"}},  # GPUs Ray counts: none real
    {"num_cpus": 2, "resources": {"special": 1}, "labels": {"zone": "b"}},
]
# Ray's smallest object store is 75 MiB; the nodes hold small values only.
_OBJECT_STORE_BYTES = 80 * 2**20
# What a leak is given to end on its own once the cluster has stopped (a
# kernel's supervisor sees its owner gone, Ray's workers see their raylet gone).
_GRACE = 10.0


@dataclass(frozen=True)
class ClusterInfo:
    """What a scenario is told about the cluster it runs in.

    Attributes:
        address: the GCS's address (``127.0.0.1:<port>``), as ``ray.init`` takes it.
        head: the head node's id (hex); it has no CPU, so nothing lands there unasked.
        workers: the worker nodes' ids (hex), in the order they were added.
        temp_dir: this run's own temp dir (Ray's files are below it), for
            whatever else the scenario keeps.
        cluster: the ``ray.cluster_utils.Cluster`` (``cluster.remove_node``
            takes a node away, as a lost machine would be).
        worker_nodes: the worker nodes' ``ray._private.node.Node`` objects,
            in the order of ``workers``.
    """

    address: str
    head: str
    workers: list[str]
    temp_dir: str
    cluster: Any = field(repr=False)
    worker_nodes: list[Any] = field(repr=False)


@dataclass
class ClusterRun:
    """What a run in the cluster gave back.

    Attributes:
        result: what the scenario returned, read back from JSON.
        interfaces: the namespace's network interfaces, as the script listed them.
        timings: seconds: ``namespace`` (from the call until the script runs
            in it: unshare and Python's start), ``ray_import``, ``head``,
            ``workers`` (added and registered), ``connect`` (the driver),
            ``scenario``, ``teardown`` (the cluster stopped and the namespace
            empty), ``total`` (the whole call, seen from outside).
        ray_version: the ray the script imported.
        leaked: the processes found in the namespace after the cluster
            stopped (pid and command line), each killed.
        log: the tail of what the script and the cluster printed.
    """

    result: Any
    interfaces: list[str]
    timings: dict[str, float]
    ray_version: str
    leaked: list[str] = field(default_factory=list)
    log: str = ""


def ray_unavailable() -> str | None:
    """Why a cluster cannot be started here (None: it can).

    Ray must be importable by this Python, and a network namespace must be
    makeable (root, util-linux's ``unshare``).
    """
    import importlib.util

    if importlib.util.find_spec("ray") is None:
        return "ray is not installed: python -m pip install -e '.[ray]'"
    if shutil.which("unshare") is None:
        return "no unshare command (util-linux): the cluster needs a network namespace"
    if os.geteuid() != 0:
        return "a network namespace of its own needs root (unshare --net)"
    probe = subprocess.run(["unshare", "--net", "true"], capture_output=True, timeout=60)
    if probe.returncode != 0:
        return f"unshare --net fails here: {probe.stderr.decode(errors='replace').strip()}"
    return None


def run_in_cluster(
    scenario: str, *, workers: int = 2, timeout: float = 300.0, python: str = sys.executable
) -> ClusterRun:
    """Runs ``scenario`` ("module:function") in a fresh loopback-only cluster; its answer.

    One cluster at a time in a test run (the README's Ray pages take the same lock):
    two starting together on a small machine can leave a raylet unregistered past
    the 30 s Ray waits for it.

    Raises:
        AssertionError: the scenario raised (its traceback is in the message),
            the script failed or ran past ``timeout``, the namespace had an
            interface other than ``lo``, or a process was left in it.
    """
    from servers import FAVOURED, RAY_CLUSTER_LOCK, file_lock  # not by the script's own run

    with file_lock(RAY_CLUSTER_LOCK):
        return _run_in_cluster(
            scenario, workers=workers, timeout=timeout, python=python, favoured=FAVOURED
        )


def _run_in_cluster(
    scenario: str, *, workers: int, timeout: float, python: str, favoured: tuple[str, ...]
) -> ClusterRun:
    started = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="kxray-"))  # short: Ray's socket paths are below it
    answer_path, log_path = work / "answer.json", work / "script.log"
    outer = os.readlink("/proc/self/ns/net")
    env = {
        **os.environ,
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_TMPDIR": str(work),
        # Ray starts its workers (so the node hosts and their kernels) 15 nicer than its
        # raylet, which FAVOURED puts 10 ahead: 10 leaves the kernels level with the run's
        # other work. At Ray's 15 a busy loop got so little CPU on the loaded CI machine
        # that the CPU quota test's 3 seconds took longer than its minute.
        "RAY_worker_niceness": "10",
        # And every other temp dir (node hosts' roots, kernels' sockets), removed with it
        # even when a node's processes were killed before they could clean up.
        "TMPDIR": str(work),
        # Every process of the cluster inherits it: Ray's workers import the scenario's module.
        "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])),
    }
    command = [
        *favoured, "unshare", "--net", "--", python, str(Path(__file__).resolve()),
        "--scenario", scenario, "--workers", str(workers), "--answer", str(answer_path),
        "--outer-namespace", outer, "--work", str(work), "--called-at", repr(time.time()),
    ]  # fmt: skip
    with open(log_path, "wb") as log:
        script = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env
        )
    leaked: list[str] = []
    timed_out = False
    try:
        with held_namespace(script, outer) as namespace:
            try:
                script.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                timed_out = True  # the namespace's processes, the script's too, are killed below
            finally:  # an interrupted test too leaves nothing running
                leaked = end_netns(namespace, exclude=(), grace=_GRACE)
            script.wait(timeout=30)
        log_tail = _tail(log_path)
        if not answer_path.exists():
            why = f"ran past {timeout:g} s" if timed_out else f"exited {script.returncode}"
            raise AssertionError(f"the script wrote no answer ({why}):\n{log_tail}")
        answer = json.loads(answer_path.read_text())
    finally:
        if script.poll() is None:
            script.kill()
            script.wait()
        shutil.rmtree(work, ignore_errors=True)
    timings = dict(answer["timings"], total=time.perf_counter() - started)
    run = ClusterRun(
        result=answer.get("result"),
        interfaces=answer["interfaces"],
        timings=timings,
        ray_version=answer.get("ray_version", ""),
        leaked=answer["leaked"] + leaked,
        log=log_tail,
    )
    assert answer.get("error") is None, f"{answer['error']}\n--- log:\n{log_tail}"
    assert run.interfaces == ["lo"], f"the namespace had {run.interfaces}, not lo alone"
    assert run.leaked == [], f"left in the namespace, killed: {run.leaked}"
    return run


# -- both sides: the processes of one network namespace, known by its inode


def _tail(path: Path, limit: int = 6000) -> str:
    data = path.read_bytes() if path.exists() else b""
    return data[-limit:].decode("utf-8", "replace")


# -- the script's side, inside the namespace


def _scenario(spec: str) -> Callable[[ClusterInfo], Any]:
    module, _, name = spec.partition(":")
    function: Callable[[ClusterInfo], Any] = getattr(importlib.import_module(module), name)
    return function


def _in_cluster(args: argparse.Namespace, answer: dict[str, Any]) -> None:
    """Starts the cluster, runs the scenario, stops the cluster; fills in ``answer``."""
    timings = answer["timings"]
    clock = time.perf_counter()
    import ray
    from ray.cluster_utils import Cluster

    timings["ray_import"] = time.perf_counter() - clock
    answer["ray_version"] = ray.__version__
    node = {
        "node_ip_address": LOOPBACK,
        "include_dashboard": False,
        "object_store_memory": _OBJECT_STORE_BYTES,
    }
    clock = time.perf_counter()
    cluster = Cluster(initialize_head=True, head_node_args={**node, "num_cpus": 0})
    try:
        timings["head"] = time.perf_counter() - clock
        clock = time.perf_counter()
        workers = [
            cluster.add_node(**node, **WORKER_NODES[index % len(WORKER_NODES)])
            for index in range(args.workers)
        ]
        cluster.wait_for_nodes()
        timings["workers"] = time.perf_counter() - clock
        clock = time.perf_counter()
        ray.init(address=cluster.address, _node_ip_address=LOOPBACK, log_to_driver=True)
        timings["connect"] = time.perf_counter() - clock
        info = ClusterInfo(
            address=cluster.address,
            head=cluster.head_node.node_id,
            workers=[worker.node_id for worker in workers],
            temp_dir=args.work,
            cluster=cluster,
            worker_nodes=workers,
        )
        clock = time.perf_counter()
        try:
            answer["result"] = _scenario(args.scenario)(info)
        finally:
            timings["scenario"] = time.perf_counter() - clock
    finally:
        clock = time.perf_counter()
        ray.shutdown()
        cluster.shutdown()
        timings["teardown"] = time.perf_counter() - clock


def _main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--scenario", required=True, help="module:function, from tests/")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--answer", required=True, help="where the JSON answer goes")
    parser.add_argument("--outer-namespace", required=True, help="the caller's net namespace")
    parser.add_argument("--work", required=True, help="the run's temp dir")
    parser.add_argument("--called-at", type=float, required=True, help="the caller's time.time()")
    args = parser.parse_args()
    answer: dict[str, Any] = {"timings": {}, "interfaces": [], "leaked": [], "error": None}
    answer["timings"]["namespace"] = time.time() - args.called_at
    try:
        if os.readlink("/proc/self/ns/net") == args.outer_namespace:
            raise RuntimeError("not in a network namespace of its own: run under unshare --net")
        loopback_up()
        answer["interfaces"] = interfaces()
        if answer["interfaces"] != ["lo"]:
            raise RuntimeError(f"the namespace has {answer['interfaces']}: refusing to start Ray")
        _in_cluster(args, answer)
    except BaseException:
        answer["error"] = traceback.format_exc()
    finally:
        clock = time.perf_counter()
        namespace = os.stat("/proc/self/ns/net")
        answer["leaked"] = end_netns(namespace, exclude=(os.getpid(),), grace=_GRACE)
        answer["timings"]["teardown"] = answer["timings"].get("teardown", 0.0) + (
            time.perf_counter() - clock
        )
        # What JSON cannot write is written as its repr, not lost with the rest.
        Path(args.answer).write_text(json.dumps(answer, default=repr))
    return 0


if __name__ == "__main__":
    sys.exit(_main())
