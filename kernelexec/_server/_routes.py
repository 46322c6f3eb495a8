"""The HTTP routes: sessions, execution, forks, checkpoints, files and the notebook."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from .._audit import AuditLog, execution_line
from .._exceptions import KernelexecError, KernelStartError, QueueFullError, SessionClosedError
from .._execution._background import Execution, ExecutionCancelled, Reservation
from .._execution._live import OutputListener
from .._execution._models import ExecutionResult
from .._tenants._registry import Identity
from .._version import __version__
from ._access import OPEN, sees
from ._auth import caller
from ._bodies import (
    ExecuteRequest,
    body_chunks,
    drain,
    parse_create,
    parse_execute,
    parse_flags,
    parse_fork,
    queue_full,
)
from ._config import ServerConfig
from ._errors import ApiError, JSONResponse
from ._executions import begin, cancel_execution, get_execution, list_executions, location
from ._executions import execution_events as execution_events_route
from ._files import download as file_download
from ._files import list_files, read_notebook, write_file
from ._paths import check_file_path, too_long
from ._registry import Entry, Registry
from ._results import result_json, resumed_result
from ._routing import route
from ._sse import OutputQueue, execution_events

__all__ = ["ROUTES", "ServerState"]

T = TypeVar("T")
_EMPTY_NOTEBOOK = {"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


@dataclass
class ServerState:
    """What the routes share, kept on ``app.state.kexec``."""

    config: ServerConfig
    registry: Registry
    kernel_names: list[str]
    schema: dict[str, Any]
    tasks: set[asyncio.Task[Any]] = field(default_factory=set)
    audit: AuditLog | None = None


def _state(request: Request) -> ServerState:
    state: ServerState = request.app.state.kexec
    return state


def _id(request: Request) -> str:
    return str(request.path_params["session_id"])


def _described(entry: Entry) -> dict[str, Any]:
    """A session as the API describes it, with how it was forked or restored."""
    data = entry.to_dict()
    if entry.fork_report is not None:
        data["fork_report"] = entry.fork_report.to_dict()
    if entry.restore_report is not None:
        data["restore_report"] = entry.restore_report.to_dict()
    return data


async def health(request: Request) -> Response:
    return JSONResponse({"status": "ok", "version": __version__})


async def openapi(request: Request) -> Response:
    return JSONResponse(_state(request).schema)


async def create_session(request: Request) -> Response:
    state = _state(request)
    owner = caller(request).tenant
    body = await parse_create(request, state.config, state.kernel_names, owner)
    entry = await state.registry.create(body, owner)
    return JSONResponse(_described(entry), status_code=201)


async def list_sessions(request: Request) -> Response:
    identity = caller(request)
    entries = [e for e in _state(request).registry.entries() if sees(identity, e.tenant)]
    return JSONResponse({"sessions": [e.to_dict() for e in entries]})


async def get_session(request: Request) -> Response:
    return JSONResponse(_state(request).registry.get(_id(request)).to_dict())


async def delete_session(request: Request) -> Response:
    purge = request.query_params.get("purge", "false").lower()
    if purge not in ("true", "false", "1", "0"):
        raise ApiError(400, "invalid_request", "purge must be true or false")
    entry = await _state(request).registry.delete(_id(request), purge=purge in ("true", "1"))
    return JSONResponse({"id": entry.id, "purged": purge in ("true", "1")})


async def _execute(
    state: ServerState,
    entry: Entry,
    body: ExecuteRequest,
    on_output: OutputListener | None,
    extra: dict[str, Any],
) -> ExecutionResult:
    """Runs the code; a resume before it is told in the result and in ``extra``, and a
    quota it passed too (``_quotas``)."""
    entry.executions += 1
    quotas = state.registry.quotas
    quotas.poke()
    try:
        try:
            result = await entry.session.execute(
                body.code,
                language=body.language,
                timeout=body.timeout,
                stdin=body.stdin,
                on_output=on_output,
            )
        except ExecutionCancelled as exc:
            exc.result = await quotas.after_execution(entry, exc.result)
            raise
        result = await quotas.after_execution(entry, result)
        report, entry.resumed = entry.resumed, None
        if report is None:
            return result
        extra["resumed"] = report.to_dict()
        return resumed_result(result, report, entry.idle_for)
    except SessionClosedError:
        raise ApiError(
            409,
            "session_closed",
            "the session was deleted or culled before this code ran; create a new session",
        ) from None
    except KernelStartError as exc:
        raise ApiError(503, "kernel_start_failed", str(exc)) from None


async def _admitted(request: Request) -> tuple[ExecuteRequest, Reservation]:
    """The body of an execution, read once the session's queue has room for it.

    Room is held for the declared length before a byte is read, so that no
    session's queue (and none of its bodies being read) passes its caps: 429
    with Retry-After when full, 413 for one body alone over the byte cap.
    The body of a refused request is read and let go, so the client gets
    the answer, not a broken connection.
    """
    state = _state(request)
    entry = state.registry.get_live(_id(request))  # a 404, 409 or 410 before reading
    tenant = caller(request).tenant
    try:
        state.registry.quotas.check_cpu(tenant)
        state.registry.quotas.check_queued(tenant)
    except ApiError:
        await drain(request, state.config.max_body)
        raise
    declared = request.headers.get("content-length", "")
    size = int(declared) if declared.isdigit() else 0
    if size > state.config.max_queued_bytes:
        await drain(request, state.config.max_body)
        raise ApiError(
            413,
            "execution_too_large",
            f"the request body is {size:,} bytes, over the {state.config.max_queued_bytes:,} "
            "a session's executions may hold together (the server's --max-queued-mb)",
        )
    try:
        held = entry.execution_store.reserve(size)
    except QueueFullError as exc:
        await drain(request, state.config.max_body)
        raise queue_full(exc) from None
    try:
        return await parse_execute(request, state.config, held), held
    except BaseException:
        held.release()
        raise


def _begin(
    request: Request,
    body: ExecuteRequest,
    held: Reservation,
    on_output: OutputListener | None = None,
) -> Execution:
    """The execution as a task of its own, reachable by id: it outlives a client that goes away."""
    state = _state(request)
    identity = caller(request)
    made: list[Execution] = []  # the execution, for its id in the audit log

    async def run(entry: Entry, listener: OutputListener, extra: dict[str, Any]) -> Any:
        result: ExecutionResult | None = None
        try:
            result = await _execute(state, entry, body, listener, extra)
        except ExecutionCancelled as exc:
            result = exc.result
            raise
        finally:
            audited = made[0].id if made else None
            _audit_execution(state, identity, entry.id, audited, body, result)
        return result

    execution = begin(
        state.registry,
        _id(request),
        run,
        code=body.code,
        language=body.language,
        max_chars=state.config.max_stream_buffer,
        on_output=on_output,
        reservation=held,
    )
    made.append(execution)
    state.tasks.add(execution.task)
    execution.task.add_done_callback(_forget(state.tasks))
    return execution


async def execute(request: Request) -> Response:
    body, held = await _admitted(request)
    # A client that disconnects leaves the execution running to its end (or
    # timeout), listed at GET /sessions/{id}/executions with its full result.
    execution = _begin(request, body, held)
    result = await execution.wait()
    assert result is not None
    return Response(result_json(result, execution.extra), media_type="application/json")


async def start_execution(request: Request) -> Response:
    body, held = await _admitted(request)
    execution = _begin(request, body, held)
    where = location(_id(request), execution)
    return JSONResponse(execution.to_dict(), status_code=202, headers={"Location": where})


async def execute_stream(request: Request) -> Response:
    state = _state(request)
    body, held = await _admitted(request)
    queue = OutputQueue(state.config.max_stream_buffer)
    execution = _begin(request, body, held, lambda live: queue.put(live.output))
    return StreamingResponse(
        execution_events(execution.task, queue, extra=execution.extra),
        media_type="text/event-stream",
        headers={
            "Cache-Control": "no-cache",
            "X-Accel-Buffering": "no",
            "Location": location(_id(request), execution),
        },
    )


def _forget(tasks: set[asyncio.Task[Any]]) -> Callable[[asyncio.Task[Any]], None]:
    def done(task: asyncio.Task[Any]) -> None:
        tasks.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: the stream reported it, if anyone listened

    return done


async def interrupt(request: Request) -> Response:
    entry = await _state(request).registry.interrupt(_id(request))
    return JSONResponse(entry.to_dict())


async def restart(request: Request) -> Response:
    entry = await _state(request).registry.restart(_id(request))
    return JSONResponse(entry.to_dict())


async def fork(request: Request) -> Response:
    state = _state(request)
    state.registry.get_live(_id(request))  # a 404 or 409 before reading the body
    wait, method = await parse_fork(request, state.config)
    owner = caller(request).tenant
    entry = await state.registry.fork(_id(request), owner, wait=wait, method=method)
    return JSONResponse(_described(entry), status_code=201)


async def checkpoint(request: Request) -> Response:
    state = _state(request)
    state.registry.get_live(_id(request))
    flags = await parse_flags(request, state.config, files=True)
    info = await state.registry.checkpoint(_id(request), files=flags["files"])
    return JSONResponse(info.to_dict(), status_code=201)


def _checkpoint_id(request: Request) -> str:
    return str(request.path_params["checkpoint_id"])


async def list_checkpoints(request: Request) -> Response:
    registry = _state(request).registry
    identity = caller(request)
    listing = await asyncio.to_thread(registry.store.listing)
    for key in ("checkpoints", "unreadable"):
        listing[key] = [
            c for c in listing[key] if sees(identity, registry.checkpoint_owner(c["id"]))
        ]
    return JSONResponse(listing)


async def get_checkpoint(request: Request) -> Response:
    registry = _state(request).registry
    checkpoint_id = _checkpoint_id(request)
    saved = await asyncio.to_thread(registry.open_checkpoint, checkpoint_id)
    return JSONResponse(registry.store.describe(checkpoint_id, saved).to_dict())


async def delete_checkpoint(request: Request) -> Response:
    checkpoint_id = _checkpoint_id(request)
    await _state(request).registry.delete_checkpoint(checkpoint_id)
    return JSONResponse({"id": checkpoint_id, "deleted": True})


async def variables(request: Request) -> Response:
    async with _state(request).registry.using(_id(request)) as entry:
        listed = await _asking(entry.session.variables())
    return JSONResponse({"variables": [v.to_dict() for v in listed]})


async def variable(request: Request) -> Response:
    name = str(request.path_params["name"])
    async with _state(request).registry.using(_id(request)) as entry:
        found = await _asking(entry.session.inspect(name))
    if found is None:
        raise ApiError(
            404,
            "variable_not_found",
            f"no variable {name[:100]!r} in the session's namespace "
            "(GET /sessions/{id}/variables lists them)",
        )
    return JSONResponse(found.to_dict())


async def _asking(asked: Awaitable[T]) -> T:
    """What the kernel answered; a 409 or 503 if it could not."""
    try:
        return await asked
    except SessionClosedError:
        raise _gone() from None
    except KernelexecError as exc:
        raise ApiError(503, "kernel_unavailable", str(exc)) from None


def _gone() -> ApiError:
    return ApiError(409, "session_closed", "the session was deleted or culled; create a new one")


async def files(request: Request) -> Response:
    entry = _state(request).registry.get(_id(request))
    found, truncated, skipped = await list_files(entry.session.file_access)
    return JSONResponse(
        {"files": [f.to_dict() for f in found], "truncated": truncated, "skipped": skipped}
    )


async def download(request: Request) -> Response:
    entry = _state(request).registry.get(_id(request))
    raw = check_file_path(str(request.path_params["path"]))
    if too_long(raw):
        raise ApiError(
            404, "file_not_found", f"no file {raw[:200]!r}: it is longer than a file system allows"
        )
    # Opened once, with no link followed, and that very file is sent.
    return await file_download(entry.session.file_access, raw, head=request.method == "HEAD")


async def upload(request: Request) -> Response:
    state = _state(request)
    entry = state.registry.get(_id(request))
    entry.touch()
    raw = check_file_path(str(request.path_params["path"]))
    if too_long(raw):
        raise ApiError(
            409,
            "cannot_create",
            f"cannot create {raw[:200]!r}: it is longer than a file system allows",
        )
    _require_body(request)
    declared = request.headers.get("content-length", "")
    size = int(declared) if declared.isdigit() else 0
    tenant = caller(request).tenant
    try:
        room = await state.registry.quotas.check_upload(entry, tenant, size)
    except ApiError:
        await drain(request, state.config.max_body)
        raise
    chunks = body_chunks(request, state.config.max_body)
    if room is not None:
        chunks = _at_most(
            chunks,
            room,
            lambda sent: state.registry.quotas.too_much(
                tenant, sent, tenant.quotas.work_dir_bytes or 0
            ),
        )
    info = await write_file(
        entry.session.file_access,
        entry.work_dir,
        raw,
        chunks,
        notebook=entry.session.notebook_path,
        size=size,
    )
    return JSONResponse(info.to_dict(), status_code=201)


def _require_body(request: Request) -> None:
    # An empty body is an empty file only when the client says it sends one:
    # a PUT with no body and no Content-Type is a mistake, not a request to
    # empty the file.
    headers = request.headers
    if (
        "content-type" not in headers
        and "transfer-encoding" not in headers
        and headers.get("content-length", "0") == "0"
    ):
        raise ApiError(
            400,
            "missing_body",
            "send the file's bytes as the body; for an empty file, send an empty body "
            "with 'Content-Type: application/octet-stream'",
        )


async def notebook(request: Request) -> Response:
    entry = _state(request).registry.get(_id(request))
    await entry.session.flush()
    body = await asyncio.to_thread(read_notebook, entry.work_dir, entry.session.notebook_path)
    if body is None:
        body = json.dumps(_EMPTY_NOTEBOOK).encode()
    return Response(body, media_type="application/x-ipynb+json")


async def _at_most(
    chunks: AsyncIterator[bytes], room: int, refuse: Callable[[int], ApiError]
) -> AsyncIterator[bytes]:
    """The upload's chunks, refused (and so not kept) once they pass ``room`` bytes: a
    body of undeclared length is held to the work-dir quota as it comes."""
    sent = 0
    async for chunk in chunks:
        sent += len(chunk)
        if sent > room:
            raise refuse(sent)
        yield chunk


def _audit_execution(
    state: ServerState,
    identity: Identity,
    session_id: str,
    execution_id: str | None,
    body: ExecuteRequest,
    result: ExecutionResult | None,
) -> None:
    """One line of the audit log for an execution: never its code or outputs."""
    if state.audit is not None:
        who = (identity.tenant.name, identity.token_id)
        state.audit.record(
            execution_line(
                who, session_id, execution_id, body.code, body.language, result, door="http"
            )
        )


_SESSION = "/sessions/{session_id}"

ROUTES = [
    route("/health", GET=(health, OPEN)),
    route("/openapi.json", GET=(openapi, None)),
    route("/sessions", GET=(list_sessions, "sessions"), POST=(create_session, "sessions")),
    route(_SESSION, GET=(get_session, "sessions"), DELETE=(delete_session, "sessions")),
    route(f"{_SESSION}/execute", POST=(execute, "execute")),
    route(f"{_SESSION}/execute/stream", POST=(execute_stream, "execute")),
    route(
        f"{_SESSION}/executions",
        GET=(list_executions, "execute"),
        POST=(start_execution, "execute"),
    ),
    route(f"{_SESSION}/executions/{{execution_id}}", GET=(get_execution, "execute")),
    route(
        f"{_SESSION}/executions/{{execution_id}}/events", GET=(execution_events_route, "execute")
    ),
    route(f"{_SESSION}/executions/{{execution_id}}/cancel", POST=(cancel_execution, "execute")),
    route(f"{_SESSION}/interrupt", POST=(interrupt, "execute")),
    route(f"{_SESSION}/restart", POST=(restart, "execute")),
    route(f"{_SESSION}/fork", POST=(fork, "fork")),
    route(f"{_SESSION}/checkpoint", POST=(checkpoint, "checkpoint")),
    route("/checkpoints", GET=(list_checkpoints, "checkpoint")),
    route(
        "/checkpoints/{checkpoint_id}",
        GET=(get_checkpoint, "checkpoint"),
        DELETE=(delete_checkpoint, "checkpoint"),
    ),
    route(f"{_SESSION}/variables", GET=(variables, "execute")),
    route(f"{_SESSION}/variables/{{name}}", GET=(variable, "execute")),
    route(f"{_SESSION}/files", GET=(files, "files:read")),
    route(
        f"{_SESSION}/files/{{path:path}}",
        GET=(download, "files:read"),
        PUT=(upload, "files:write"),
    ),
    route(f"{_SESSION}/notebook", GET=(notebook, "files:read")),
]
