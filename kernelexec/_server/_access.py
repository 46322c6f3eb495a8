"""What a caller may reach: the scope each route needs, and only its own tenant's things.

Every route is made by ``_routes.route`` with the scope each method needs
(``SCOPES``; None: any tenant's token; ``OPEN``: no token, /health), and
checked here before its handler runs: a token without that scope gets 403
naming it. Then the ids in the path: a session, kernel or checkpoint of
another tenant answers the very 404 an unknown id does, so that a tenant
learns nothing of another's, not even that an id exists. Lists are cut to
the caller's own by ``sees``. A tenant with the ``admin`` scope sees every
tenant's (what it may do with them is still its scopes').
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from starlette.requests import HTTPConnection

from .._tenants._registry import Identity
from ._auth import caller
from ._errors import ApiError

if TYPE_CHECKING:
    from ._registry import Registry

__all__ = [
    "OPEN",
    "authorize",
    "check_owner",
    "path_session_id",
    "sees",
    "session_id_in",
    "unknown_session",
]

OPEN = "open"  # a route anyone may call, with no token (/health)
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def sees(identity: Identity, owner: str | None) -> bool:
    """Whether the caller may see a thing of ``owner``'s (None: no tenant's, admins only)."""
    return owner == identity.tenant.name or identity.tenant.can("admin")


def authorize(connection: HTTPConnection, scope: str | None) -> Identity:
    """The caller, if its tenant has ``scope``; HTTP 403 naming the scope if not."""
    identity = caller(connection)
    if scope is not None and not identity.tenant.can(scope):
        raise ApiError(
            403,
            "missing_scope",
            f"{connection.scope.get('method', 'WEBSOCKET')} {connection.url.path} needs the "
            f"{scope!r} scope, which tenant {identity.tenant.name!r} does not have: ask the "
            "server's operator to add it to the tenant's scopes",
            fields={"scope": scope},
        )
    return identity


def path_session_id(connection: HTTPConnection) -> str | None:
    """The session a path names: ``{session_id}``, or ``{kernel_id}`` in either of its forms
    (32 hex digits, or the UUID the Jupyter kernels API uses)."""
    return session_id_in(connection.path_params)


def session_id_in(params: Mapping[str, Any]) -> str | None:
    """``path_session_id`` of a route's path parameters."""
    if "session_id" in params:
        return str(params["session_id"])
    if "kernel_id" in params:
        given = str(params["kernel_id"])
        return given.replace("-", "") if _UUID.fullmatch(given) else given
    return None


def unknown_session(session_id: str) -> ApiError:
    """The 404 of a session id this server does not have (or the caller may not see)."""
    return ApiError(
        404,
        "session_not_found",
        f"no session {session_id[:64]!r} on this "
        "server; it may have been deleted (GET /sessions lists them)",
    )


def check_owner(connection: HTTPConnection, registry: Registry) -> None:
    """HTTP 404, as for an unknown id, when the path names another tenant's session or
    checkpoint."""
    identity = caller(connection)
    session_id = path_session_id(connection)
    if session_id is not None:
        entry = registry.lookup(session_id)
        if entry is not None and not sees(identity, entry.tenant):
            raise unknown_session(session_id)
    checkpoint_id = connection.path_params.get("checkpoint_id")
    if checkpoint_id is not None and not sees(identity, registry.checkpoint_owner(checkpoint_id)):
        raise registry.unknown_checkpoint(str(checkpoint_id))
