"""``route``: one Starlette route per path, each method with the scope it needs.

Every route of the server is made here, so that none can leave out the
checks of ``_access``: before a handler runs, the caller's tenant must hold
the method's scope (403 naming it) and the ids in the path must be its own
(another tenant's answer 404, as unknown ones do). The scopes stay readable
on the route (``ScopedRoute.scopes``), for /openapi.json and the tests.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket

from ._access import OPEN, authorize, check_owner
from ._errors import ApiError

__all__ = ["Endpoint", "Method", "ScopedRoute", "ScopedWebSocketRoute", "route", "websocket_route"]

Endpoint = Callable[[Request], Awaitable[Response]]
Method = tuple[Endpoint, str | None]


class ScopedRoute(Route):
    """A route with the scope each of its methods needs (``_access``): ``scopes``."""

    scopes: dict[str, str | None]


def route(path: str, **handlers: Method) -> ScopedRoute:
    """One route for every method on a path, so a 405's Allow header lists them all.

    Each method is given as ``(handler, scope)``: the scope a token needs for
    it (None: any token of the server; ``OPEN``: none at all). Before the
    handler runs, the caller's scope is checked (403) and so are the ids in
    the path (another tenant's answer 404, as unknown ones do).
    """
    if "GET" in handlers:
        handlers["HEAD"] = handlers["GET"]

    async def endpoint(request: Request) -> Response:
        handler, scope = handlers[request.method]
        request.scope["kexec.route"] = path
        if scope != OPEN:
            authorize(request, scope)
            check_owner(request, request.app.state.kexec.registry)
        return await handler(request)

    made = ScopedRoute(path, endpoint, methods=list(handlers))
    made.scopes = {method: scope for method, (_, scope) in handlers.items()}
    return made


class ScopedWebSocketRoute(WebSocketRoute):
    """A WebSocket route with the scope it needs: ``scopes["WEBSOCKET"]``."""

    scopes: dict[str, str | None]


def websocket_route(
    path: str, endpoint: Callable[[WebSocket], Awaitable[None]], scope: str
) -> ScopedWebSocketRoute:
    """A WebSocket route held to ``route``'s checks: a caller without ``scope``, or naming
    another tenant's id, is refused before the handshake (closed with 1008, as an unknown
    id is)."""

    async def guarded(websocket: WebSocket) -> None:
        try:
            authorize(websocket, scope)
            check_owner(websocket, websocket.app.state.kexec.registry)
        except ApiError:
            await websocket.close(code=1008)
            return
        await endpoint(websocket)

    made = ScopedWebSocketRoute(path, guarded)
    made.scopes = {"WEBSOCKET": scope}
    return made
