"""envd's Connect RPC services in a sandbox: the filesystem's, and commands' ``Start``.

E2B's SDK calls envd with the Connect protocol in JSON (``connectrpc``): a
unary call is a POST of the request as ``application/json``, answered with the
response, or with an error status and ``{"code": "not_found", "message"}``. A
server stream (``Process/Start``) sends its request in an envelope (a flags
byte, four bytes of length, the JSON) and is answered with one envelope per
message and an end-of-stream envelope (flag 2) holding any error.

``commands.run`` runs in the sandbox's own kernel, as a bash cell (``%%bash``),
so the command is contained as the kernel is; its output comes as it is
written, and its exit status is the one the bash cell's error reports. A call not served
here (watching a folder, a PTY, stdin, signals) is Connect's ``unimplemented``
naming it.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import re
import shlex
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from ..._execution._live import LiveOutput
from ..._execution._models import ExecutionResult
from .._access import authorize
from .._auth import caller
from .._bodies import loads_object
from .._errors import ApiError
from .._registry import Entry
from ._control import sandboxes_of
from ._filesystem import FsError, list_dir, make_dir, move, remove, stat_entry
from ._paths import parts_for
from ._streaming import streamed

__all__ = ["filesystem_call", "process_call"]

_STATUS = {
    "invalid_argument": 400,
    "failed_precondition": 400,
    "unauthenticated": 401,
    "permission_denied": 403,
    "not_found": 404,
    "already_exists": 409,
    "resource_exhausted": 429,
    "unimplemented": 501,
    "internal": 500,
    "unavailable": 503,
}
_BY_HTTP = {
    400: "invalid_argument",
    403: "permission_denied",
    404: "not_found",
    429: "resource_exhausted",
    502: "unavailable",
}
_READING = ("Stat", "ListDir")
_EXIT = re.compile(r"bash exited with status (-?\d+)")  # a failed bash cell's BashError
_MAX_REQUEST = 1 << 20  # a Connect request's JSON: paths and a command, never file data


def _error(code: str, message: str) -> Response:
    body = json.dumps({"code": code, "message": message}, ensure_ascii=True)
    return Response(body, status_code=_STATUS.get(code, 500), media_type="application/json")


def _unimplemented(service: str, method: str) -> Response:
    return _error(
        "unimplemented",
        f"kernelexec does not support envd's {service}/{method} (docs/guides/e2b.md lists "
        "what it does)",
    )


async def _message(request: Request, *, enveloped: bool) -> dict[str, Any]:
    raw = b""
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > _MAX_REQUEST + 5:
            raise FsError("resource_exhausted", "the request is over 1 MiB")
    if enveloped:
        if len(raw) < 5:
            raise FsError("invalid_argument", "no enveloped message")
        flags, length = struct.unpack(">BI", raw[:5])
        if flags & 1:
            raise FsError("invalid_argument", "compressed messages are not accepted")
        raw = raw[5 : 5 + length]
    try:
        return loads_object(raw)
    except ApiError as exc:
        raise FsError("invalid_argument", f"the message: {exc.message}") from None


def _parts(data: dict[str, Any], field: str = "path") -> list[str]:
    try:
        return parts_for(data.get(field, ""), what=field)
    except ApiError as exc:
        raise FsError(_BY_HTTP.get(exc.status, "invalid_argument"), exc.message) from None


async def filesystem_call(request: Request) -> Response:
    method = str(request.path_params["method"])
    try:
        authorize(request, "files:read" if method in _READING else "files:write")
        _, entry = sandboxes_of(request).reach(
            request.headers.get("e2b-sandbox-id"), caller(request)
        )
        data = await _message(request, enveloped=False)
        work_dir = entry.work_dir
        if method == "Stat":
            answer: dict[str, Any] = {
                "entry": await asyncio.to_thread(stat_entry, work_dir, _parts(data))
            }
        elif method == "ListDir":
            depth = data.get("depth", 1)
            if isinstance(depth, bool) or not isinstance(depth, int):
                raise FsError("invalid_argument", "depth must be a whole number")
            listed = await asyncio.to_thread(list_dir, work_dir, _parts(data), depth)
            answer = {"entries": listed}
        elif method == "Remove":
            await asyncio.to_thread(remove, work_dir, _parts(data))
            answer = {}
        elif method == "MakeDir":
            answer = {"entry": await asyncio.to_thread(make_dir, work_dir, _parts(data))}
        elif method == "Move":
            source, target = _parts(data, "source"), _parts(data, "destination")
            answer = {"entry": await asyncio.to_thread(move, work_dir, source, target)}
        else:
            return _unimplemented("filesystem.Filesystem", method)
    except FsError as exc:
        return _error(exc.code, str(exc))
    except ApiError as exc:
        return _error(_BY_HTTP.get(exc.status, "internal"), exc.message)
    return Response(json.dumps(answer), media_type="application/json")


def _envelope(message: dict[str, Any], *, end: bool = False) -> bytes:
    body = json.dumps(message, ensure_ascii=True).encode("ascii")
    return struct.pack(">BI", 2 if end else 0, len(body)) + body


def bash_cell(data: dict[str, Any]) -> str:
    """The bash that runs ``commands.run``'s command in its cwd with its variables."""
    process = data.get("process")
    if not isinstance(process, dict) or not isinstance(process.get("args"), list):
        raise FsError("invalid_argument", "process.args is required")
    args = process["args"]
    if process.get("cmd") != "/bin/bash" or args[:2] != ["-l", "-c"] or len(args) != 3:
        raise FsError("unimplemented", "only commands.run's bash -l -c <command> is served")
    lines = []
    if process.get("cwd"):
        lines.append(f"cd {shlex.quote('/'.join(_parts(process, 'cwd')) or '.')}")
    envs = process.get("envs") or {}
    if not isinstance(envs, dict):
        raise FsError("invalid_argument", "process.envs must be an object of strings")
    for name, value in envs.items():
        if not (isinstance(name, str) and name.isidentifier() and isinstance(value, str)):
            raise FsError("invalid_argument", f"bad variable {str(name)[:40]!r}")
        lines.append(f"export {name}={shlex.quote(value)}")
    lines.append(str(args[2]))
    return "\n".join(lines)


