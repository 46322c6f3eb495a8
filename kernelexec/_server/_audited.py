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

from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .._audit import AuditLog
from ._access import session_id_in
from ._auth import identity_of

__all__ = ["AuditRequests"]

_CHANGES = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class AuditRequests:
    """ASGI middleware: one audit line per POST, PUT, PATCH or DELETE, and per WebSocket."""

    def __init__(self, app: ASGIApp, *, audit: AuditLog | None) -> None:
        self.app = app
        self.audit = audit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        audit = self.audit
        if audit is None or not (
            scope["type"] == "websocket"
            or (scope["type"] == "http" and scope["method"] in _CHANGES)
        ):
            await self.app(scope, receive, send)
            return
        seen: dict[str, int] = {"status": 0, "bytes": 0}

        async def sending(message: Message) -> None:
            kind = message["type"]
            if kind == "http.response.start":
                seen["status"] = message["status"]
            elif kind == "http.response.body":
                seen["bytes"] += len(message.get("body", b""))
            elif kind == "websocket.accept":
                seen["status"] = 101
            elif kind == "websocket.close" and not seen["status"]:
                seen["status"] = 403  # refused before the handshake
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            audit.record(_line(scope, seen))


def _line(scope: Scope, seen: dict[str, int]) -> dict[str, Any]:
    identity = identity_of(scope)
    event: dict[str, Any] = {
        "kind": "request",
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


def _template(scope: Scope) -> str | None:
    route = scope.get("route")
    path = getattr(route, "path", None)
    return path if isinstance(path, str) else None
