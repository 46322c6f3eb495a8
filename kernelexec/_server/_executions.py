"""Executions on the server: every one has an id, and outlives the request that started it.

``POST /sessions/{id}/executions`` starts one and answers 202 at once;
``POST .../execute`` and ``.../execute/stream`` start one the same way and
wait for it (or stream it). So an execution whose client went away runs on
to its end (or its timeout), and is found again by id:

- ``GET /sessions/{id}/executions``: the session's executions, oldest first:
  every one not finished, and the last ``KEEP_FINISHED`` finished ones.
- ``GET /sessions/{id}/executions/{eid}[?wait=s]``: its state; ``result``
  once done (``error`` if it could not run). ``wait`` holds the answer until
  it ends or that many seconds pass.
- ``GET /sessions/{id}/executions/{eid}/events[?offset=n]``: its live outputs
  as server-sent events from event ``n`` (or after the ``Last-Event-ID``
  header's), each with an ``id:`` line, then the ``result`` (or ``error``)
  event once it ends; see ``kernelexec._execution._background`` for ``dropped``.
- ``POST /sessions/{id}/executions/{eid}/cancel``: takes a queued one out of
  the queue or interrupts the running one; answers when it has ended.
  A finished one: 409 ``execution_finished``.

A session with an execution queued or running is busy: never suspended or culled.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from .._execution._background import Execution, ExecutionEvent, Reservation, start_execution
from .._execution._live import OutputListener
from .._execution._models import ExecutionResult
from .._times import SCHEMA as WHEN
from ._errors import ApiError, JSONResponse
from ._openapi_parts import ref
from ._registry import KEEP_FINISHED, Entry, Registry
from ._results import result_json
from ._sse import KEEPALIVE, frame

__all__ = [
    "KEEP_FINISHED",
    "begin",
    "cancel_execution",
    "execution_events",
    "get_execution",
    "list_executions",
    "location",
]

CANCEL_WAIT = 60.0  # seconds a cancel waits for the execution to end before answering
_ID = re.compile(r"[0-9a-f]{32}")

Execute = Callable[[Entry, OutputListener, dict[str, Any]], Awaitable[ExecutionResult]]


def begin(
    registry: Registry,
    session_id: str,
    execute: Execute,
    *,
    code: str,
    language: str | None,
    max_chars: int,
    on_output: OutputListener | None = None,
    reservation: Reservation | None = None,
) -> Execution:
    """Starts an execution on the session as a task of its own; its handle at once.

    ``execute(entry, listener, extra)`` runs the code with the session marked
    busy; an ``ApiError`` it raises (the session was deleted, no kernel
    starts) is the execution's ``error``. ``reservation``, its room in the
    session's queue, is released when it ends.
    """
    try:
        entry = registry.get_live(session_id)
    except BaseException:
        if reservation is not None:
            reservation.release()
        raise

    async def run(listener: OutputListener) -> ExecutionResult:
        async with registry.using(session_id) as used:  # busy: never suspended meanwhile
            return await execute(used, listener, execution.extra)

    execution = start_execution(
        run, code=code, language=language, on_output=on_output, max_chars=max_chars
    )
    entry.execution_store.add(execution, reservation)
    return execution


def location(session_id: str, execution: Execution) -> str:
    return f"/sessions/{session_id}/executions/{execution.id}"


def described(execution: Execution) -> dict[str, Any]:
    """The execution as the API describes it; with its result or error once ended."""
    data = execution.to_dict()
    if execution.result is not None:
        # Through result_json: strict JSON whatever the kernel sent (NaN, deep nesting).
        data["result"] = json.loads(result_json(execution.result, execution.extra))
    elif execution.error is not None:
        data["error"] = _error(execution.error)
    return data


def _error(exc: BaseException) -> dict[str, str]:
    if isinstance(exc, ApiError):
        return {"error": exc.code, "message": exc.message}
    if isinstance(exc, asyncio.CancelledError):
        return {"error": "cancelled", "message": "the server stopped before it ended"}
    return {"error": "internal", "message": f"the execution failed: {type(exc).__name__}: {exc}"}


def _registry(request: Request) -> Registry:
    registry: Registry = request.app.state.kexec.registry
    return registry


def _find(request: Request) -> tuple[Entry, Execution]:
    entry = _registry(request).get(str(request.path_params["session_id"]))
    execution_id = str(request.path_params["execution_id"])
    found = entry.execution_store.get(execution_id) if _ID.fullmatch(execution_id) else None
    if found is None:
        raise ApiError(
            404,
            "execution_not_found",
            f"no execution {execution_id[:64]!r} in session {entry.id}; it may have "
            f"finished long ago (a session keeps its last {KEEP_FINISHED} finished ones; "
            "GET /sessions/{id}/executions lists them)",
        )
    return entry, found


def _seconds(request: Request, name: str, most: float) -> float | None:
    raw = request.query_params.get(name)
    if raw is None:
        return None
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not 0 <= value <= most:
        raise ApiError(400, "invalid_request", f"{name} must be seconds from 0 to {most:g}")
    return value


def _offset(request: Request) -> int:
    """The first event wanted: after ``Last-Event-ID`` if sent, else ``offset``, else 0."""
    last = request.headers.get("last-event-id")
    raw, after = (last, 1) if last is not None else (request.query_params.get("offset"), 0)
    if raw is None:
        return 0
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 18):
        what = "the Last-Event-ID header" if last is not None else "offset"
        raise ApiError(400, "invalid_request", f"{what} must be an event number (0, 1, ...)")
    return int(raw) + after


async def list_executions(request: Request) -> Response:
    entry = _registry(request).get(str(request.path_params["session_id"]))
    return JSONResponse({"executions": [e.to_dict() for e in entry.execution_store.all()]})


async def get_execution(request: Request) -> Response:
    registry = _registry(request)
    wait = _seconds(request, "wait", registry.config.max_timeout)
    _, execution = _find(request)
    if wait:
        await asyncio.wait({execution.task}, timeout=wait)
    return JSONResponse(described(execution))


async def cancel_execution(request: Request) -> Response:
    _, execution = _find(request)
    if not execution.cancel():
        status = execution.result.status if execution.result is not None else "failed"
        raise ApiError(
            409,
            "execution_finished",
            f"execution {execution.id} had already finished (status {status}); there is "
            "nothing to cancel: GET it for its result",
        )
    # Answered once it has ended, so the answer says how (an interrupt, or a restart).
    await asyncio.wait({execution.task}, timeout=CANCEL_WAIT)
    return JSONResponse(described(execution))


async def execution_events(request: Request) -> Response:
    offset = _offset(request)
    _, execution = _find(request)
    return StreamingResponse(
        _events(execution, offset),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


def _framed(event: ExecutionEvent) -> bytes:
    return f"id: {event.offset}\n{frame(event.kind, event.data)}".encode("ascii")


async def _events(execution: Execution, offset: int) -> AsyncIterator[bytes]:
    while True:
        found = await execution.read(offset, KEEPALIVE)
        for event in found:
            yield _framed(event)
            offset = event.offset + 1
        if not found:
            if execution.done():
                break
            yield b": keep-alive\n\n"
    ending = f"id: {execution.events_end}\n".encode("ascii")
    if execution.result is not None:
        yield (
            ending
            + b"event: result\ndata: "
            + result_json(execution.result, execution.extra)
            + b"\n\n"
        )
    else:
        assert execution.error is not None
        yield ending + frame("error", _error(execution.error)).encode("ascii")


def _answers(ok: tuple[str, str, dict[str, Any]], *errors: int) -> dict[str, Any]:
    """An operation's responses: the success and the errors (401 and 413 on every route)."""
    status, description, schema = ok
    said = {
        400: "Malformed request (a bad wait or offset)",
        401: "Missing or wrong token",
        404: "No such session (session_not_found) or execution (execution_not_found)",
        409: "The session was culled, closed or deleted; for a cancel, the execution "
        "had already finished (execution_finished)",
        410: "The session's kernel was lost when the server restarted (session_lost)",
        413: "Body over --max-body-mb (any route), or over --max-queued-mb (execution_too_large)",
        429: "The session's queue is full (queue_full: --max-queued, --max-queued-mb); "
        "Retry-After says when to try again",
        503: "The server is shutting down",
    }
    error = {"content": {"application/json": {"schema": ref("Error")}}}
    answers = {status: {"description": description, "content": schema}}
    for code in sorted({401, 413, *errors}):
        answers[str(code)] = {"description": said[code], **error}
    return answers


