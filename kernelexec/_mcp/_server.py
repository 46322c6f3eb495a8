"""The MCP tools, on the official ``mcp`` SDK (2.x): code execution for any MCP client."""

from __future__ import annotations

import base64
import codecs
import json
import mimetypes
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from pathlib import PurePosixPath
from typing import Any, TypeVar

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from mcp.shared.uri_template import UriTemplate
from mcp.types import CallToolResult, ContentBlock, ImageContent, ResourceLink, TextContent

from .._client._base import session_options
from .._execution._models import ExecutionResult
from .._state._fork import ForkMethod
from ..integrations._blocks import one_per_output
from ._doors import Door
from ._executions import register, started
from ._files import FileRefused
from ._local_door import LocalDoor
from ._progress import with_progress
from ._sessions import McpConfig, SessionError
from ._tasks import ExecutionTasks, task_offer

__all__ = ["build_server"]

_INLINE_IMAGES = {".png": "image/png", ".jpg": "image/jpeg", ".gif": "image/gif"}
_MAX_TEXT_FILE = 100_000  # characters of a text file read_file returns inline
_URI = "kernelexec://sessions/{session}/files/{+path}"
_URI_TEMPLATE = UriTemplate.parse(_URI)
T = TypeVar("T")

_INSTRUCTIONS = """\
Runs code in stateful Jupyter kernels: variables, imports and files persist between
execute_code calls of one session. Python by default; language="bash" runs shell in the
same kernel and directory. Plots and images come back as images; other saved outputs
(HTML, SVG, PDF) as resource links. Each session has its own work dir (the kernel's cwd);
list_files and read_file show it, get_notebook returns the transcript. create_session
makes a session with options (an interpreter, a venv with packages, output limits, a
container), as far as the server's operator allows them. fork_session copies a session's
live state into a new one (try two approaches from one point); checkpoint_session saves
its variables and files, and restore_session makes a session from that checkpoint.
Long runs: execute_code(background=true) returns an execution id at once; get_execution
gives its outputs so far (from an offset) or its result, cancel_execution stops it."""


