"""Sessions on a Ray cluster against local ones (issue #30): ``python cluster.py kernelexec ray N``.

Run as root: the script goes into a network namespace of its own where only
``lo`` is up (``unshare --net``), so Ray, which announces the machine's primary
address, can reach nothing but 127.0.0.1. There it starts a cluster of a head
(no CPUs) and one worker node (2 CPUs), takes the node's first session (its
host and zygote start: the cold figure), then measures in turns, so both kinds
meet the same load: ``ready``, a new session to the result of ``1+1`` on the
warm node and locally (both forked from a zygote, both contained by default);
``roundtrip``, ``x + 1`` in one live session of each kind. A third kind is a
session on the node with ``RayBackend(pool=1)``: the host keeps a kernel
ready, which the next such session takes. Issue #30's targets:
ready at most 2x local, round trip at most 1.5x local.
"""

from __future__ import annotations

import os
import shutil
import socket
import struct
import sys
import time
from fcntl import ioctl
from pathlib import Path
from typing import Any

from worker import run_script

ROUND_TRIPS = 20  # per sample: x + 1 in each live session of each kind
INNER = "KERNELEXEC_BENCH_RAY_NETNS"  # set once the script runs in its own namespace


def _loopback_up() -> None:
    """Brings ``lo`` up in this new network namespace, where it starts down."""
    get_flags, set_flags, up = 0x8913, 0x8914, 0x1  # SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        flags = struct.unpack("16sh", ioctl(sock, get_flags, struct.pack("16sh", b"lo", 0)))[1]
        ioctl(sock, set_flags, struct.pack("16sh", b"lo", flags | up))


def _into_own_namespace() -> None:
    """Re-runs this script under ``unshare --net`` (once), or exits saying why it cannot."""
    if os.environ.get(INNER):
        return
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        raise SystemExit("the ray scenario needs root and unshare: a loopback-only namespace")
    os.environ.update({INNER: "1", "RAY_USAGE_STATS_ENABLED": "0"})
    os.execvp("unshare", ["unshare", "--net", "--", sys.executable, *sys.argv])


async def _timed(root: Path, name: str, backend: Any) -> tuple[Any, float]:
    from kernelexec import AsyncSession

    started = time.perf_counter()
    session = AsyncSession(root / name, backend=backend, timeout=120)
    await session.start()
    answer = await session.execute("1+1")
    took = time.perf_counter() - started
    assert answer.text == "2\n", answer.text
    return session, took


async def measure(impl: str, scenario: str, n: int, root: Path) -> dict[str, Any]:
    if impl != "kernelexec" or scenario != "ray":
        raise SystemExit(f"cluster.py measures kernelexec's 'ray', not {impl} {scenario}")
    _loopback_up()
    import ray
    from ray.cluster_utils import Cluster

    from kernelexec import LocalBackend, RayBackend

    node = {"node_ip_address": "127.0.0.1", "include_dashboard": False}
    cluster = Cluster(initialize_head=True, head_node_args={**node, "num_cpus": 0})
    try:
        cluster.add_node(**node, num_cpus=2)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, _node_ip_address="127.0.0.1", log_to_driver=False)
        kinds = {
            "ray": lambda: RayBackend(cluster.address),
            "pooled": lambda: RayBackend(cluster.address, pool=1),
            "local": LocalBackend,
        }
        first, cold = await _timed(root, "cold", kinds["ray"]())
        await first.close()
        # The local zygote's first kernel starts cold too: warmed, untimed.
        warm, _ = await _timed(root, "warm", kinds["local"]())
        await warm.close()
        ready: dict[str, list[float]] = {"ray": [], "pooled": [], "local": []}
        trips: dict[str, list[float]] = {"ray": [], "pooled": [], "local": []}
        pooled = []
        forked = []
        for i in range(n):
            for kind in ("ray", "pooled", "local") if i % 2 == 0 else ("local", "pooled", "ray"):
                session, took = await _timed(root, f"{kind}{i}", kinds[kind]())
                ready[kind].append(took)
                if kind == "local":
                    forked.append(int(session._backend.forked))
                if kind == "pooled":
                    pooled.append(int(session._backend.node["pooled"]))
                await session.execute("x = 1")
                for _ in range(ROUND_TRIPS):
                    started = time.perf_counter()
                    answer = await session.execute("x + 1")
                    trips[kind].append(time.perf_counter() - started)
                assert answer.text == "2\n", answer.text
                await session.close()
    finally:
        ray.shutdown()
        cluster.shutdown()
    return {
        "samples": ready["ray"],
        "pooled": ready["pooled"],
        "taken_from_pool": pooled,
        "local": ready["local"],
        "roundtrip": trips["ray"],
        "roundtrip_local": trips["local"],
        "cold": [cold],
        "forked": forked,
    }


if __name__ == "__main__":
    _into_own_namespace()
    run_script(measure, "kernelexec-bench-ray-")