def _linked(answers: dict[str, Any]) -> dict[str, Any]:
    """The 202's links: the id it gives is what the execution's routes take.

    They let a client (and schemathesis's stateful phase) go from a start to
    the execution's state, events and cancel with a real id.
    """
    prefix = "#/paths/~1sessions~1%7Bsession_id%7D~1executions~1%7Bexecution_id%7D"
    parameters = {"session_id": "$request.path.session_id", "execution_id": "$response.body#/id"}
    answers["202"]["links"] = {
        name: {"operationRef": f"{prefix}{tail}", "parameters": parameters}
        for name, tail in (
            ("GetExecution", "/get"),
            ("ExecutionEvents", "~1events/get"),
            ("CancelExecution", "~1cancel/post"),
        )
    }
    return answers


def execution_schemas() -> dict[str, Any]:
    """The components the executions' routes use (``Error`` and ``ExecutionResult`` are shared)."""
    maybe = {**WHEN, "type": ["string", "null"], "description": "ISO 8601, UTC; null until then"}
    return {
        "Execution": {
            "type": "object",
            "required": ["id", "state", "status", "language", "code", "created", "events"],
            "properties": {
                "id": {"type": "string", "pattern": "^[0-9a-f]{32}$"},
                "state": {"enum": ["queued", "running", "done", "failed"]},
                "status": {
                    "type": ["string", "null"],
                    "description": "the result's status once done (cancelled: cancelled)",
                },
                "language": {"type": "string"},
                "code": {"type": "string", "description": "the first 200 characters"},
                "created": WHEN,
                "started": maybe,
                "finished": maybe,
                "events": {"type": "integer", "description": "events so far (the next's id)"},
                "result": ref("ExecutionResult"),
                "error": ref("Error"),
            },
        },
        "Executions": {
            "type": "object",
            "required": ["executions"],
            "properties": {"executions": {"type": "array", "items": ref("Execution")}},
        },
    }


