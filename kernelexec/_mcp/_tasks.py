"""MCP Tasks for ``execute_code``: a long call becomes a task, and a task is a background execution.

The extension is ``io.modelcontextprotocol/tasks`` (SEP-2663), on protocol
2026-07-28. A client declares it in each request's ``_meta``
(``io.modelcontextprotocol/clientCapabilities`` → ``extensions``); the
server may then answer a ``tools/call`` with a task,
``{"resultType": "task", "taskId", "status": "working", ...}``, instead of
the tool's result. The client polls ``tasks/get``, which inlines the tool's
result once the task is ``completed``, and may send ``tasks/cancel``;
``tasks/update`` answers input a task asks for (ours never ask). SEP-2663
has no ``tasks/result`` nor ``tasks/list`` (the 2025-11-25 draft had them):
those are "method not found", as is every ``tasks/*`` on an older protocol.

The SDK (``mcp`` 2.3) serves extensions (``mcp.server.extension``): this
one adds the three methods and wraps ``tools/call``. The server decides
which calls become tasks: ``execute_code`` from a declaring client starts as
a background execution, and one still running after ``INLINE_WAIT`` seconds
is answered with its task; a quick one is answered as ever.

A task's id is ``<session>/<execution id>``: nothing is kept here, so a task
lives as long as its execution does (a session keeps every execution not
yet ended and its last finished ones), their caps are the tasks' caps, and
the door decides what is found: a tenant finds only its own.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.extension import Extension, MethodBinding
from mcp.server.mcpserver import require_client_extension
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import MCP_NAME_HEADER, decode_header_value
from mcp.types import CallToolRequestParams, CallToolResult, RequestParams, TextContent
from mcp_types.jsonrpc import HEADER_MISMATCH, INVALID_PARAMS
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import Field

from .._execution._models import ExecutionResult
from ._executions import ExecutionView, started
from ._sessions import SessionError

if TYPE_CHECKING:
    from ._doors import Door

__all__ = ["IDENTIFIER", "INLINE_WAIT", "POLL_MS", "ExecutionTasks", "TaskOffer", "task_offer"]

IDENTIFIER = "io.modelcontextprotocol/tasks"
INLINE_WAIT = 1.0  # seconds an execution may take and still be answered without a task
POLL_MS = 1000  # the poll interval suggested to clients
TASK_TOOLS = frozenset({"execute_code"})
# An offset past any execution's end: its state without its outputs, which tasks/get never shows.
_STATE_ONLY = 2**62
_VERSIONS = frozenset(MODERN_PROTOCOL_VERSIONS)

Answer = Callable[[str, ExecutionResult], Awaitable[CallToolResult]]


class TaskParams(RequestParams):
    """``tasks/get`` and ``tasks/cancel``: the task's id."""

    task_id: str = Field(alias="taskId", max_length=200)


class UpdateParams(TaskParams):
    """``tasks/update``: responses to a task's input requests (ours make none)."""

    input_responses: dict[str, Any] = Field(alias="inputResponses", default_factory=dict)


@dataclass
class TaskOffer:
    """What a ``tools/call`` that may become a task hands back: the execution it started, if any.

    ``ExecutionTasks`` makes one for each call of a declaring client and
    ``execute_code`` fills it in; it is passed through a context variable
    because the SDK calls the tool itself, with the client's arguments.
    """

    started: tuple[str, dict[str, Any]] | None = None

    async def run(
        self, sessions: Door, answer: Answer, session: str, info: dict[str, Any]
    ) -> CallToolResult:
        """``execute_code``'s answer once ``info``'s execution has started in ``session``.

        Its result, as ever, if it ends within ``INLINE_WAIT``; else the task is
        taken (what the tool returns then is not sent: the task is).
        """
        try:
            view = await sessions.execution(session, info["id"], INLINE_WAIT, _STATE_ONLY)
        except SessionError as exc:
            raise ToolError(str(exc)) from exc
        if view.result is not None:
            return await answer(session, view.result)
        if view.error is not None:
            raise ToolError(view.error)  # as the call would have, run in the foreground
        self.started = (session, view.info)
        return started(session, view.info)


_OFFER: ContextVar[TaskOffer | None] = ContextVar("kernelexec_task_offer", default=None)


def task_offer() -> TaskOffer | None:
    """The offer of the ``tools/call`` being served, if its client takes tasks."""
    return _OFFER.get()


