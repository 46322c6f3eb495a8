"""The REST half of a Jupyter gateway: JSON over HTTP, every status checked.

urllib in a worker thread rather than an HTTP client dependency: a gateway
session makes a handful of REST calls (create, interrupt, delete, a rate-
limited liveness check), so a thread per call costs nothing that matters.
"""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

from .._exceptions import ConfigurationError, KernelStartError
from ._caps import read_at_most

__all__ = ["GatewayREST", "Reply"]

# A gateway's answers are a kernel's model or the kernelspecs, kilobytes: one
# past this is not read, whatever the server in front of the kernels is.
MAX_ANSWER_BYTES = 10_000_000


@dataclass(frozen=True)
class Reply:
    """An HTTP answer: its status and its body, parsed as JSON when it is JSON."""

    status: int
    body: Any

    @property
    def message(self) -> str:
        """The gateway's own words for an error, if it gave any."""
        if isinstance(self.body, dict):
            for key in ("message", "reason", "error"):
                if self.body.get(key):
                    return str(self.body[key])
        return str(self.body or "")[:300]


class GatewayREST:
    """Calls ``/api/...`` on one gateway with its token.

    Args:
        url: the gateway's base URL, http:// or https://.
        token: sent as ``Authorization: token ...``; None sends none.
        timeout: seconds per request.
    """

    def __init__(self, url: str, token: str | None, *, timeout: float) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ConfigurationError(
                f"gateway url {url!r} must look like http://host:port (or https://)"
            )
        self.base = url.rstrip("/")
        self.ws_base = ("wss" if parts.scheme == "https" else "ws") + self.base[len(parts.scheme) :]
        self.headers = {"Authorization": f"token {token}"} if token else {}
        self.timeout = timeout

    async def call(self, method: str, path: str, body: Any = None) -> Reply:
        """One request; transport failures (refused, DNS, TLS, timeout) raise OSError."""
        return await asyncio.to_thread(self._call, method, path, body)

    async def checked(self, method: str, path: str, body: Any = None, *, doing: str) -> Reply:
        """A request whose failure, of any kind, is a ``KernelStartError`` naming the fix."""
        try:
            reply = await self.call(method, path, body)
        except OSError as exc:
            raise KernelStartError(
                f"cannot reach the gateway at {self.base} to {doing}: {_reason(exc)}; "
                "check the url and that the gateway is running"
            ) from exc
        if 200 <= reply.status < 300:
            return reply
        raise KernelStartError(self.explain(reply, doing))

    def explain(self, reply: Reply, doing: str) -> str:
        """What a failed status means, and what to change."""
        said = f" (the gateway said: {reply.message})" if reply.message else ""
        where = f"the gateway at {self.base}"
        if reply.status in (401, 403) and "limit" in reply.message.lower():
            return (
                f"{where} refused to {doing}: it runs as many kernels as it allows{said}; "
                "close other sessions or raise the gateway's kernel limit"
            )
        if reply.status == 401:
            return f"{where} rejected the token (401) when asked to {doing}; pass the right token="
        if reply.status == 403:
            return (
                f"{where} refused to {doing} (403 Forbidden){said}; check the token= "
                "and the gateway's access settings"
            )
        if reply.status == 404:
            return (
                f"{where} has no {doing.split(' ', 1)[-1]} (404){said}; check the url "
                "(a base path?) and that this is a Jupyter gateway or server"
            )
        if reply.status == 503 or reply.status == 429:
            return f"{where} is too busy to {doing} ({reply.status}){said}; retry later"
        return f"{where} failed to {doing}: HTTP {reply.status}{said}"

    def _call(self, method: str, path: str, body: Any) -> Reply:
        data = None if body is None else json.dumps(body).encode()
        headers = dict(self.headers)
        if data is not None:
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(
            self.base + path, data=data, headers=headers, method=method
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return Reply(response.status, _parse(read_at_most(response, MAX_ANSWER_BYTES)))
        except urllib.error.HTTPError as exc:
            with exc:
                return Reply(exc.code, _parse(read_at_most(exc, MAX_ANSWER_BYTES)))


def _parse(raw: bytes | None) -> Any:
    if raw is None:
        return f"[an answer over {MAX_ANSWER_BYTES:,} bytes, not read]"
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode("utf-8", "replace")


def _reason(exc: OSError) -> str:
    if isinstance(exc, urllib.error.URLError) and not isinstance(exc, urllib.error.HTTPError):
        return str(exc.reason)
    return str(exc) or type(exc).__name__
