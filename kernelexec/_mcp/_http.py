"""``kernelexec mcp --http``: the MCP server over streamable HTTP, behind bearer tokens.

Whoever can call ``execute_code`` runs code as this process's user, so the
HTTP transport asks every request for a token, as ``kernelexec serve``
does (same middleware, same rules): ``Authorization: Bearer <token>``,
refused with 401 before the MCP layer sees it. The tokens are those of one
``--token`` or of a tenants file (``--tenants``, reloaded on SIGHUP and when
it changes); with a tenants file each tenant has sessions of its own
(``_tenant_doors.py``). An audit log, if asked for, gets a line per request.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import uvicorn
from mcp.server.mcpserver import MCPServer
from starlette.types import ASGIApp, Receive, Scope, Send

from .._audit import AuditLog
from .._server._audited import AuditRequests, audit_server, record_stop
from .._server._auth import TenantAuth
from .._server._serve import listen, reloader, run_until_signalled
from .._tenants._registry import TenantRegistry

__all__ = ["PATH", "serve_http"]

PATH = "/mcp"


def serve_http(
    server: MCPServer[Any],
    *,
    tenants: TenantRegistry,
    port: int,
    host: str = "127.0.0.1",
    audit: AuditLog | None = None,
    on_listening: Callable[[int], None] | None = None,
) -> None:
    """Serves ``server`` at ``http://host:port/mcp`` until SIGTERM or Ctrl-C.

    Args:
        server: the MCP server (``build_server``).
        tenants: whose tokens every request must carry (``TenantRegistry.single``
            for one token).
        port: 0 picks a free one, reported to ``on_listening``.
        host: where to listen; loopback by default.
        audit: the audit log, or None.
        on_listening: called with the bound port once it is bound, before serving.

    Raises:
        ConfigurationError: the port is out of range, or the address cannot be bound.
    """
    sock = listen(host, port)
    if on_listening is not None:
        on_listening(sock.getsockname()[1])
    app: ASGIApp = AuditRequests(
        TenantAuth(
            server.streamable_http_app(streamable_http_path=PATH, host=host),
            tenants=tenants,
            open_paths=(),
        ),
        audit=audit,
        door="mcp",
    )
    app = _watching(app, tenants, audit)
    config = uvicorn.Config(app, log_level="warning", lifespan="on", server_header=False)
    run_until_signalled(uvicorn.Server(config), sock, on_hangup=reloader(tenants))


def _watching(app: ASGIApp, tenants: TenantRegistry, audit: AuditLog | None) -> ASGIApp:
    """``app``, whose lifespan also watches the tenants file and closes the audit log."""

    @contextlib.asynccontextmanager
    async def watch() -> AsyncIterator[None]:
        audit_server(audit, tenants, "mcp")
        async with anyio.create_task_group() as group:
            group.start_soon(tenants.watch)
            try:
                yield
            finally:
                group.cancel_scope.cancel()
        if audit is not None:
            record_stop(audit, "mcp")
            await audit.aclose()

    async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "lifespan":
            await app(scope, receive, send)
            return
        async with watch():
            await app(scope, receive, send)

    return wrapped