def build_server(config: McpConfig, door: Door | None = None) -> MCPServer[Any]:
    """The MCP server with kernelexec's tools; its sessions close when it stops.

    Args:
        config: limits and defaults (``work_root`` etc. matter only to local sessions).
        door: where the sessions live; default this process (``LocalDoor``).
            A ``RemoteDoor`` serves the sessions of a ``kernelexec serve``,
            which stay when this server stops.
    """
    sessions: Door = door or LocalDoor(config)

    @asynccontextmanager
    async def lifespan(_: MCPServer[Any]) -> AsyncIterator[None]:
        try:
            yield None
        finally:
            await sessions.close()

    async def answer(session: str, result: ExecutionResult) -> CallToolResult:
        """What execute_code returns for a result (get_execution's and tasks/get's, once ended)."""
        blocks: list[ContentBlock] = [TextContent(type="text", text=_result_text(result))]
        for path in one_per_output(result.files):
            blocks.append(await _file_block(sessions, path, session, config))
        summary = {k: v for k, v in result.to_dict().items() if k != "outputs"}
        return CallToolResult(content=blocks, structured_content=summary, is_error=not result.ok)

    server: MCPServer[Any] = MCPServer(
        "kernelexec",
        instructions=_INSTRUCTIONS,
        lifespan=lifespan,
        log_level="WARNING",
        extensions=[ExecutionTasks(sessions, answer)],
    )

    @server.tool()
    async def execute_code(
        code: str,
        language: str = "python",
        session: str = "default",
        timeout: float | None = None,
        background: bool = False,
        ctx: Context | None = None,
    ) -> CallToolResult:
        """Runs code in a stateful kernel and returns its output, errors and images.

        Args:
            code: the code to run.
            language: "python" (default) or "bash" (shell in the same kernel and cwd).
            session: the session's name; made on first use, state kept between calls.
            timeout: seconds before the kernel is interrupted (state is kept).
            background: return an execution id at once and let the code run on;
                get_execution gives its outputs and result, cancel_execution stops it.
        """
        if background:
            return started(session, await _tool(sessions.start(session, code, language, timeout)))
        if (offer := task_offer()) is not None:  # the client takes tasks: a long run is one
            info = await _tool(sessions.start(session, code, language, timeout))
            return await offer.run(sessions, answer, session, info)
        running = _tool(sessions.execute(session, code, language, timeout))
        result = await (with_progress(ctx, running, timeout) if ctx is not None else running)
        return await answer(session, result)

    register(server, sessions, answer, config.max_timeout)

    @server.tool()
    async def create_session(
        session: str,
        timeout: float | None = None,
        python: str | None = None,
        venv: str | None = None,
        packages: list[str] | None = None,
        python_version: str | None = None,
        preload: str | None = None,
        limits: dict[str, int] | None = None,
        docker: dict[str, Any] | None = None,
        gateway: str | None = None,
        sandbox: dict[str, Any] | None = None,
        ray: dict[str, Any] | None = None,
        checkpoint_every: float | None = None,
    ) -> str:
        """Makes a session with options and starts its kernel; execute_code then uses it.

        Options the server's operator has not allowed are refused, naming the flag.

        Args:
            session: the new session's name.
            timeout: default seconds per execution.
            python: an interpreter for the kernel (one the operator allows).
            venv: a venv's name, made (or reused) with ipykernel and the packages.
            packages: requirements to install in the session's venv, e.g. ["rich"].
            python_version: the venv's Python version, e.g. "3.12".
            preload: code the kernel runs first (and after every restart).
            limits: output caps, e.g. {"max_text_chars": 5000}; at most the server's.
            docker: run the kernel in a container, e.g. {"memory": "512m", "cpus": 1}.
            gateway: a Jupyter gateway's URL to run the kernel on.
            sandbox: the local kernel's containment, within the operator's, e.g.
                {"network": true} (--allow-network) or {"memory": 536870912}.
            ray: what the session holds on the Ray cluster (--ray), e.g.
                {"num_cpus": 1, "labels": {"zone": "a"}}; within the operator's caps.
            checkpoint_every: seconds between recovery checkpoints of the session's
                variables: a kernel that dies is replaced at the next execution by
                one holding them.
        """
        options = session_options(
            python=python,
            venv=venv,
            packages=packages,
            python_version=python_version,
            preload=preload,
            limits=limits,
            docker=docker,
            gateway=gateway,
            sandbox=sandbox,
            ray=ray,
            checkpoint_every=checkpoint_every,
        )
        info = await _tool(sessions.create(session, options, timeout))
        return json.dumps(info, indent=1)

    @server.tool()
    async def list_sessions() -> str:
        """Lists the sessions: name (id), state, executions, options."""
        return json.dumps(await _tool(sessions.infos()), indent=1)

    @server.tool()
    async def restart_session(session: str = "default") -> str:
        """Restarts a session's kernel: all variables and imports are gone, files stay."""
        await _tool(sessions.restart(session))
        return f"Session {session!r} restarted: a fresh kernel, files kept."

    @server.tool()
    async def interrupt_session(session: str = "default") -> str:
        """Interrupts what a session is running (KeyboardInterrupt); its state is kept."""
        await _tool(sessions.interrupt(session))
        return f"Session {session!r} interrupted."

    @server.tool()
    async def fork_session(
        session: str = "default", new_name: str | None = None, method: ForkMethod = "auto"
    ) -> str:
        """Forks a session: a new session whose kernel has a copy of its live state.

        Every variable, import and definition, and a copy of the work dir's
        files; the two sessions diverge from then on. Use it to try two
        approaches from the same point. Waits for a running execution to end.
        fork_report says how it was made and what did not come across.

        Args:
            session: the session to fork.
            new_name: the new session's name; default "<session>-fork-N".
            method: "auto" forks the kernel's process unless it holds what a
                fork breaks (a GPU in use, a live OpenMP pool), else
                checkpoints and restores; "process" or "checkpoint" to choose.
        """
        return json.dumps(await _tool(sessions.fork(session, new_name, method)), indent=1)

    @server.tool()
    async def checkpoint_session(session: str = "default") -> str:
        """Saves a session's variables, imports and files as a checkpoint; returns its id.

        Variables that cannot be saved (open files, sockets, generators) are
        listed with the reason. restore_session makes a session from the id.

        Args:
            session: the session to checkpoint.
        """
        return json.dumps(await _tool(sessions.checkpoint(session)), indent=1)

    @server.tool()
    async def restore_session(checkpoint: str, name: str | None = None) -> str:
        """Makes a new session from a checkpoint: its variables, imports and files come back.

        Args:
            checkpoint: the id checkpoint_session returned.
            name: the new session's name; default "restored-<id>-N" (or its id on a server).
        """
        return json.dumps(await _tool(sessions.restore(checkpoint, name)), indent=1)

    @server.tool()
    async def list_variables(session: str = "default") -> str:
        """Lists a session's variables without running code, even while code runs.

        Each: name, type, shape or length, dtype, approximate bytes and a short
        repr; "unavailable" says why an object could not describe itself.
        """
        return json.dumps(await _tool(sessions.variables(session)), indent=1)

    @server.tool()
    async def inspect_variable(name: str, session: str = "default") -> str:
        """Describes one variable in detail without running code, even while code runs.

        A DataFrame's columns, dtypes and first rows; anything else's longer
        repr, length and public attributes.

        Args:
            name: the variable's name, as list_variables gives it.
            session: the session's name.
        """
        found = await _tool(sessions.inspect(session, name))
        if found is None:
            raise ToolError(f"no variable {name[:100]!r} in session {session!r}; list_variables")
        return json.dumps(found, indent=1)

    @server.tool()
    async def list_files(session: str = "default") -> str:
        """Lists the files in a session's work dir: path, size in bytes, modified time."""
        return json.dumps(await _tool(sessions.files(session)), indent=1)

    @server.tool()
    async def read_file(path: str, session: str = "default") -> list[ContentBlock]:
        """Reads a file of a session's work dir: text as text, images as images.

        Args:
            path: relative to the work dir, e.g. "outputs/0001-1.png".
            session: the session's name.
        """
        if PurePosixPath(path).suffix.lower() in _INLINE_IMAGES:
            await _tool(sessions.read(session, path, 0))  # a refusal is the tool's error
            return [await _file_block(sessions, path, session, config)]
        # Never the whole file: the first characters (at most 4 bytes each) will do.
        head, size = await _tool(sessions.read(session, path, 4 * _MAX_TEXT_FILE))
        try:
            text = codecs.getincrementaldecoder("utf-8")().decode(head, final=len(head) == size)
        except UnicodeDecodeError:
            return [
                TextContent(type="text", text=f"{path} is binary; here is a link."),
                _link(path, session, size),
            ]
        if len(text) <= _MAX_TEXT_FILE and len(head) == size:
            return [TextContent(type="text", text=text)]
        link = _link(path, session, size)
        where = await _tool(sessions.where(session, path))
        return [
            TextContent(
                type="text",
                text=f"{text[:_MAX_TEXT_FILE]}\n[... {path} has {size:,} bytes; its first "
                f"{min(len(text), _MAX_TEXT_FILE):,} characters are shown. The whole file: "
                f"read the resource {link.uri} (up to {config.max_file_bytes:,} bytes), or "
                f"{where}]",
            ),
            link,
        ]

    @server.tool()
    async def get_notebook(session: str = "default") -> list[ContentBlock]:
        """Returns a session's transcript: every execution and its outputs, as a notebook."""
        body, relative = await _tool(sessions.notebook(session))
        if body is None:
            return [TextContent(type="text", text="Nothing has run in this session yet.")]
        link = _link(relative, session, len(body))
        if len(body) > config.inline_limit:
            note = f"The notebook ({relative}) is large: read it through the link."
            return [TextContent(type="text", text=note), link]
        return [TextContent(type="text", text=body.decode("utf-8", "replace")), link]

    @server.resource(_URI, name="session_file", description="A file in a session's work dir")
    async def session_file(session: str, path: str) -> bytes:
        try:
            # One byte over: a file that grew since its size was read shows it.
            data, size = await sessions.read(session, path, config.max_file_bytes + 1, whole=True)
            if size > config.max_file_bytes or len(data) > config.max_file_bytes:
                where = await sessions.where(session, path)
                raise ResourceError(
                    f"{path} is {max(size, len(data)):,} bytes, over the "
                    f"{config.max_file_bytes:,} that kernelexec mcp sends (--max-file-mb); "
                    f"{where}"
                )
        except (SessionError, FileRefused) as exc:
            raise ResourceError(str(exc)) from exc
        return data

    return server


