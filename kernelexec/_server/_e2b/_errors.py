"""Errors as E2B's SDK reads them: a ``code`` in every body, 501 naming a call not served.

E2B's API client parses an error body with a numeric ``code`` beside the
``message`` and fails on one without it (a ``KeyError`` instead of, say, its
``AuthenticationException``). The server's errors (a 401 from ``TenantAuth``, a
429 from the registry, a 413 from ``BodyLimit``) have ``error`` and ``message``,
so ``E2BErrorCodes`` adds ``code`` to each JSON error answered under ``/e2b/``.
"""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .._errors import ApiError

__all__ = ["E2BErrorCodes", "not_supported"]


def not_supported(call: str, why: str = "") -> ApiError:
    """HTTP 501 naming the E2B call kernelexec does not serve (the SDK shows the message)."""
    more = f": {why}" if why else ""
    return ApiError(
        501,
        "not_supported",
        f"kernelexec does not support E2B's {call}{more} (docs/guides/e2b.md lists what it does)",
    )


class E2BErrorCodes:
    """ASGI middleware: each JSON error under ``prefix`` gets ``"code": <status>`` if it
    has none (an error body is small: it is held whole; a success passes untouched)."""

    def __init__(self, app: ASGIApp, *, prefix: str) -> None:
        self.app = app
        self.prefix = prefix

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(self.prefix):
            await self.app(scope, receive, send)
            return
        held: list[Message] = []

        async def patched(message: Message) -> None:
            if held or (
                message["type"] == "http.response.start"
                and message["status"] >= 400
                and _json(message)
            ):
                held.append(message)
                if message["type"] == "http.response.body" and not message.get("more_body"):
                    for out in _with_code(held):
                        await send(out)
                return
            await send(message)

        await self.app(scope, receive, patched)


def _json(start: Message) -> bool:
    return any(
        name == b"content-type" and value.startswith(b"application/json")
        for name, value in start.get("headers", [])
    )


def _with_code(held: list[Message]) -> list[Message]:
    start, body = held[0], b"".join(m.get("body", b"") for m in held[1:])
    try:
        data = json.loads(body)
    except ValueError:
        data = None
    if isinstance(data, dict) and "code" not in data:
        data["code"] = start["status"]
        body = json.dumps(data, ensure_ascii=True).encode("ascii")
    headers = [(n, v) for n, v in start.get("headers", []) if n != b"content-length"]
    headers.append((b"content-length", str(len(body)).encode()))
    return [{**start, "headers": headers}, {"type": "http.response.body", "body": body}]
