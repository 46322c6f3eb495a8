"""``TenantDoors``: the sessions of ``kernelexec mcp --http --tenants``, a door per tenant.

Each tenant gets a ``LocalDoor`` of its own, under ``<work-root>/<tenant>/``:
its own session names (two tenants' "default" are two sessions), its own
work dirs and its own checkpoint store, so no tool can name, list, read or
restore another tenant's. Every call first checks the caller's scope (the
tenant ``TenantAuth`` found for the HTTP request that carries the tool
call, ``CALLER``): a tool whose scope the tenant lacks is refused, naming
the scope. A tenant's ``allow`` replaces the server's ``--allow-*`` flags
for it, its ``live_sessions`` quota holds, and ``--max-sessions`` caps all
tenants' sessions together.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any, cast

from .._audit import AuditLog
from .._server._allow import policy_for
from .._server._auth import CALLER
from .._tenants._models import Tenant
from ._doors import Door
from ._local_door import LocalDoor
from ._sessions import McpConfig, SessionError

__all__ = ["TOOL_SCOPES", "TenantDoors", "tenant_doors"]

# The scope each of the doors' calls needs, so each tool's.
TOOL_SCOPES = {
    "create": "sessions",
    "infos": "sessions",
    "execute": "execute",
    "start": "execute",
    "execution": "execute",
    "cancel": "execute",
    "restart": "execute",
    "interrupt": "execute",
    "variables": "execute",
    "inspect": "execute",
    "files": "files:read",
    "read": "files:read",
    "notebook": "files:read",
    "where": "files:read",
    "fork": "fork",
    "checkpoint": "checkpoint",
    "restore": "checkpoint",
}


class TenantDoors:
    """A ``Door`` that sends each call to its caller's tenant's own ``LocalDoor``."""

    def __init__(self, config: McpConfig, audit: AuditLog | None = None) -> None:
        self.config = config
        self.audit = audit
        self._doors: dict[str, LocalDoor] = {}

    def _door(self, call: str) -> LocalDoor:
        identity = CALLER.get()
        if identity is None:  # never: TenantAuth lets no request through without one
            raise SessionError("this call carries no token of this server")
        tenant = identity.tenant
        scope = TOOL_SCOPES[call]
        if not tenant.can(scope):
            raise SessionError(
                f"this tool needs the {scope!r} scope, which tenant {tenant.name!r} does not "
                "have: ask the server's operator to add it to the tenant's scopes"
            )
        door = self._doors.get(tenant.name)
        if door is None:
            door = LocalDoor(
                self._config_for(tenant), lambda: self._check_room(tenant.name), self.audit
            )
            self._doors[tenant.name] = door
        else:
            door.config = door.sessions.config = self._config_for(tenant)  # a reload's changes
        return door

    def _config_for(self, tenant: Tenant) -> McpConfig:
        root = self.config.work_root / tenant.name
        root.mkdir(mode=0o700, exist_ok=True)
        return replace(self.config, work_root=root, policy=policy_for(self.config.policy, tenant))

    def _check_room(self, name: str) -> None:
        """Room for one more session of tenant ``name``: within its ``live_sessions`` quota
        (as the tenants file says now), and within the server's --max-sessions for all
        tenants' sessions together."""
        identity = CALLER.get()
        most = identity.tenant.quotas.live_sessions if identity is not None else None
        mine = self._doors[name].sessions.held
        if most is not None and mine >= most:
            raise SessionError(
                f"tenant {name!r} already has {mine} sessions, and may have {most} (its quota "
                "live_sessions); reuse one of list_sessions"
            )
        held = sum(door.sessions.held for door in self._doors.values())
        if held >= self.config.max_sessions:
            raise SessionError(
                f"the server already holds {held} sessions of all its tenants, its most "
                "(kernelexec mcp --max-sessions); reuse one of list_sessions"
            )

    def __getattr__(self, call: str) -> Callable[..., Awaitable[Any]]:
        if call not in TOOL_SCOPES:
            raise AttributeError(call)

        async def forwarded(*args: Any, **kwargs: Any) -> Any:
            # Checked once awaited, where the tools turn a refusal into their error.
            return await getattr(self._door(call), call)(*args, **kwargs)

        return forwarded

    async def close(self) -> None:
        for door in list(self._doors.values()):
            await door.close()


def tenant_doors(config: McpConfig, audit: AuditLog | None = None) -> Door:
    """A ``TenantDoors`` as the ``Door`` it is: it forwards each of ``TOOL_SCOPES``' calls
    by name (``__getattr__``), which a type checker cannot see as the protocol's methods."""
    return cast(Door, TenantDoors(config, audit))