async def process_call(request: Request) -> Response:
    method = str(request.path_params["method"])
    if method != "Start":
        return _unimplemented("process.Process", method)
    try:
        _, entry = sandboxes_of(request).reach(
            request.headers.get("e2b-sandbox-id"), caller(request)
        )
        data = await _message(request, enveloped=True)
        if data.get("stdin"):
            raise FsError("unimplemented", "commands.run(stdin=True) is not supported")
        cell = bash_cell(data)
    except FsError as exc:
        return _error(exc.code, str(exc))
    except ApiError as exc:
        return _error(_BY_HTTP.get(exc.status, "internal"), exc.message)
    registry = sandboxes_of(request).registry
    held = await registry.acquire(entry.id)
    return StreamingResponse(
        _started(held, cell, lambda: registry.release(held)),
        media_type="application/connect+json",
    )


async def _started(held: Entry, cell: str, release: Callable[[], None]) -> AsyncIterator[bytes]:
    def run(on_output: Callable[[LiveOutput], None]) -> Awaitable[ExecutionResult]:
        return held.session.execute(cell, language="bash", on_output=on_output)

    try:
        yield _envelope({"event": {"start": {"pid": 0}}})
        result: ExecutionResult | None = None
        async with contextlib.aclosing(streamed(run)) as items:
            async for item in items:
                if isinstance(item, ExecutionResult):
                    result = item
                else:
                    yield from_output(item)
        assert result is not None  # streamed ends with it, or raises
        code = 0
        if result.error is not None:
            found = _EXIT.search(result.error.evalue)
            code = int(found.group(1)) if found else 1
        elif not result.ok:
            code = 124 if result.status == "timeout" else 137
        end = {"exitCode": code, "exited": True, "status": f"exit status {code}"}
        yield _envelope({"event": {"end": end}})
        yield _envelope({}, end=True)
    finally:
        release()


def from_output(output: LiveOutput) -> bytes:
    if output.type != "stream":
        return b""
    name = "stderr" if output.get("name") == "stderr" else "stdout"
    text = base64.b64encode(str(output.get("text", "")).encode()).decode("ascii")
    return _envelope({"event": {"data": {name: text}}})
