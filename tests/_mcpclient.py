"""An MCP client for the tests: `kernelexec mcp` over stdio, and its text answers."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.types import CallToolResult, TextContent


@asynccontextmanager
async def stdio_mcp(
    work_root: Path, *options: str, cwd: Path | None = None
) -> AsyncIterator[ClientSession]:
    """A started ``kernelexec mcp`` over stdio; its stderr goes beside ``work_root``.

    ``cwd``: where it runs, with this process's environment (so it imports
    the same kernelexec from anywhere); by default here, with the SDK's own.
    """
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "kernelexec", "mcp", "--work-root", str(work_root), *options],
        cwd=cwd,
        env=None if cwd is None else dict(os.environ),
    )
    with (work_root.parent / "mcp-stderr.log").open("w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write) as client:
                await client.initialize()
                yield client


def texts(result: CallToolResult) -> str:
    return "".join(c.text for c in result.content if isinstance(c, TextContent))
