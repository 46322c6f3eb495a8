"""Ray's settings, checked before any cluster is reached: RayBackend's, serve's and mcp's ``--ray``.

The sessions themselves run on a real cluster in tests/test_ray.py.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import pytest
from _serverproc import free_port

from kernelexec import AsyncSession, ConfigurationError, RayBackend
from kernelexec._cli._ray import ray_policy
from kernelexec._server._ray_options import RayPolicy, ray_backend


def test_a_backend_holds_what_it_is_told_and_refuses_nonsense() -> None:
    backend = RayBackend(num_cpus=2, memory=1 << 30, resources={"special": 1}, labels={"z": "a"})
    assert backend.bundle == {"CPU": 2.0, "memory": float(1 << 30), "special": 1.0}
    assert backend.fresh().bundle == backend.bundle and backend.fresh().labels == {"z": "a"}
    for wrong, said in (
        ({"num_cpus": 0}, "needs some resource to hold"),
        ({"num_cpus": -1}, "a number >= 0"),
        ({"resources": {"special": 0}}, "needs an amount > 0"),
        ({"labels": {"zone": 1}}, "both strings"),
        ({"lost_after": 0}, "seconds > 0"),
        ({"sandbox": "yes"}, "a Sandbox"),
    ):
        with pytest.raises(ConfigurationError, match=said):
            RayBackend(**wrong)  # type: ignore[arg-type]


def test_recovery_checkpoints_need_shared_work_dirs(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="shared_work_dirs=True"):
        AsyncSession(tmp_path / "a", backend=RayBackend(), checkpoint_every=60)
    AsyncSession(tmp_path / "b", backend=RayBackend(shared_work_dirs=True), checkpoint_every=60)


def test_a_clients_ray_option_is_held_to_the_operators_caps() -> None:
    caps = RayPolicy("127.0.0.1:6379", max_cpus=2, max_gpus=1, max_memory=1 << 30)
    assert caps.parse(None) == {"num_cpus": 1.0}
    assert caps.parse({"num_gpus": 1, "labels": {"zone": "b"}}) == {
        "num_gpus": 1.0,
        "labels": {"zone": "b"},
    }
    assert caps.parse({"resources": {"special": 2}}) == {"resources": {"special": 2.0}}
    for wrong, said in (
        ({"num_cpus": 3}, "over this server's cap of 2 (--ray-max-cpus)"),
        ({"num_gpus": 2}, "--ray-max-gpus"),
        ({"memory": 2 << 30}, "--ray-max-memory"),
        ({"num_cpus": True}, "must be a number"),
        ({"resources": {"CPU": 1}}, "not a custom resource"),
        ({"resources": {"node:127.0.0.1": 1}}, "not a custom resource"),
        ({"labels": {"zone": 5}}, "must be a string"),
        ({"cpus": 1}, "unknown ray option"),
        ("4", "must be an object"),
    ):
        with pytest.raises(ValueError, match=re.escape(said)):
            caps.parse(wrong)
    assert RayPolicy("x", max_cpus=0).check() == "--ray-max-cpus must be a positive number"


def _start(command: str, *args: str, work: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kernelexec", command, *args, "--work-root", str(work)],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("command", ["serve", "mcp"])
def test_an_unreachable_cluster_stops_the_start_with_one_line(command: str, tmp_path: Path) -> None:
    closed = f"127.0.0.1:{free_port()}"  # nothing listens there
    extra = ["--port", "0"] if command == "serve" else []
    done = _start(command, "--ray", closed, *extra, work=tmp_path / "root")
    assert done.returncode == 2, done
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and f"--ray {closed}" in lines[0] and "GCS" in lines[0], lines
    assert "Traceback" not in done.stderr


def test_serve_pool_size_with_ray_is_each_nodes_pool_and_refused_with_shared_dirs(
    tmp_path: Path,
) -> None:
    args = argparse.Namespace(
        ray="auto", ray_max_cpus=4.0, ray_max_gpus=0.0, ray_max_memory=None,
        ray_shared_work_root=False, pool_size=2,
    )  # fmt: skip
    policy = ray_policy(args)
    assert policy.pool == 2
    assert ray_backend(policy, policy.parse(None), True).pool == 2
    done = _start(
        "serve", "--ray", "auto", "--ray-shared-work-root", "--pool-size", "2",
        work=tmp_path / "root",
    )  # fmt: skip
    assert done.returncode == 2 and "--ray-shared-work-root" in done.stderr, done
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
