"""create_app: the ASGI application of one server."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from jupyter_client.kernelspec import KernelSpecManager
from starlette.applications import Starlette
from starlette.middleware import Middleware

from .._telemetry import TraceRequests
from ._auth import TokenAuth
from ._bodies import BodyLimit
from ._config import ServerConfig
from ._errors import exception_handlers
from ._jupyter_api import JUPYTER_ROUTES
from ._openapi import openapi_schema
from ._registry import Registry
from ._routes import ROUTES, ServerState

__all__ = ["create_app"]


def installed_kernels() -> list[str]:
    """Kernelspec names a session may ask for; "python3" is always there."""
    return sorted({"python3", *KernelSpecManager().find_kernel_specs()})


def create_app(config: ServerConfig) -> Starlette:
    """The server's app; its lifespan finds the sessions a restart left, suspends idle ones
    and closes all at shutdown."""
    kernel_names = installed_kernels()
    state = ServerState(
        config, Registry(config), kernel_names, openapi_schema(config, kernel_names)
    )

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        config.work_root.mkdir(parents=True, exist_ok=True)
        # Before the first request: the sessions the records name, and no crash's leftovers.
        await state.registry.recover()
        state.registry.start_pool()
        keeper = asyncio.get_running_loop().create_task(state.registry.housekeep_forever())
        try:
            yield
        finally:
            keeper.cancel()
            await state.registry.close_all()
            await asyncio.gather(*state.tasks, return_exceptions=True)

    app = Starlette(
        routes=[*ROUTES, *JUPYTER_ROUTES],
        # The token first: a stranger learns nothing, not even the body limit.
        middleware=[
            Middleware(TokenAuth, token=config.token),
            # After the token: a stranger cannot start spans or pick their trace.
            Middleware(TraceRequests),
            Middleware(BodyLimit, limit=config.max_body),
        ],
        exception_handlers=exception_handlers,
        lifespan=lifespan,
    )
    app.state.kexec = state
    return app