def execution_paths(
    session: list[dict[str, Any]], execute_body: dict[str, Any], max_wait: float
) -> dict[str, Any]:
    """The executions' routes for the OpenAPI schema (``max_wait``: the server's --max-timeout)."""
    json_of = {"application/json": {"schema": ref("Execution")}}
    execution = [
        *session,
        {
            "name": "execution_id",
            "in": "path",
            "required": True,
            "schema": {"type": "string", "maxLength": 200},
        },
    ]
    wait = {
        "name": "wait",
        "in": "query",
        "required": False,
        "schema": {"type": "number", "minimum": 0, "maximum": max_wait},
        "description": "seconds to wait for it to end before answering (at most --max-timeout)",
    }
    offset = {
        "name": "offset",
        "in": "query",
        "required": False,
        "schema": {"type": "integer", "minimum": 0},
        "description": "the first event wanted (default 0); Last-Event-ID: n means n + 1",
    }
    stream = {"text/event-stream": {"itemSchema": ref("Event")}}
    return {
        "/sessions/{session_id}/executions": {
            "parameters": session,
            "get": {
                "summary": "The session's executions: running, queued, and the last finished",
                "responses": _answers(
                    (
                        "200",
                        "Oldest first",
                        {"application/json": {"schema": ref("Executions")}},
                    ),
                    404,
                ),
            },
            "post": {
                "summary": "Start code in the background: 202 with its id at once",
                "requestBody": execute_body,
                "responses": _linked(
                    _answers(("202", "Started (or queued)", json_of), 400, 404, 409, 410, 429, 503)
                ),
            },
        },
        "/sessions/{session_id}/executions/{execution_id}": {
            "parameters": execution,
            "get": {
                "summary": "Its state; the result once done",
                "parameters": [wait],
                "responses": _answers(("200", "The execution", json_of), 400, 404),
            },
        },
        "/sessions/{session_id}/executions/{execution_id}/events": {
            "parameters": execution,
            "get": {
                "summary": "Its outputs as server-sent events, from an offset, then the result",
                "parameters": [offset],
                "responses": _answers(
                    ("200", "Events, each with an id; 'result' or 'error' last", stream), 400, 404
                ),
            },
        },
        "/sessions/{session_id}/executions/{execution_id}/cancel": {
            "parameters": execution,
            "post": {
                "summary": "Take it out of the queue or interrupt it; answered once it ended",
                "responses": _answers(("200", "Cancelled", json_of), 404, 409),
            },
        },
    }
