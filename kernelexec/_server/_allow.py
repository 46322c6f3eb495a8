"""The session options a tenant may ask for: its ``allow`` list over the server's flags.

A server's ``--allow-*`` flags say what sessions may ask for when it has one
token. With a tenants file, each tenant's ``allow`` list replaces the yes or
no of those flags for that tenant: ``packages``, ``docker`` and ``network``
are allowed to it exactly when listed, ``python`` and ``gateway`` when listed
and only for the interpreters and gateways the server's ``--allow-python``
and ``--allow-gateway`` name (a tenants file names no paths or URLs of the
server's machine). A tenant without ``allow`` in the file may ask for none
of them. The server's caps (limits, containment, Docker's memory and CPUs)
hold for every tenant.
"""

from __future__ import annotations

from dataclasses import replace

from .._tenants._models import Tenant
from ._options import SessionPolicy

__all__ = ["policy_for"]


def policy_for(policy: SessionPolicy, tenant: Tenant) -> SessionPolicy:
    """What ``tenant`` may ask for on a server whose flags say ``policy``."""
    allow = tenant.allow
    if allow is None:  # the one tenant of --token: the flags decide
        return policy
    return replace(
        policy,
        pythons=policy.pythons if "python" in allow else (),
        packages="packages" in allow,
        docker="docker" in allow,
        gateways=policy.gateways if "gateway" in allow else (),
        network="network" in allow,
    )
