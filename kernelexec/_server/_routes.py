"""The HTTP routes: sessions, execution, files and the notebook."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.responses import FileResponse, Response, StreamingResponse
from starlette.routing import Route

from .. import __version__
from .._exceptions import KernelStartError, SessionClosedError
from .._models import ExecutionResult
from ._bodies import ExecuteRequest, body_chunks, parse_create, parse_execute
from ._config import ServerConfig
from ._errors import ApiError, JSONResponse
from ._files import list_files, resolve_inside, write_file
from ._registry import Entry, Registry
from ._sse import OutputQueue, execution_events

__all__ = ["ROUTES", "ServerState"]

_EMPTY_NOTEBOOK = {"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


@dataclass
class ServerState:
    """What the routes share, kept on ``app.state.kexec``."""

    config: ServerConfig
    registry: Registry
    kernel_names: list[str]
    schema: dict[str, Any]
    tasks: set[asyncio.Task[ExecutionResult]] = field(default_factory=set)


def _state(request: Request) -> ServerState:
    state: ServerState = request.app.state.kexec
    return state


def _id(request: Request) -> str:
    return str(request.path_params["session_id"])


async def health(request: Request) -> Response:
    return JSONResponse({"status": "ok", "version": __version__})


async def openapi(request: Request) -> Response:
    return JSONResponse(_state(request).schema)


async def create_session(request: Request) -> Response:
    state = _state(request)
    body = await parse_create(request, state.config, state.kernel_names)
    entry = await state.registry.create(body)
    return JSONResponse(entry.info().to_dict(), status_code=201)


async def list_sessions(request: Request) -> Response:
    entries = _state(request).registry.entries()
    return JSONResponse({"sessions": [e.info().to_dict() for e in entries]})


async def get_session(request: Request) -> Response:
    return JSONResponse(_state(request).registry.get(_id(request)).info().to_dict())


async def delete_session(request: Request) -> Response:
    purge = request.query_params.get("purge", "false").lower()
    if purge not in ("true", "false", "1", "0"):
        raise ApiError(400, "invalid_request", "purge must be true or false")
    entry = await _state(request).registry.delete(_id(request), purge=purge in ("true", "1"))
    return JSONResponse({"id": entry.id, "purged": purge in ("true", "1")})


async def _execute(
    entry: Entry, body: ExecuteRequest, on_output: Callable[[dict[str, Any]], None] | None
) -> ExecutionResult:
    entry.executions += 1
    try:
        return await entry.session.execute(
            body.code,
            language=body.language,
            timeout=body.timeout,
            stdin=body.stdin,
            on_output=on_output,
        )
    except SessionClosedError:
        raise ApiError(
            409,
            "session_closed",
            "the session was deleted or culled before this code ran; create a new session",
        ) from None
    except KernelStartError as exc:
        raise ApiError(503, "kernel_start_failed", str(exc)) from None


async def execute(request: Request) -> Response:
    state = _state(request)
    state.registry.get_live(_id(request))  # a 404 or 409 before reading the body
    body = await parse_execute(request, state.config)
    async with state.registry.using(_id(request)) as entry:
        result = await _execute(entry, body, None)
    return JSONResponse(result.to_dict())


async def execute_stream(request: Request) -> Response:
    state = _state(request)
    state.registry.get_live(_id(request))
    body = await parse_execute(request, state.config)
    entry = state.registry.acquire(_id(request))
    queue = OutputQueue(state.config.max_stream_buffer)

    async def run() -> ExecutionResult:
        try:
            return await _execute(entry, body, queue.put)
        finally:
            state.registry.release(entry)

    # A task of its own, so the execution outlives a reader that goes away.
    task = asyncio.get_running_loop().create_task(run())
    state.tasks.add(task)
    task.add_done_callback(_forget(state.tasks))
    return StreamingResponse(
        execution_events(task, queue),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


def _forget(tasks: set[asyncio.Task[ExecutionResult]]) -> Callable[[asyncio.Task[Any]], None]:
    def done(task: asyncio.Task[Any]) -> None:
        tasks.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: the stream reported it, if anyone listened

    return done


async def interrupt(request: Request) -> Response:
    entry = _state(request).registry.get_live(_id(request))
    entry.touch()
    try:
        await entry.session.interrupt()
    except SessionClosedError:
        raise ApiError(409, "session_closed", "the session was closed meanwhile") from None
    return JSONResponse(entry.info().to_dict())


async def restart(request: Request) -> Response:
    async with _state(request).registry.using(_id(request)) as entry:
        try:
            await entry.session.restart()
        except SessionClosedError:
            raise ApiError(409, "session_closed", "the session was closed meanwhile") from None
        except KernelStartError as exc:
            raise ApiError(503, "kernel_start_failed", str(exc)) from None
    return JSONResponse(entry.info().to_dict())


async def files(request: Request) -> Response:
    entry = _state(request).registry.get(_id(request))
    found, truncated = await list_files(entry.work_dir)
    return JSONResponse({"files": [f.to_dict() for f in found], "truncated": truncated})


async def download(request: Request) -> Response:
    entry = _state(request).registry.get(_id(request))
    raw = str(request.path_params["path"])
    target = resolve_inside(entry.work_dir, raw)
    if target.is_dir():
        raise ApiError(
            400, "not_a_file", f"{raw[:200]!r} is a folder; GET .../files lists every file"
        )
    if not target.is_file():
        raise ApiError(
            404,
            "file_not_found",
            f"no file {raw[:200]!r} in the session's work dir; GET .../files lists them",
        )
    return FileResponse(target)


async def upload(request: Request) -> Response:
    state = _state(request)
    entry = state.registry.get(_id(request))
    entry.touch()
    raw = str(request.path_params["path"])
    info = await write_file(entry.work_dir, raw, body_chunks(request, state.config.max_body))
    return JSONResponse(info.to_dict(), status_code=201)


async def notebook(request: Request) -> Response:
    entry = _state(request).registry.get(_id(request))
    await entry.session.flush()
    path = entry.session.notebook_path
    # Read whole: the transcript is replaced by rename, and a streamed read
    # could straddle two versions.
    if path.is_file():
        body = await asyncio.to_thread(path.read_bytes)
    else:
        body = json.dumps(_EMPTY_NOTEBOOK).encode()
    return Response(body, media_type="application/x-ipynb+json")


Endpoint = Callable[[Request], Awaitable[Response]]


def _route(path: str, **handlers: Endpoint) -> Route:
    """One route for every method on a path, so a 405's Allow header lists them all."""
    if "GET" in handlers:
        handlers["HEAD"] = handlers["GET"]

    async def endpoint(request: Request) -> Response:
        return await handlers[request.method](request)

    return Route(path, endpoint, methods=list(handlers))


_SESSION = "/sessions/{session_id}"

ROUTES = [
    _route("/health", GET=health),
    _route("/openapi.json", GET=openapi),
    _route("/sessions", GET=list_sessions, POST=create_session),
    _route(_SESSION, GET=get_session, DELETE=delete_session),
    _route(f"{_SESSION}/execute", POST=execute),
    _route(f"{_SESSION}/execute/stream", POST=execute_stream),
    _route(f"{_SESSION}/interrupt", POST=interrupt),
    _route(f"{_SESSION}/restart", POST=restart),
    _route(f"{_SESSION}/files", GET=files),
    _route(f"{_SESSION}/files/{{path:path}}", GET=download, PUT=upload),
    _route(f"{_SESSION}/notebook", GET=notebook),
]
