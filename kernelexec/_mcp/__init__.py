"""``kernelexec mcp``: an MCP server (official ``mcp`` SDK) with its own sessions.

Needs ``pip install 'kernelexec[mcp]'``; nothing else in kernelexec imports it.
"""

from ._server import build_server
from ._sessions import McpConfig

__all__ = ["McpConfig", "build_server"]
