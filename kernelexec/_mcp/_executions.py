"""Background executions for agents: start one, let the tool call end, come back by id.

``execute_code(..., background=true)`` answers at once with the execution's
id; ``get_execution`` gives its state and the outputs since an offset (or,
once it has ended, the result in the shape ``execute_code`` returns), and
may wait for the end a while; ``cancel_execution`` stops it. Both doors
serve them: the MCP server's own sessions, and a ``kernelexec serve``'s
(where an execution outlives this MCP server too).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent

from .._execution._background import ExecutionEvent
from .._execution._models import ExecutionResult
from ._progress import with_progress
from ._sessions import SessionError

if TYPE_CHECKING:
    from ._doors import Door

__all__ = ["MAX_TEXT", "ExecutionView", "register", "started"]

MAX_TEXT = 20_000  # characters of outputs one get_execution returns; the rest from next_offset
Answer = Callable[[str, ExecutionResult], Awaitable[CallToolResult]]


@dataclass(frozen=True)
class ExecutionView:
    """What a door says about one execution.

    Attributes:
        info: the execution as ``GET /sessions/{id}/executions/{eid}`` describes it
            (id, state, status, code, created, started, finished, events).
        events: its events from the offset asked for, so far.
        result: the result once done.
        error: why it could not run (state "failed").
    """

    info: dict[str, Any]
    events: list[ExecutionEvent]
    result: ExecutionResult | None = None
    error: str | None = None


def started(session: str, info: dict[str, Any]) -> CallToolResult:
    """The answer to ``execute_code(background=true)``: the id, and what to do with it."""
    text = (
        f"Started execution {info['id']} in session {session!r} ({info['state']}); it runs on "
        "after this call. get_execution with this execution_id gives its outputs so far "
        "(wait_seconds to wait for the end); cancel_execution stops it.\n"
    )
    summary = {"execution_id": info["id"], "session": session, "state": info["state"]}
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=summary)


def _progress_text(view: ExecutionView, offset: int) -> tuple[str, int]:
    """The outputs of ``view.events`` as text, at most ``MAX_TEXT`` characters; the next offset."""
    parts: list[str] = []
    size, next_offset = 0, offset
    for event in view.events:
        if event.kind == "dropped":
            piece = (
                f"[kernelexec] {event.data.get('outputs', 0)} earlier outputs were let go "
                f"(about {event.data.get('chars', 0):,} characters); the result keeps them\n"
            )
        else:
            output = event.output
            piece = output.text if output is not None else ""
        if parts and size + len(piece) > MAX_TEXT:
            break
        parts.append(piece[:MAX_TEXT])
        size += len(piece)
        next_offset = event.offset + 1
    return "".join(parts), max(next_offset, offset)


def _running(session: str, view: ExecutionView, offset: int) -> CallToolResult:
    text, next_offset = _progress_text(view, offset)
    execution_id, state = view.info["id"], view.info["state"]
    if text and not text.endswith("\n"):
        text += "\n"  # an output mid-line: the note starts on its own
    text += (
        f"[kernelexec] execution {execution_id} is {state}; get_execution with "
        f"offset={next_offset} gives the outputs after these (wait_seconds waits for the "
        "end), cancel_execution stops it.\n"
    )
    summary = {
        "execution_id": execution_id,
        "session": session,
        "state": state,
        "next_offset": next_offset,
        "events": view.info.get("events", next_offset),
    }
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=summary)


async def _view_answer(
    answer: Answer, session: str, view: ExecutionView, offset: int
) -> CallToolResult:
    if view.error is not None:
        text = f"[kernelexec] execution {view.info['id']} could not run: {view.error}\n"
        summary = {"execution_id": view.info["id"], "session": session, "state": "failed"}
        return CallToolResult(
            content=[TextContent(type="text", text=text)],
            structured_content=summary,
            is_error=True,
        )
    if view.result is None:
        return _running(session, view, offset)
    done = await answer(session, view.result)
    extra = {"execution_id": view.info["id"], "session": session, "state": "done"}
    return done.model_copy(update={"structured_content": (done.structured_content or {}) | extra})


def register(server: MCPServer[Any], sessions: Door, answer: Answer, max_wait: float) -> None:
    """Adds ``get_execution`` and ``cancel_execution`` to ``server``.

    Args:
        answer: turns a result into what ``execute_code`` returns.
        max_wait: the longest ``wait_seconds`` (the server's --max-timeout).
    """

    @server.tool()
    async def get_execution(
        execution_id: str,
        session: str = "default",
        wait_seconds: float = 0,
        offset: int = 0,
        ctx: Context | None = None,
    ) -> CallToolResult:
        """A background execution's state and outputs; its full result once it has ended.

        Args:
            execution_id: the id execute_code(background=true) returned.
            session: the session it runs in.
            wait_seconds: wait up to this long for it to end before answering.
            offset: the first output wanted (the next_offset a previous call gave).
        """
        if not 0 <= wait_seconds <= max_wait or offset < 0:
            raise ToolError(
                f"wait_seconds must be from 0 to {max_wait:g} (--max-timeout) and offset 0 or more"
            )
        work = sessions.execution(session, execution_id, wait_seconds, offset)
        running = _tool(work)
        if ctx is not None and wait_seconds > 0:
            view = await with_progress(ctx, running, wait_seconds)
        else:
            view = await running
        return await _view_answer(answer, session, view, offset)

    @server.tool()
    async def cancel_execution(execution_id: str, session: str = "default") -> CallToolResult:
        """Stops a background execution (the kernel is interrupted; state is kept); its result.

        Args:
            execution_id: the id execute_code(background=true) returned.
            session: the session it runs in.
        """
        view = await _tool(sessions.cancel(session, execution_id))
        return await _view_answer(answer, session, view, 0)


async def _tool(work: Awaitable[ExecutionView]) -> ExecutionView:
    try:
        return await work
    except SessionError as exc:
        raise ToolError(str(exc)) from exc
