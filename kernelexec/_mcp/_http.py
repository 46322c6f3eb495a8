"""``kernelexec mcp --http``: the MCP server over streamable HTTP, behind a bearer token.

Whoever can call ``execute_code`` runs code as this process's user, so the
HTTP transport asks every request for the token, as ``kernelexec serve``
does (same middleware, same rules): ``Authorization: Bearer <token>``,
compared in constant time, refused with 401 before the MCP layer sees it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import uvicorn
from mcp.server.mcpserver import MCPServer

from .._server._auth import TokenAuth
from .._server._serve import listen, run_until_signalled
from .._server._token import check_token

__all__ = ["PATH", "serve_http"]

PATH = "/mcp"


def serve_http(
    server: MCPServer[Any],
    *,
    token: str,
    port: int,
    host: str = "127.0.0.1",
    on_listening: Callable[[int], None] | None = None,
) -> None:
    """Serves ``server`` at ``http://host:port/mcp`` until SIGTERM or Ctrl-C.

    Args:
        server: the MCP server (``build_server``).
        token: the bearer token every request must carry (``check_token``'s rule).
        port: 0 picks a free one, reported to ``on_listening``.
        host: where to listen; loopback by default.
        on_listening: called with the bound port once it is bound, before serving.

    Raises:
        ConfigurationError: the token breaks the rule, the port is out of
            range, or the address cannot be bound.
    """
    check_token(token)
    sock = listen(host, port)
    if on_listening is not None:
        on_listening(sock.getsockname()[1])
    app = TokenAuth(
        server.streamable_http_app(streamable_http_path=PATH, host=host), token=token, open_paths=()
    )
    config = uvicorn.Config(app, log_level="warning", lifespan="on", server_header=False)
    run_until_signalled(uvicorn.Server(config), sock)