class ExecutionTasks(Extension):
    """The tasks extension over a door's background executions.

    Args:
        sessions: the door the tools use.
        answer: turns a result into what ``execute_code`` returns, so a
            completed task's result is the call's own.
    """

    identifier = IDENTIFIER

    def __init__(self, sessions: Door, answer: Answer) -> None:
        self._sessions = sessions
        self._answer = answer

    def methods(self) -> Sequence[MethodBinding]:
        return [
            MethodBinding("tasks/get", TaskParams, self._get, _VERSIONS),
            MethodBinding("tasks/update", UpdateParams, self._update, _VERSIONS),
            MethodBinding("tasks/cancel", TaskParams, self._cancel, _VERSIONS),
        ]

    async def intercept_tool_call(
        self,
        params: CallToolRequestParams,
        ctx: ServerRequestContext[Any, Any],
        call_next: CallNext,
    ) -> HandlerResult:
        # SEP-2663: a task only for a client that declared the extension on this very request.
        if params.name not in TASK_TOOLS or not _declared(ctx):
            return await call_next(ctx)
        offer = TaskOffer()
        token = _OFFER.set(offer)
        try:
            result = await call_next(ctx)
        finally:
            _OFFER.reset(token)
        if offer.started is None:
            return result
        session, info = offer.started
        return {"resultType": "task"} | _task(
            _task_id(session, info["id"]), info, "working", _working(info)
        )

    async def _get(self, ctx: ServerRequestContext[Any, Any], params: TaskParams) -> HandlerResult:
        session, view = await self._find(ctx, params.task_id)
        return await self._detailed(params.task_id, session, view)

    async def _update(
        self, ctx: ServerRequestContext[Any, Any], params: UpdateParams
    ) -> HandlerResult:
        await self._find(ctx, params.task_id)
        return {}  # no execution asks for input: every response is for no request, so ignored

    async def _cancel(
        self, ctx: ServerRequestContext[Any, Any], params: TaskParams
    ) -> HandlerResult:
        session, view = await self._find(ctx, params.task_id)
        try:
            # As cancel_execution: the kernel is interrupted, its state kept.
            await self._sessions.cancel(session, view.info["id"])
        except SessionError as exc:
            raise _not_found(params.task_id, str(exc)) from None
        return {}

    async def _find(
        self, ctx: ServerRequestContext[Any, Any], task_id: str
    ) -> tuple[str, ExecutionView]:
        """The task's session and execution; a JSON-RPC error if the caller may not have it."""
        require_client_extension(ctx, IDENTIFIER)  # SEP-2663: -32021 for a client that did not
        _check_route(ctx, task_id)
        session, _, execution_id = task_id.partition("/")
        if not session or not execution_id:
            raise _not_found(task_id, "a task id is <session>/<execution id>")
        try:
            return session, await self._sessions.execution(session, execution_id, 0, _STATE_ONLY)
        except SessionError as exc:
            raise _not_found(task_id, str(exc)) from None

    async def _detailed(self, task_id: str, session: str, view: ExecutionView) -> dict[str, Any]:
        """``tasks/get``'s answer: the task, with the tool's result once it has one."""
        info = view.info
        if view.error is not None:
            # It could not run: in the foreground that is the tool's error, so a
            # completed task with it ("failed" is only for JSON-RPC errors).
            text = f"[kernelexec] execution {info['id']} could not run: {view.error}\n"
            failed = CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)
            return _task(task_id, info, "completed", "could not run") | {"result": _wire(failed)}
        if view.result is None:
            return _task(task_id, info, "working", _working(info))
        if view.result.status == "cancelled":
            return _task(task_id, info, "cancelled", "cancelled; the session's state is kept")
        result = await self._answer(session, view.result)
        return _task(task_id, info, "completed", view.result.status) | {"result": _wire(result)}


def _declared(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Whether this request's client declared the extension (only a 2026-07-28 request can)."""
    capabilities = ctx.session.client_capabilities
    extensions = capabilities.extensions if capabilities is not None else None
    return ctx.protocol_version in _VERSIONS and extensions is not None and IDENTIFIER in extensions


def _check_route(ctx: ServerRequestContext[Any, Any], task_id: str) -> None:
    """Over HTTP, SEP-2663 has ``Mcp-Name`` carry the task id; the two must agree.

    The SDK checks the header only for its own methods (``tools/call``'s name).
    """
    headers = getattr(ctx.request, "headers", None)
    header = None if headers is None else headers.get(MCP_NAME_HEADER)
    if header is not None and decode_header_value(header) != task_id:
        raise MCPError(
            code=HEADER_MISMATCH,
            message=f"the {MCP_NAME_HEADER} header does not match the request's taskId",
        )


def _task_id(session: str, execution_id: str) -> str:
    # Session names have no "/" (``check_name``), execution ids are hex.
    return f"{session}/{execution_id}"


def _not_found(task_id: str, why: str) -> MCPError:
    return MCPError(
        code=INVALID_PARAMS, message=f"Failed to retrieve task {task_id[:200]!r}: {why}"
    )


def _working(info: dict[str, Any]) -> str:
    events = info.get("events", 0)
    return f"{info['state']}; {events} output{'' if events == 1 else 's'} so far"


def _task(task_id: str, info: dict[str, Any], status: str, message: str) -> dict[str, Any]:
    """A ``Task`` on the wire."""
    return {
        "taskId": task_id,
        "status": status,
        "statusMessage": message,
        "createdAt": info["created"],
        "lastUpdatedAt": info.get("finished") or info.get("started") or info["created"],
        # No clock ends a task: it lasts as long as the session keeps its execution.
        "ttlMs": None,
        "pollIntervalMs": POLL_MS,
    }


def _wire(result: CallToolResult) -> dict[str, Any]:
    wire: dict[str, Any] = result.model_dump(by_alias=True, mode="json", exclude_none=True)
    return wire
