"""ApiError and the handlers that turn every failure into ``{"error", "message"}`` JSON."""

from __future__ import annotations

import json
import logging
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

__all__ = ["ApiError", "JSONResponse", "exception_handlers"]

log = logging.getLogger("kernelexec.server")

_CODES = {
    400: "bad_request",
    401: "unauthorized",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "body_too_large",
    415: "unsupported_media_type",
    429: "too_many_sessions",
    503: "unavailable",
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

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message

    def response(self) -> JSONResponse:
        headers = {"WWW-Authenticate": "Bearer"} if self.status == 401 else None
        return JSONResponse(
            {"error": self.code, "message": self.message}, status_code=self.status, headers=headers
        )


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
    log.exception("unexpected error on %s %s", request.method, request.url.path)
    return ApiError(
        500, "internal", f"the server failed: {type(exc).__name__}; see the server's log"
    ).response()


exception_handlers = {ApiError: _api_error, HTTPException: _http_error, Exception: _unexpected}
