"""Bearer-token authentication for every route but /health."""

from __future__ import annotations

import hmac

from starlette.types import ASGIApp, Receive, Scope, Send

from ._errors import ApiError

__all__ = ["TokenAuth"]

OPEN_PATHS = frozenset({"/health"})


class TokenAuth:
    """ASGI middleware: HTTP 401 unless ``Authorization: Bearer <token>`` matches.

    ``Authorization: token <token>`` works too, and WebSockets are checked the
    same way (refused before the handshake). ``open_paths`` need no token
    (the server's /health; none for ``kernelexec mcp --http``).

    The comparison takes the same time however much of the token is right.
    """

    def __init__(
        self, app: ASGIApp, *, token: str, open_paths: frozenset[str] | tuple[str, ...] = OPEN_PATHS
    ) -> None:
        self.app = app
        self._token = token.encode("utf-8")
        self._open = frozenset(open_paths)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] not in ("http", "websocket")
            or scope["path"] in self._open
            or self._allows(scope)
        ):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})  # refused before the handshake
            return
        error = ApiError(
            401,
            "unauthorized",
            "send the server's token as 'Authorization: "
            "Bearer <token>' (kernelexec serve printed it at start-up)",
        )
        await error.response()(scope, receive, send)

    def _allows(self, scope: Scope) -> bool:
        for name, value in scope["headers"]:
            if name == b"authorization":
                scheme, _, given = value.partition(b" ")
                # "token" is what jupyter_server's GatewayClient sends (JupyterLab attach).
                return scheme.lower() in (b"bearer", b"token") and hmac.compare_digest(
                    given.strip(), self._token
                )
        return False
