"""Request bodies: read within the size limit, parsed, and checked field by field.

Every way a body can be wrong (too big, not UTF-8, not JSON, a field of the
wrong type, an unknown field) ends as an HTTP 4xx naming the problem.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request

from ._config import ServerConfig
from ._errors import ApiError

__all__ = ["CreateRequest", "ExecuteRequest", "body_chunks", "parse_create", "parse_execute"]

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class CreateRequest:
    kernel_name: str
    env: dict[str, str]
    timeout: float


@dataclass(frozen=True)
class ExecuteRequest:
    code: str
    language: str
    timeout: float | None
    stdin: list[str] | None


def _too_large(limit: int) -> ApiError:
    return ApiError(
        413, "body_too_large", f"the request body is over {limit:,} bytes (the server's --max-body)"
    )


async def body_chunks(request: Request, limit: int) -> AsyncIterator[bytes]:
    """The body's chunks; HTTP 413 as soon as more than ``limit`` bytes came."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise _too_large(limit)
    seen = 0
    async for chunk in request.stream():
        seen += len(chunk)
        if seen > limit:
            raise _too_large(limit)
        yield chunk


async def _json_object(request: Request, limit: int) -> dict[str, Any]:
    body = b"".join([chunk async for chunk in body_chunks(request, limit)])
    if not body.strip():
        return {}
    try:
        data = json.loads(body.decode("utf-8"), parse_constant=_no_constant)
    except UnicodeDecodeError as exc:
        raise ApiError(400, "invalid_json", f"the body is not UTF-8: {exc}") from None
    except (ValueError, RecursionError) as exc:
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


def _env(value: Any) -> dict[str, str]:
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
    request: Request, config: ServerConfig, kernel_names: list[str]
) -> CreateRequest:
    """The body of ``POST /sessions``."""
    data = await _json_object(request, config.max_body)
    _check_fields(data, ("kernel_name", "env", "timeout"))
    kernel_name = _text(data.get("kernel_name", "python3"), "kernel_name")
    if kernel_name not in kernel_names:
        raise ApiError(
            400,
            "unknown_kernel",
            f"no kernel named {kernel_name[:100]!r} on this "
            f"server; installed: {', '.join(kernel_names)}",
        )
    timeout = _timeout(data.get("timeout"), config)
    return CreateRequest(kernel_name, _env(data.get("env", {})), timeout or config.default_timeout)


async def parse_execute(request: Request, config: ServerConfig) -> ExecuteRequest:
    """The body of ``POST /sessions/{id}/execute`` and its streaming form."""
    data = await _json_object(request, config.max_body)
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
