"""The MCP tools, on the official ``mcp`` SDK (2.x): code execution for any MCP client."""

from __future__ import annotations

import base64
import codecs
import json
import mimetypes
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from mcp.shared.uri_template import UriTemplate
from mcp.types import CallToolResult, ContentBlock, ImageContent, ResourceLink, TextContent

from .._models import ExecutionResult
from .._session import AsyncSession
from ..integrations._blocks import one_per_output
from ._files import FileRefused, confined, files_in, read_head, read_notebook
from ._sessions import McpConfig, SessionError, Sessions

__all__ = ["build_server"]

_INLINE_IMAGES = {".png": "image/png", ".jpg": "image/jpeg", ".gif": "image/gif"}
_MAX_TEXT_FILE = 100_000  # characters of a text file read_file returns inline
_URI = "kernelexec://sessions/{session}/files/{+path}"
_URI_TEMPLATE = UriTemplate.parse(_URI)

_INSTRUCTIONS = """\
Runs code in stateful Jupyter kernels: variables, imports and files persist between
execute_code calls of one session. Python by default; language="bash" runs shell in the
same kernel and directory. Plots and images come back as images; other saved outputs
(HTML, SVG, PDF) as resource links. Each session has its own work dir (the kernel's cwd);
list_files and read_file show it, get_notebook returns the transcript."""


