"""``--ray`` for serve and mcp: every kernel on a Ray cluster (``_server/_ray_options.py``)."""

from __future__ import annotations

import argparse
from typing import Any

from .._exceptions import ConfigurationError, KernelStartError

__all__ = ["add_ray_options", "join_ray", "ray_policy"]


def add_ray_options(group: Any) -> None:
    """The operator's Ray flags, in ``group`` (an argument group of serve's or mcp's)."""
    group.add_argument(
        "--ray",
        default=None,
        metavar="ADDRESS",
        help="run every session's kernel on this Ray cluster (host:port of its GCS, or auto "
        "on a node of it), on a node Ray picks for the resources the session asks "
        '(ray={"num_cpus", "num_gpus", "memory", "resources", "labels"}); needs '
        "kernelexec[ray]",
    )
    group.add_argument(
        "--ray-max-cpus",
        type=float,
        default=4.0,
        metavar="N",
        help="the most CPUs a session may hold on the cluster (default 4; it holds 1 unasked)",
    )
    group.add_argument(
        "--ray-max-gpus",
        type=float,
        default=0.0,
        metavar="N",
        help="the most GPUs a session may hold on the cluster (default 0: none)",
    )
    group.add_argument(
        "--ray-shared-work-root",
        action="store_true",
        help="the work root is on storage every node mounts at the same path: kernels run in "
        "their sessions' work dirs, so files, fork, checkpoints and suspend work on the cluster",
    )
    group.add_argument(
        "--ray-max-memory",
        default=None,
        metavar="SIZE",
        help="the most of Ray's memory resource a session may hold, such as 8g (default: no cap)",
    )


def ray_policy(args: argparse.Namespace) -> Any:
    """The ``RayPolicy`` of the flags, or None without ``--ray``.

    Raises:
        ConfigurationError: a flag's value is unusable. ``--pool-size`` with
            ``--ray`` is each node's pool (``RayBackend(pool=N)``), which shared
            work dirs cannot have.
    """
    if args.ray is None:
        return None
    from .._server._options import parse_memory
    from .._server._ray_options import RayPolicy

    pool = getattr(args, "pool_size", None) or 0
    if pool and args.ray_shared_work_root:
        raise ConfigurationError(
            "--pool-size with --ray keeps kernels ready on the nodes, each in a folder of its "
            "node's; with --ray-shared-work-root every kernel runs in its session's own work "
            "dir: leave one of them out"
        )
    if not 0 <= pool <= 64:
        raise ConfigurationError("--pool-size with --ray is a number of kernels from 0 to 64")
    memory = None
    if args.ray_max_memory is not None:
        try:
            memory = parse_memory(args.ray_max_memory)
        except ValueError as exc:
            raise ConfigurationError(f"--ray-max-memory: {exc}") from None
    policy = RayPolicy(
        args.ray, args.ray_max_cpus, args.ray_max_gpus, memory, args.ray_shared_work_root, pool
    )
    wrong = policy.check()
    if wrong is not None:
        raise ConfigurationError(wrong)
    return policy


def join_ray(policy: Any) -> None:
    """Joins the cluster now, so that a wrong address stops the start with one line."""
    if policy is None or policy.ray is None:
        return
    from .._ray import join

    try:
        join(policy.ray.address)
    except KernelStartError as exc:
        raise ConfigurationError(f"--ray {policy.ray.address}: {exc}") from None
