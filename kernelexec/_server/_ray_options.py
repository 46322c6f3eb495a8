"""A server whose kernels run on a Ray cluster (``--ray``): the operator's caps, a client's ask.

With ``kernelexec serve --ray ADDRESS`` (and ``mcp``) every session's kernel
runs on a node of that cluster, placed by Ray for the resources the session
holds. A client chooses them in ``POST /sessions`` as ``"ray": {"num_cpus",
"num_gpus", "memory", "resources", "labels"}``, within the operator's caps
(``--ray-max-cpus``, ``--ray-max-gpus``, ``--ray-max-memory``); a custom
resource or a label is Ray's to match or to refuse. Options that choose a
local interpreter, a container or a gateway do not apply there and are
refused by name.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .._containment._sandbox import Sandbox
from .._ray import RayBackend

__all__ = ["RAY_KEYS", "RayPolicy", "ray_backend", "ray_schema"]

RAY_KEYS = ("num_cpus", "num_gpus", "memory", "resources", "labels")
_NAME_LENGTH = 128


@dataclass(frozen=True)
class RayPolicy:
    """The operator's Ray cluster and the most of each resource one session may hold.

    Attributes:
        address: the cluster's GCS (``host:port``) or ``"auto"`` (``--ray``).
        max_cpus: CPUs a session may hold (``--ray-max-cpus``); it holds 1 unless it asks.
        max_gpus: GPUs a session may hold (``--ray-max-gpus``; 0: none).
        max_memory: bytes of Ray's memory resource a session may hold
            (``--ray-max-memory``); None: no cap.
        shared_work_dirs: the server's work root is on storage every node
            mounts at the same path (``--ray-shared-work-root``): kernels run in
            their sessions' work dirs, so files, fork, checkpoints and suspend
            work as for local kernels.
        pool: kernels of each configuration every node's host keeps ready
            (``--pool-size`` with ``--ray``; ``RayBackend(pool=N)``).
    """

    address: str
    max_cpus: float = 4.0
    max_gpus: float = 0.0
    max_memory: int | None = None
    shared_work_dirs: bool = False
    pool: int = 0

    def check(self) -> str | None:
        """What is wrong with the caps, as the flag's message; None if nothing."""
        if not (math.isfinite(self.max_cpus) and self.max_cpus > 0):
            return "--ray-max-cpus must be a positive number"
        if not (math.isfinite(self.max_gpus) and self.max_gpus >= 0):
            return "--ray-max-gpus must be a number >= 0"
        if not self.address.strip():
            return "--ray needs the cluster's address (host:port of its GCS) or auto"
        return None

    def parse(self, value: Any) -> dict[str, Any]:
        """A client's ``ray`` option, checked against the caps; raises ``ValueError`` naming
        the field and the flag that caps it."""
        if value is None:
            value = {}
        if not isinstance(value, Mapping):
            raise ValueError(
                "ray must be an object: {num_cpus, num_gpus, memory, resources, labels}"
            )
        unknown = sorted(set(value) - set(RAY_KEYS))
        if unknown:
            raise ValueError(
                f"unknown ray option(s) {', '.join(unknown)}; known: {', '.join(RAY_KEYS)}"
            )
        asked: dict[str, Any] = {}
        for name, most, flag in (
            ("num_cpus", self.max_cpus, "--ray-max-cpus"),
            ("num_gpus", self.max_gpus, "--ray-max-gpus"),
        ):
            if name in value:
                asked[name] = _amount(f"ray.{name}", value[name], most, flag)
        if "memory" in value:
            asked["memory"] = int(
                _amount("ray.memory", value["memory"], self.max_memory, "--ray-max-memory")
            )
        if "resources" in value:
            asked["resources"] = _names("ray.resources", value["resources"], number=True)
        if "labels" in value:
            asked["labels"] = _names("ray.labels", value["labels"], number=False)
        if not any(asked.get(k) for k in ("num_cpus", "num_gpus", "memory", "resources")):
            asked.setdefault("num_cpus", min(1.0, self.max_cpus))
        return asked


def ray_backend(policy: RayPolicy, asked: Mapping[str, Any], sandbox: Sandbox | bool) -> RayBackend:
    """The backend of one session on the operator's cluster."""
    return RayBackend(
        policy.address,
        sandbox=sandbox,
        shared_work_dirs=policy.shared_work_dirs,
        pool=policy.pool,
        **{"num_cpus": 0, **asked},
    )


def ray_schema(caps: RayPolicy | None) -> dict[str, Any]:
    """The ``ray`` option's JSON Schema, with this server's caps."""
    names = {"type": "object", "maxProperties": 16}
    number: dict[str, Any] = {"type": "number", "minimum": 0}
    memory: dict[str, Any] = {"type": "integer", "minimum": 0}
    if caps is not None and caps.max_memory is not None:
        memory["maximum"] = caps.max_memory
    return {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "num_cpus": number | ({"maximum": caps.max_cpus} if caps else {}),
            "num_gpus": number | ({"maximum": caps.max_gpus} if caps else {}),
            "memory": memory,
            "resources": names
            | {"additionalProperties": {"type": "number", "exclusiveMinimum": 0}},
            "labels": names | {"additionalProperties": {"type": "string", "maxLength": 128}},
        },
        "description": "the resources the session's kernel holds on the server's Ray cluster "
        "(needs --ray, else 403; caps --ray-max-cpus, --ray-max-gpus, --ray-max-memory); a "
        "node with them free runs it, one with the labels if given",
    }


def _amount(name: str, value: Any, most: float | None, flag: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name} must be a number")
    if value < 0:
        raise ValueError(f"{name} must be >= 0")
    if most is not None and value > most:
        raise ValueError(f"{name} {value:g} is over this server's cap of {most:g} ({flag})")
    return float(value)


def _names(name: str, value: Any, *, number: bool) -> dict[str, Any]:
    if not isinstance(value, Mapping) or len(value) > 16:
        raise ValueError(f"{name} must be an object of at most 16 names")
    found: dict[str, Any] = {}
    for key, each in value.items():
        if not isinstance(key, str) or not key or len(key) > _NAME_LENGTH:
            raise ValueError(f"{name}: names are 1 to {_NAME_LENGTH} characters")
        if key in ("CPU", "GPU", "memory", "object_store_memory") or key.startswith("node:"):
            raise ValueError(f"{name}: {key} is not a custom resource (num_cpus, num_gpus, memory)")
        if number:
            if isinstance(each, bool) or not isinstance(each, (int, float)) or not each > 0:
                raise ValueError(f"{name}.{key} must be a number > 0")
            if not math.isfinite(each) or each > 1e6:
                raise ValueError(f"{name}.{key} is not a usable amount")
            found[key] = float(each)
        else:
            if not isinstance(each, str) or len(each) > _NAME_LENGTH:
                raise ValueError(f"{name}.{key} must be a string of at most {_NAME_LENGTH}")
            found[key] = each
    return found
