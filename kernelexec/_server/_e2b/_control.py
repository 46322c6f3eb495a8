"""E2B's API (``E2B_API_URL``): sandboxes made, found, kept alive and killed.

Each sandbox is a session of the server's registry, made for the key's tenant
with the server's defaults (its containment, its pool, its quotas). What E2B
asks of a sandbox that kernelexec cannot give (a template of its own, MCP,
volumes, a network policy, pausing) is refused with 501 naming it.
"""

from __future__ import annotations

import math
import time
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from .._auth import caller
from .._bodies import CreateRequest, json_object, parse_env
from .._errors import ApiError, JSONResponse
from ._errors import not_supported
from ._sandboxes import DEFAULT_TIMEOUT, MAX_TIMEOUT, Sandboxes

__all__ = [
    "connect_sandbox",
    "create_sandbox",
    "get_sandbox",
    "kill_sandbox",
    "list_sandboxes",
    "read_object",
    "sandboxes_of",
    "set_timeout",
]

# The templates of E2B's two SDKs' defaults: a kernelexec sandbox is a Python kernel.
TEMPLATES = ("code-interpreter-v1", "base")
# What a create may carry and kernelexec serves; anything else that asks for something is 501.
_SERVED = {"templateID", "timeout", "metadata", "envVars", "secure", "autoPause", "autoResume"}


def sandboxes_of(request: Request) -> Sandboxes:
    sandboxes: Sandboxes = request.app.state.e2b
    return sandboxes


def _key(request: Request) -> str:
    # TenantAuth took the caller's identity from this very header.
    return request.headers.get("x-api-key", "").strip()


async def read_object(request: Request) -> dict[str, Any]:
    """The body, a JSON object held to the server's ``--max-body``, as the server's own
    routes read theirs."""
    return await json_object(request, sandboxes_of(request).registry.config.max_body)


def _timeout(value: Any, default: int | None) -> int | None:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ApiError(400, "invalid_timeout", "timeout must be a number of seconds")
    if not 0 < value <= MAX_TIMEOUT:
        raise ApiError(
            400, "invalid_timeout", f"timeout must be more than 0 and at most {MAX_TIMEOUT} s"
        )
    return int(value)


def _strings(value: Any, what: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise ApiError(400, "invalid_request", f"{what} must be an object of strings")
    return dict(value)


def _refuse_unserved(data: dict[str, Any]) -> None:
    for name, value in data.items():
        asked = value not in (None, False, {}, [], "")
        if name == "allow_internet_access":
            asked = value is False  # True is what a session has unless its server walls it off
        elif name == "autoResume":
            asked = isinstance(value, dict) and value.get("enabled") is True
        if name not in _SERVED and asked:
            raise not_supported(
                f"Sandbox.create option {name!r}",
                "a kernelexec sandbox is a kernel with the server's containment",
            )
    if data.get("autoPause") is True:
        raise not_supported("lifecycle on_timeout='pause'", "a sandbox past its timeout is killed")


async def create_sandbox(request: Request) -> Response:
    data = await read_object(request)
    _refuse_unserved(data)
    template = data.get("templateID", TEMPLATES[0])
    if template not in TEMPLATES:
        raise ApiError(
            400,
            "unknown_template",
            f"kernelexec has no template {str(template)[:100]!r}: its sandboxes are Python "
            f"kernels, made for the templates {' and '.join(TEMPLATES)}",
        )
    timeout = _timeout(data.get("timeout"), DEFAULT_TIMEOUT)
    assert timeout is not None
    env = parse_env(data.get("envVars") or {})
    metadata = _strings(data.get("metadata"), "metadata")
    sandboxes = sandboxes_of(request)
    config = sandboxes.registry.config
    # A sandbox's code runs as long as its caller waits: the SDK's run_code timeout
    # is its own, and an execution ends (interrupted) when its caller goes away.
    body = CreateRequest("python3", env, config.max_timeout)
    made = await sandboxes.create(body, caller(request).tenant, template, timeout, metadata)
    return JSONResponse(made.created(_key(request)), status_code=201)


async def list_sandboxes(request: Request) -> Response:
    owned = sandboxes_of(request).owned(caller(request))
    return JSONResponse([s.detail(_key(request)) for s in owned])


async def get_sandbox(request: Request) -> Response:
    sandbox, _ = sandboxes_of(request).find(_id(request), caller(request))
    return JSONResponse(sandbox.detail(_key(request)))


async def kill_sandbox(request: Request) -> Response:
    sandboxes = sandboxes_of(request)
    sandbox, _ = sandboxes.find(_id(request), caller(request))
    await sandboxes.kill(sandbox)
    return Response(status_code=204)


async def set_timeout(request: Request) -> Response:
    sandbox, _ = sandboxes_of(request).find(_id(request), caller(request))
    timeout = _timeout((await read_object(request)).get("timeout"), None)
    if timeout is None:
        raise ApiError(400, "invalid_timeout", "timeout is required (seconds)")
    sandbox.end_at = time.time() + timeout
    return Response(status_code=204)


async def connect_sandbox(request: Request) -> Response:
    sandbox, _ = sandboxes_of(request).find(_id(request), caller(request))
    timeout = _timeout((await read_object(request)).get("timeout"), None)
    if timeout is not None:  # as E2B: a running sandbox's end only moves later
        sandbox.end_at = max(sandbox.end_at, time.time() + timeout)
    return JSONResponse(sandbox.created(_key(request)))


def _id(request: Request) -> str:
    return str(request.path_params["sandbox_id"])
