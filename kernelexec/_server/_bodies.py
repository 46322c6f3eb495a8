"""Request bodies: read within the size limit, parsed, and checked field by field.

Every way a body can be wrong (too big, not UTF-8, not JSON, nested too deep,
a field of the wrong type, an unknown field) ends as an HTTP 4xx naming the
problem. ``BodyLimit`` holds every route to the size limit, including routes
that never read a body and the Jupyter API's.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .._exceptions import QueueFullError
from .._execution._background import Reservation
from .._state._fork import FORK_METHODS, ForkMethod
from .._tenants._models import Tenant
from ._allow import policy_for
from ._config import ServerConfig
from ._errors import ApiError
from ._options import OPTION_FIELDS, OptionError, SessionOptions, parse_options

__all__ = [
    "BodyLimit",
    "CreateRequest",
    "ExecuteRequest",
    "body_chunks",
    "drain",
    "parse_create",
    "parse_env",
    "parse_execute",
    "parse_flags",
    "parse_start_kernel",
    "queue_full",
]

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class CreateRequest:
    kernel_name: str
    env: dict[str, str]
    timeout: float
    options: SessionOptions = field(default_factory=SessionOptions)
    checkpoint: str | None = None  # the id of a checkpoint to restore into the new session


@dataclass(frozen=True)
class ExecuteRequest:
    code: str
    language: str
    timeout: float | None
    stdin: list[str] | None


def _too_large(limit: int) -> ApiError:
    return ApiError(
        413,
        "body_too_large",
        f"the request body is over {limit:,} bytes (the server's --max-body-mb)",
    )


class BodyLimit:
    """ASGI middleware: no request body over ``limit`` bytes reaches any route.

    A declared Content-Length over the limit is answered 413 before routing;
    a body that turns out longer (chunked, or lying) fails with 413 as soon as
    the byte past the limit is received, whichever route reads it.
    """

    def __init__(self, app: ASGIApp, *, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope["headers"]:
            if name == b"content-length" and (not value.isdigit() or int(value) > self.limit):
                # Not digits: uvicorn refuses those first; this is the belt to its braces.
                await _too_large(self.limit).response()(scope, receive, send)
                return
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise _too_large(self.limit)
            return message

        await self.app(scope, limited, send)


async def body_chunks(
    request: Request, limit: int, held: Reservation | None = None
) -> AsyncIterator[bytes]:
    """The body's chunks; HTTP 413 as soon as more than ``limit`` bytes came.

    With ``held`` (room in a session's queue), bytes past what it holds are
    added to it as they come: HTTP 429 once they do not fit.
    """
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise _too_large(limit)
    seen = 0
    async for chunk in request.stream():
        seen += len(chunk)
        if seen > limit:
            raise _too_large(limit)
        if held is not None and seen > held.size:
            try:
                held.grow(seen - held.size)
            except QueueFullError as exc:
                raise queue_full(exc) from None
        yield chunk


def queue_full(exc: QueueFullError) -> ApiError:
    """HTTP 429 for a session whose queue is full, with when to try again."""
    return ApiError(
        429,
        "queue_full",
        str(exc),
        headers={"Retry-After": str(max(1, math.ceil(exc.retry_after)))},
    )


async def drain(request: Request, limit: int) -> None:
    """Reads what is left of the body and lets it go (at most ``limit`` bytes), so that a
    refusal sent before the body was read reaches a client still sending it."""
    seen = 0
    async for chunk in request.stream():
        seen += len(chunk)
        if seen > limit:
            return


async def json_object(
    request: Request, limit: int, held: Reservation | None = None
) -> dict[str, Any]:
    """The request's body, a JSON object of at most ``limit`` bytes (none: ``{}``)."""
    return loads_object(b"".join([chunk async for chunk in body_chunks(request, limit, held)]))


def loads_object(body: bytes) -> dict[str, Any]:
    """A JSON object read from ``body`` (empty: ``{}``); 400 ``invalid_json`` for anything
    else: not UTF-8, not JSON, nested too deep, NaN or Infinity, not an object."""
    if not body.strip():
        return {}
    try:
        data = json.loads(body.decode("utf-8"), parse_constant=_no_constant)
    except UnicodeDecodeError as exc:
        raise ApiError(400, "invalid_json", f"the body is not UTF-8: {exc}") from None
    except RecursionError:
        raise ApiError(
            400, "invalid_json", "the body is not valid JSON: it is nested too deep"
        ) from None
    except ValueError as exc:
        raise ApiError(400, "invalid_json", f"the body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ApiError(400, "invalid_json", "the body must be a JSON object")
    return data


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def _check_fields(data: dict[str, Any], allowed: tuple[str, ...]) -> None:
    unknown = sorted(set(data) - set(allowed))
    if unknown:
        raise ApiError(
            400,
            "invalid_request",
            f"unknown field(s) {', '.join(unknown)}; allowed: {', '.join(allowed)}",
        )


def _text(value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise ApiError(400, "invalid_request", f"{name} must be a string")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ApiError(
            400, "invalid_request", f"{name} is not valid Unicode text (a lone surrogate)"
        ) from None
    return value


def _timeout(value: Any, config: ServerConfig) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ApiError(400, "invalid_request", "timeout must be a number of seconds")
    if not (math.isfinite(value) and 0 < value <= config.max_timeout):
        raise ApiError(
            400,
            "invalid_request",
            f"timeout must be more than 0 and at most "
            f"{config.max_timeout:g} s (the server's --max-timeout)",
        )
    return float(value)


def parse_env(value: Any) -> dict[str, str]:
    """A session's environment variables, checked: valid names, text values, no NUL."""
    if not isinstance(value, dict):
        raise ApiError(400, "invalid_request", "env must be an object of strings")
    env = {}
    for key, item in value.items():
        if not _ENV_NAME.fullmatch(key):
            raise ApiError(
                400,
                "invalid_request",
                f"env name {key[:50]!r} is not a valid "
                "variable name (letters, digits, _; not starting with a digit)",
            )
        item = _text(item, f"env[{key}]")
        if "\0" in item:
            raise ApiError(400, "invalid_request", f"env[{key}] holds a NUL character")
        env[key] = item
    return env


async def parse_create(
    request: Request, config: ServerConfig, kernel_names: list[str], owner: Tenant
) -> CreateRequest:
    """The body of ``POST /sessions``, held to what ``owner`` may ask for (``_allow``)."""
    data = await json_object(request, config.max_body)
    _check_fields(data, ("kernel_name", "env", "timeout", "checkpoint", *OPTION_FIELDS))
    kernel_name = _text(data.get("kernel_name", "python3"), "kernel_name")
    if kernel_name not in kernel_names:
        raise ApiError(
            400,
            "unknown_kernel",
            f"no kernel named {kernel_name[:100]!r} on this "
            f"server; installed: {', '.join(kernel_names)}",
        )
    timeout = _timeout(data.get("timeout"), config)
    env = parse_env(data.get("env", {}))
    try:
        options = parse_options(data, policy_for(config.policy, owner))
    except OptionError as exc:
        raise ApiError(exc.status, exc.code, exc.message) from None
    checkpoint = data.get("checkpoint")
    if checkpoint is not None:
        checkpoint = _text(checkpoint, "checkpoint")  # an unknown id is a 404, later
    return CreateRequest(kernel_name, env, timeout or config.default_timeout, options, checkpoint)


async def parse_flags(request: Request, config: ServerConfig, **defaults: bool) -> dict[str, bool]:
    """A body of optional booleans (``{"wait": false}``); an empty body takes the defaults."""
    data = await json_object(request, config.max_body)
    _check_fields(data, tuple(defaults))
    flags = dict(defaults)
    for name, value in data.items():
        if not isinstance(value, bool):
            raise ApiError(400, "invalid_request", f"{name} must be true or false")
        flags[name] = value
    return flags


async def parse_fork(request: Request, config: ServerConfig) -> tuple[bool, ForkMethod]:
    """The body of ``POST /sessions/{id}/fork``: ``{"wait", "method"}``, both optional."""
    data = await json_object(request, config.max_body)
    _check_fields(data, ("wait", "method"))
    wait = data.get("wait", True)
    if not isinstance(wait, bool):
        raise ApiError(400, "invalid_request", "wait must be true or false")
    method = data.get("method", "auto")
    if method not in FORK_METHODS:
        raise ApiError(400, "invalid_request", f"method must be one of {', '.join(FORK_METHODS)}")
    return wait, method


async def parse_execute(
    request: Request, config: ServerConfig, held: Reservation | None = None
) -> ExecuteRequest:
    """The body of ``POST /sessions/{id}/execute`` and its streaming form.

    ``held`` is the execution's room in the session's queue: a body longer
    than it holds is added to it as it is read (HTTP 429 past the cap).
    """
    data = await json_object(request, config.max_body, held)
    _check_fields(data, ("code", "language", "timeout", "stdin"))
    if "code" not in data:
        raise ApiError(400, "invalid_request", "code is required")
    code = data["code"]
    if not isinstance(code, str):
        raise ApiError(400, "invalid_request", "code must be a string")
    # Code with a lone surrogate is left for the session, whose refusal is a result.
    language = _text(data.get("language", "python"), "language")
    stdin = data.get("stdin")
    if "stdin" in data:
        if not isinstance(stdin, list):
            raise ApiError(400, "invalid_request", "stdin must be a list of strings")
        stdin = [_text(line, "each stdin answer") for line in stdin]
    return ExecuteRequest(code, language, _timeout(data.get("timeout"), config), stdin)


async def parse_start_kernel(
    request: Request, config: ServerConfig, kernel_names: list[str]
) -> str:
    """The kernel name in the body of the Jupyter API's ``POST /api/kernels``.

    jupyter_server sends ``{"name", "env"}`` (its gateway client) or ``{"name",
    "path"}``; the rest of a Jupyter body has no meaning here and is ignored.
    """
    data = await json_object(request, config.max_body)
    env, path = data.get("env", {}), data.get("path", "")
    if not (isinstance(env, dict) and all(isinstance(v, str) for v in env.values())):
        raise ApiError(400, "invalid_request", "env must be an object of strings")
    _text(path, "path")
    given = data.get("name")
    name = "python3" if given is None else _text(given, "name")
    if name not in kernel_names:
        raise ApiError(
            400,
            "unknown_kernel",
            f"no kernel named {name[:100]!r} on this server; installed: {', '.join(kernel_names)}",
        )
    return name
