"""ApiError and the handlers that turn every failure into ``{"error", "message"}`` JSON."""

from __future__ import annotations

import json
import logging
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from .._exceptions import DiskSpaceError
from .._state import _disk

__all__ = [
    "ApiError",
    "JSONResponse",
    "closed_meanwhile",
    "disk_full",
    "exception_handlers",
    "no_room",
]

log = logging.getLogger("kernelexec.server")

_CODES = {
    400: "bad_request",
    401: "unauthorized",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    410: "gone",
    413: "body_too_large",
    415: "unsupported_media_type",
    429: "too_many_sessions",
    503: "unavailable",
    507: "insufficient_storage",
}


class JSONResponse(Response):
    """JSON as ASCII, so text the kernel produced (lone surrogates too) always encodes."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=True, allow_nan=False).encode("ascii")


class ApiError(Exception):
    """A request the server answers with an error status.

    Raised by handlers and helpers and rendered by ``exception_handlers``, so a
    check deep inside (say, a path leaving the work dir) ends the request at once.
    """

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        headers: dict[str, str] | None = None,
        fields: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = dict(headers or {})
        self.fields = dict(fields or {})  # more of the body: the scope or quota it names

    def response(self) -> JSONResponse:
        headers = dict(self.headers)
        if self.status == 401:
            headers["WWW-Authenticate"] = "Bearer"
        return JSONResponse(
            {"error": self.code, "message": self.message, **self.fields},
            status_code=self.status,
            headers=headers or None,
        )


def no_room(message: str) -> ApiError:
    """HTTP 507: what was asked would not fit on the server's disk, or in its budgets."""
    return ApiError(507, "insufficient_storage", message)


def closed_meanwhile() -> ApiError:
    return ApiError(409, "session_closed", "the session was closed meanwhile")


def disk_full(exc: BaseException) -> ApiError:
    """HTTP 507 for a ``DiskSpaceError``, or an ``OSError`` saying the disk is full."""
    if isinstance(exc, OSError):
        exc = _disk.full(exc, "writing to the server's disk")
    return no_room(str(exc))


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return exc.response()


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    code = _CODES.get(exc.status_code, "error")
    message = {
        404: f"no route for {request.url.path}; see /openapi.json",
        405: f"{request.method} is not allowed on {request.url.path}; see /openapi.json",
    }.get(exc.status_code, str(exc.detail))
    response = ApiError(exc.status_code, code, message).response()
    response.headers.update(exc.headers or {})  # Allow, on a 405
    return response


async def _unexpected(request: Request, exc: Exception) -> Response:
    if _disk.is_full(exc) or isinstance(exc, DiskSpaceError):
        # Wherever a write met a full disk: the client learns it is the disk, not a bug.
        log.warning("%s %s: %s", request.method, request.url.path, exc)
        return disk_full(exc).response()
    log.exception("unexpected error on %s %s", request.method, request.url.path)
    return ApiError(
        500, "internal", f"the server failed: {type(exc).__name__}; see the server's log"
    ).response()


exception_handlers = {ApiError: _api_error, HTTPException: _http_error, Exception: _unexpected}
