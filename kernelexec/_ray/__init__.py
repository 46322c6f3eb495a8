"""Sessions on a Ray cluster: ``RayBackend`` (the caller's side) and ``NodeHost`` (each node's).

A room of its own above ``_backends`` and ``_state``: a node's host starts
``LocalBackend`` kernels, and forks one on its node by checkpointing and
restoring it there (``_state``), which no module of ``_backends`` may use.
"""

from typing import Any

from ._backend import RayBackend, join

__all__ = ["RayBackend", "join", "node_of"]


def node_of(backend: object) -> dict[str, Any] | None:
    """Where a session's kernel runs on a Ray cluster, for its description (``SessionInfo.node``):
    its node's id and address, its GPUs, whether it was a ready kernel; None off a cluster."""
    if not isinstance(backend, RayBackend) or not backend.node:
        return None
    return {key: backend.node.get(key) for key in ("node_id", "address", "gpus", "pooled")}
