"""create_app: the ASGI application of one server."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from jupyter_client.kernelspec import KernelSpecManager
from starlette.applications import Starlette
from starlette.middleware import Middleware

from .._audit import AuditLog
from .._telemetry import TraceRequests
from .._tenants._registry import TenantRegistry
from ._audited import AuditRequests, audit_server, record_stop
from ._auth import TenantAuth
from ._bodies import BodyLimit
from ._config import ServerConfig
from ._e2b import E2B_ROUTES, KEY_HEADERS, PREFIX, E2BErrorCodes, Sandboxes
from ._errors import exception_handlers
from ._jupyter_api import JUPYTER_ROUTES
from ._openapi import openapi_schema
from ._registry import Registry
from ._routes import ROUTES, ServerState

__all__ = ["create_app"]


def installed_kernels() -> list[str]:
    """Kernelspec names a session may ask for; "python3" is always there."""
    return sorted({"python3", *KernelSpecManager().find_kernel_specs()})


def tenants_of(config: ServerConfig) -> TenantRegistry:
    """The server's tenants: its tenants file's, or the one of its ``--token``.

    Raises:
        ConfigurationError: the tenants file cannot be read or is wrong.
    """
    return TenantRegistry.of(config.tenants, config.token)


def audit_of(config: ServerConfig) -> AuditLog | None:
    """The server's audit log, opened; None without ``--audit-log``.

    Raises:
        ConfigurationError: its path is unusable (no folder, a link, not writable).
    """
    if config.audit_log is None:
        return None
    return AuditLog(config.audit_log, max_bytes=config.audit_max_bytes)


def create_app(
    config: ServerConfig,
    tenants: TenantRegistry | None = None,
    audit: AuditLog | None = None,
) -> Starlette:
    """The server's app; its lifespan finds the sessions a restart left, suspends idle ones
    and closes all at shutdown (the audit log too).

    ``tenants`` and ``audit`` default to those ``config`` names (``tenants_of``, ``audit_of``).

    Raises:
        ConfigurationError: the tenants file or the audit log's path is unusable.
    """
    kernel_names = installed_kernels()
    tenants = tenants or tenants_of(config)
    if audit is None:
        audit = audit_of(config)
    state = ServerState(
        config,
        Registry(config, tenants),
        kernel_names,
        openapi_schema(config, kernel_names),
        audit=audit,
    )
    sandboxes = Sandboxes(state.registry) if config.e2b else None

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        config.work_root.mkdir(parents=True, exist_ok=True)
        # Before the first request: the sessions the records name, and no crash's leftovers.
        await state.registry.recover()
        state.registry.start_pool()
        audit_server(audit, tenants, "http")
        loop = asyncio.get_running_loop()
        background = [
            loop.create_task(state.registry.housekeep_forever()),
            loop.create_task(state.registry.quotas.watch()),
            loop.create_task(tenants.watch()),
        ]
        if sandboxes is not None:
            background.append(loop.create_task(sandboxes.sweep_forever()))
        try:
            yield
        finally:
            for task in background:
                task.cancel()
            if sandboxes is not None:
                await sandboxes.close_all()
            await state.registry.close_all()
            await asyncio.gather(*state.tasks, return_exceptions=True)
            if audit is not None:
                record_stop(audit, "http")
                await audit.aclose()

    e2b = sandboxes is not None
    app = Starlette(
        routes=[*ROUTES, *JUPYTER_ROUTES, *(E2B_ROUTES if e2b else [])],
        middleware=[
            # Outermost, so that refused requests are logged too.
            Middleware(AuditRequests, audit=audit),
            # Before the token: E2B's SDK reads a 401 only with its "code".
            *([Middleware(E2BErrorCodes, prefix=f"{PREFIX}/")] if e2b else []),
            # The token next: a stranger learns nothing, not even the body limit.
            Middleware(TenantAuth, tenants=tenants, keyed=KEY_HEADERS if e2b else ()),
            # After the token: a stranger cannot start spans or pick their trace.
            Middleware(TraceRequests),
            Middleware(BodyLimit, limit=config.max_body),
        ],
        exception_handlers=exception_handlers,
        lifespan=lifespan,
    )
    app.state.kexec = state
    app.state.e2b = sandboxes
    return app
