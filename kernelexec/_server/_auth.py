"""Who sent a request: its bearer token's tenant, for every route but /health.

The middleware finds the tenant a token belongs to (``TenantRegistry``: a
hashed ``kx_`` token of a tenants file, a JWT, or the one ``--token``), holds
the tenant to its request rate, and leaves the ``Identity`` where the routes
find it: ``caller(request)``, or ``CALLER`` for code that has no request (the
MCP tools). What each route needs of the tenant (its scopes, its own
sessions) is checked by the route (``_access.py``).
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass

from starlette.requests import HTTPConnection
from starlette.types import ASGIApp, Receive, Scope, Send

from .._tenants._registry import Identity, TenantRegistry
from ._errors import ApiError
from ._ratelimit import RateLimiter

__all__ = ["CALLER", "OPEN_PATHS", "KeyHeaders", "TenantAuth", "caller", "identity_of"]

OPEN_PATHS = frozenset({"/health"})
_KEY = "kexec.identity"
# The identity of the request being served, for code reached without the request.
CALLER: contextvars.ContextVar[Identity | None] = contextvars.ContextVar(
    "kernelexec_caller", default=None
)


@dataclass(frozen=True)
class KeyHeaders:
    """Paths under ``prefix`` whose token comes bare in one of ``headers``, not as
    ``Authorization`` (E2B's SDK sends its API key as ``X-API-KEY``, and to a sandbox
    as ``X-Access-Token``; its ``Authorization`` there names a user, not a key).

    Attributes:
        prefix: the paths' start, with its slash (``/e2b/``).
        headers: the headers that may hold the token, lower case, first found wins.
        hint: the end of a 401's message, naming the setting that sends the token.
    """

    prefix: str
    headers: tuple[bytes, ...]
    hint: str


def caller(connection: HTTPConnection) -> Identity:
    """The identity ``TenantAuth`` found for this request or WebSocket."""
    identity: Identity = connection.scope[_KEY]
    return identity


def identity_of(scope: Scope) -> Identity | None:
    """The identity of a request's scope, or None before (or without) ``TenantAuth``."""
    found = scope.get(_KEY)
    return found if isinstance(found, Identity) else None


class TenantAuth:
    """ASGI middleware: HTTP 401 unless ``Authorization: Bearer <token>`` is a tenant's.

    ``Authorization: token <token>`` works too (what jupyter_server's gateway
    client sends), and WebSockets are checked the same way (refused before
    the handshake). ``open_paths`` need no token (the server's /health; none
    for ``kernelexec mcp --http``). A tenant past its request rate gets 429
    with ``Retry-After`` (a WebSocket: closed with 1013, try again later).
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        tenants: TenantRegistry,
        open_paths: frozenset[str] | tuple[str, ...] = OPEN_PATHS,
        limiter: RateLimiter | None = None,
        keyed: tuple[KeyHeaders, ...] = (),
    ) -> None:
        self.app = app
        self.tenants = tenants
        self._open = frozenset(open_paths)
        self._limiter = limiter or RateLimiter()
        self._keyed = keyed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or scope["path"] in self._open:
            await self.app(scope, receive, send)
            return
        keyed = next((k for k in self._keyed if scope["path"].startswith(k.prefix)), None)
        identity = self._identity(scope) if keyed is None else self._keyed_identity(scope, keyed)
        if identity is None:
            if scope["type"] == "websocket":
                await send({"type": "websocket.close", "code": 1008})  # before the handshake
                return
            how = "as 'Authorization: Bearer <token>'" if keyed is None else keyed.hint
            error = ApiError(
                401,
                "unauthorized",
                f"send a token of this server {how} (kernelexec serve printed it at "
                "start-up, or its operator gave you one)",
            )
            await error.response()(scope, receive, send)
            return
        wait = self._limiter.wait(identity.tenant)
        if wait:
            if scope["type"] == "websocket":
                await send({"type": "websocket.close", "code": 1013})
                return
            limit = identity.tenant.rate_limit
            assert limit is not None
            error = ApiError(
                429,
                "rate_limited",
                f"tenant {identity.tenant.name!r} may send {limit.requests} requests in "
                f"{limit.per_seconds:g} s (its rate_limit); try again in {wait} s",
                headers={"Retry-After": str(wait)},
            )
            await error.response()(scope, receive, send)
            return
        scope[_KEY] = identity
        reset = CALLER.set(identity)
        try:
            await self.app(scope, receive, send)
        finally:
            CALLER.reset(reset)

    def _identity(self, scope: Scope) -> Identity | None:
        for name, value in scope["headers"]:
            if name == b"authorization":
                scheme, _, given = value.partition(b" ")
                if scheme.lower() not in (b"bearer", b"token"):
                    return None
                try:
                    token = given.strip().decode("ascii")
                except UnicodeDecodeError:
                    return None
                return self.tenants.authenticate(token)
        return None

    def _keyed_identity(self, scope: Scope, keyed: KeyHeaders) -> Identity | None:
        sent = scope["headers"]
        for wanted in keyed.headers:
            for name, value in sent:
                if name == wanted:
                    try:
                        return self.tenants.authenticate(value.strip().decode("ascii"))
                    except UnicodeDecodeError:
                        return None
        return None