async def _tool(work: Awaitable[T]) -> T:
    """What ``work`` gives; a refusal becomes the tool's error, its message kept."""
    try:
        return await work
    except (SessionError, FileRefused) as exc:
        raise ToolError(str(exc)) from exc


def _result_text(result: ExecutionResult) -> str:
    text = result.text or "(no output)\n"
    if not result.ok:
        text += f"[kernelexec] status: {result.status}\n"
    return text


async def _file_block(
    sessions: Door, relative: str, session: str, config: McpConfig
) -> ContentBlock:
    """An image inline when small, else a link the client can read.

    Read through a handle with no link followed: the session's code may have
    swapped the file for a link since it was saved.
    """
    mime = _INLINE_IMAGES.get(PurePosixPath(relative).suffix.lower())
    try:
        head, size = await sessions.read(session, relative, config.inline_limit + 1)
    except (SessionError, FileRefused) as exc:
        return TextContent(type="text", text=f"[kernelexec] {relative}: {exc}")
    if mime is not None and len(head) == size <= config.inline_limit:
        data = base64.b64encode(head).decode("ascii")
        return ImageContent(type="image", data=data, mime_type=mime)
    return _link(relative, session, size)


def _link(relative: str, session: str, size: int) -> ResourceLink:
    mime = mimetypes.guess_type(relative)[0] or "application/octet-stream"
    return ResourceLink(
        type="resource_link",
        uri=_URI_TEMPLATE.expand({"session": session, "path": relative}),
        name=relative,
        mime_type=mime,
        size=size,
    )
