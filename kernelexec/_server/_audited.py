"""The audit log's line for every state-changing request (``kernelexec/_audit``).

Outermost of the server's middleware, so that a request refused for its
token (401) or rate (429) is logged too. After the response is sent, it
writes one line: who (tenant and token id, once the token was known),
which route (the path's template, not the path: a file name or a variable's
name stays out of the log), the session, the status and the bytes sent.
Executions get a line of their own when they end (``_routes``), with what
they cost.
"""

from __future__ import annotations

import json
import time
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .._audit import AuditLog
from .._tenants._models import TenantsConfig
from .._tenants._registry import TenantRegistry
from ._access import session_id_in
from ._auth import identity_of

__all__ = ["AuditRequests", "audit_server", "record_stop"]

_CHANGES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_MOST_READ = 4096  # bytes of an error's body looked at: ours are small


class AuditRequests:
    """ASGI middleware: one audit line per POST, PUT, PATCH or DELETE, and per WebSocket."""

    def __init__(self, app: ASGIApp, *, audit: AuditLog | None, door: str = "http") -> None:
        self.app = app
        self.audit = audit
        self.door = door  # "http" (serve) or "mcp" (mcp --http)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        audit = self.audit
        if audit is None or not (
            scope["type"] == "websocket"
            or (scope["type"] == "http" and scope["method"] in _CHANGES)
        ):
            await self.app(scope, receive, send)
            return
        seen: dict[str, int] = {"status": 0, "bytes": 0}
        refusal = bytearray()  # an error's JSON body, for its code, scope or quota
        began = time.monotonic()

        async def sending(message: Message) -> None:
            kind = message["type"]
            if kind == "http.response.start":
                seen["status"] = message["status"]
            elif kind == "http.response.body":
                body = message.get("body", b"")
                seen["bytes"] += len(body)
                if seen["status"] >= 400 and len(refusal) < _MOST_READ:
                    refusal.extend(body[:_MOST_READ])
            elif kind == "websocket.accept":
                seen["status"] = 101
            elif kind == "websocket.close" and not seen["status"]:
                seen["status"] = 403  # refused before the handshake
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            line = _line(scope, seen) | _refused(bytes(refusal))
            line |= {"door": self.door, "duration_seconds": round(time.monotonic() - began, 6)}
            audit.record(line)


def _line(scope: Scope, seen: dict[str, int]) -> dict[str, Any]:
    identity = identity_of(scope)
    client = scope.get("client")
    event: dict[str, Any] = {
        "kind": "request",
        "client": client[0] if client else None,
        "tenant": None if identity is None else identity.tenant.name,
        "token_id": None if identity is None else identity.token_id,
        "method": scope.get("method", "WEBSOCKET"),
        # The template (no file or variable names); a path no route took, as it is.
        "route": scope.get("kexec.route") or _template(scope) or scope.get("path"),
        "status": seen["status"] or 500,
        "bytes_out": seen["bytes"],
    }
    params = scope.get("path_params") or {}
    if "session_id" in params or "kernel_id" in params:
        event["session"] = session_id_in(params)
    return event


def _refused(body: bytes) -> dict[str, Any]:
    """The error code of a refusal, and the scope or quota it names (our own fields, never
    anything the client sent)."""
    try:
        data = json.loads(body)
    except ValueError:
        return {}
    if not isinstance(data, dict):
        return {}
    return {
        key: data[key]
        for key in ("error", "scope", "quota")
        if isinstance(data.get(key), str) and len(data[key]) <= 64
    }


def _template(scope: Scope) -> str | None:
    route = scope.get("route")
    path = getattr(route, "path", None)
    return path if isinstance(path, str) else None


def audit_server(audit: AuditLog | None, tenants: TenantRegistry, door: str) -> None:
    """Logs the server's start, and each tenants file taken after it (``record_stop`` its
    stop): when who may do what changed is part of who did what."""
    if audit is None:
        return
    audit.record({"kind": "server", "event": "start", "door": door})

    def reloaded(config: TenantsConfig) -> None:
        audit.record(
            {
                "kind": "server",
                "event": "tenants_reloaded",
                "door": door,
                "message": f"{len(config.tenants)} tenants from {config.source}",
            }
        )

    tenants.on_reload = reloaded


def record_stop(audit: AuditLog | None, door: str) -> None:
    if audit is not None:
        audit.record({"kind": "server", "event": "stop", "door": door})