def build_server(config: McpConfig) -> MCPServer[Any]:
    """The MCP server with kernelexec's tools; its sessions close when it stops."""
    sessions = Sessions(config)

    @asynccontextmanager
    async def lifespan(_: MCPServer[Any]) -> AsyncIterator[None]:
        try:
            yield None
        finally:
            await sessions.close()

    server: MCPServer[Any] = MCPServer(
        "kernelexec", instructions=_INSTRUCTIONS, lifespan=lifespan, log_level="WARNING"
    )

    @server.tool()
    async def execute_code(
        code: str,
        language: str = "python",
        session: str = "default",
        timeout: float | None = None,
    ) -> CallToolResult:
        """Runs code in a stateful kernel and returns its output, errors and images.

        Args:
            code: the code to run.
            language: "python" (default) or "bash" (shell in the same kernel and cwd).
            session: the session's name; made on first use, state kept between calls.
            timeout: seconds before the kernel is interrupted (state is kept).
        """
        seconds = min(timeout or config.timeout, config.max_timeout)
        if not seconds > 0:
            raise ToolError("timeout must be a positive number of seconds")
        _session(sessions, session, create=True)
        async with sessions.executing(session) as work:
            result = await work.execute(code, language=language, timeout=seconds)
        blocks: list[ContentBlock] = [TextContent(type="text", text=_result_text(result))]
        for path in one_per_output(result.files):
            blocks.append(_file_block(work.work_dir, path, session, config))
        summary = {k: v for k, v in result.to_dict().items() if k != "outputs"}
        return CallToolResult(content=blocks, structured_content=summary, is_error=not result.ok)

    @server.tool()
    async def list_sessions() -> str:
        """Lists the sessions: name (id), state, executions, work dir."""
        return json.dumps(sessions.infos(), indent=1)

    @server.tool()
    async def restart_session(session: str = "default") -> str:
        """Restarts a session's kernel: all variables and imports are gone, files stay."""
        await _session(sessions, session).restart()
        return f"Session {session!r} restarted: a fresh kernel, files kept."

    @server.tool()
    async def interrupt_session(session: str = "default") -> str:
        """Interrupts what a session is running (KeyboardInterrupt); its state is kept."""
        await _session(sessions, session).interrupt()
        return f"Session {session!r} interrupted."

    @server.tool()
    async def list_files(session: str = "default") -> str:
        """Lists the files in a session's work dir: path, size in bytes, modified time."""
        work_dir = _session(sessions, session).work_dir
        try:
            files, cut, skipped = await files_in(work_dir)
        except FileRefused as exc:
            raise ToolError(str(exc)) from exc
        listed = [f.to_dict() for f in files]
        return json.dumps(
            {"work_dir": str(work_dir), "files": listed, "truncated": cut, "skipped": skipped},
            indent=1,
        )

    @server.tool()
    async def read_file(path: str, session: str = "default") -> list[ContentBlock]:
        """Reads a file of a session's work dir: text as text, images as images.

        Args:
            path: relative to the work dir, e.g. "outputs/0001-1.png".
            session: the session's name.
        """
        work_dir = _session(sessions, session).work_dir
        target = _confined(work_dir, path)  # named in messages; read through a handle
        if target.suffix.lower() in _INLINE_IMAGES:
            return [_file_block(work_dir, path, session, config)]
        # Never the whole file: the first characters (at most 4 bytes each) will do.
        try:
            head, size = read_head(work_dir, path, 4 * _MAX_TEXT_FILE)
        except FileRefused as exc:
            raise ToolError(str(exc)) from exc
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
        return [
            TextContent(
                type="text",
                text=f"{text[:_MAX_TEXT_FILE]}\n[... {path} has {size:,} bytes; its first "
                f"{min(len(text), _MAX_TEXT_FILE):,} characters are shown. The whole file: "
                f"read the resource {link.uri} (up to {config.max_file_bytes:,} bytes), or "
                f"open {target} on the MCP server's machine]",
            ),
            link,
        ]

    @server.tool()
    async def get_notebook(session: str = "default") -> list[ContentBlock]:
        """Returns a session's transcript: every execution and its outputs, as a notebook."""
        work = _session(sessions, session)
        await work.flush()
        relative = work.notebook_path.relative_to(work.work_dir).as_posix()
        try:
            # Read whole, through a handle: never what a link at its name points to.
            body = read_notebook(work.work_dir, work.notebook_path)
        except FileRefused as exc:
            raise ToolError(str(exc)) from exc
        if body is None:
            return [TextContent(type="text", text="Nothing has run in this session yet.")]
        link = _link(relative, session, len(body))
        if len(body) > config.inline_limit:
            note = f"The notebook ({work.notebook_path}) is large: read it through the link."
            return [TextContent(type="text", text=note), link]
        return [TextContent(type="text", text=body.decode("utf-8", "replace")), link]

    @server.resource(_URI, name="session_file", description="A file in a session's work dir")
    def session_file(session: str, path: str) -> bytes:
        try:
            work_dir = sessions.get(session).work_dir
            target = confined(work_dir, path)  # named in messages; read through a handle
            # One byte over: a file that grew since its size was read shows it.
            data, size = read_head(work_dir, path, config.max_file_bytes + 1, whole=True)
        except (SessionError, FileRefused) as exc:
            raise ResourceError(str(exc)) from exc
        if size > config.max_file_bytes or len(data) > config.max_file_bytes:
            raise ResourceError(
                f"{path} is {max(size, len(data)):,} bytes, over the "
                f"{config.max_file_bytes:,} that kernelexec mcp sends (--max-file-mb); "
                f"open {target} on the MCP server's machine"
            )
        return data

    return server


def _session(sessions: Sessions, name: str, *, create: bool = False) -> AsyncSession:
    try:
        return sessions.get(name, create=create)
    except SessionError as exc:
        raise ToolError(str(exc)) from exc


def _confined(work_dir: Path, path: str) -> Path:
    try:
        return confined(work_dir, path)
    except FileRefused as exc:
        raise ToolError(str(exc)) from exc


def _result_text(result: ExecutionResult) -> str:
    text = result.text or "(no output)\n"
    if not result.ok:
        text += f"[kernelexec] status: {result.status}\n"
    return text


def _file_block(work_dir: Path, relative: str, session: str, config: McpConfig) -> ContentBlock:
    """An image inline when small, else a link the client can read.

    Read through a handle with no link followed: the session's code may have
    swapped the file for a link since it was saved.
    """
    mime = _INLINE_IMAGES.get(Path(relative).suffix.lower())
    try:
        head, size = read_head(work_dir, relative, config.inline_limit + 1)
    except FileRefused as exc:
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
