"""The ``kernelexec mcp`` command: an MCP server over stdio or streamable HTTP."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["add_commands"]


def add_commands(commands: Any) -> None:
    """Adds ``mcp`` to ``kernelexec``'s subparsers."""
    mcp = commands.add_parser(
        "mcp",
        help="serve sessions to MCP clients (stdio, or --http)",
        description="Serves stateful code execution to an MCP client: over stdin/stdout "
        "by default (what a client's config launches), or over streamable HTTP on "
        "127.0.0.1 with --http. Tools: execute_code, list_sessions, restart_session, "
        "interrupt_session, list_files, read_file, get_notebook. Needs "
        "'pip install kernelexec[mcp]'.",
    )
    mcp.add_argument(
        "--http",
        action="store_true",
        help="serve streamable HTTP at http://127.0.0.1:PORT/mcp instead of stdio",
    )
    mcp.add_argument("--port", type=int, default=8766, help="with --http (default 8766)")
    mcp.add_argument(
        "--work-root",
        type=Path,
        help="sessions' work dirs go in "
        "<work-root>/<session>/ (default: a new temp dir, named on stderr)",
    )
    mcp.add_argument(
        "--timeout", type=float, default=60.0, help="default seconds per execution (default 60)"
    )
    mcp.add_argument(
        "--max-timeout",
        type=float,
        default=600.0,
        help="the longest timeout a call may ask for (default 600)",
    )
    mcp.add_argument("--max-sessions", type=int, default=8, help="sessions at once (default 8)")
    mcp.add_argument("--kernel-name", default="python3", help="kernelspec (default python3)")
    mcp.set_defaults(handler=_mcp)


def _mcp(args: argparse.Namespace) -> int:
    try:
        from ._mcp import McpConfig, build_server
    except ImportError as exc:
        print(
            f"kernelexec: the MCP server needs the mcp SDK: pip install 'kernelexec[mcp]' ({exc})",
            file=sys.stderr,
        )
        return 2
    if not args.timeout > 0 or not args.max_timeout > 0 or args.max_sessions < 1:
        print(
            "kernelexec: --timeout, --max-timeout and --max-sessions must be positive",
            file=sys.stderr,
        )
        return 2
    work_root = args.work_root or Path(tempfile.mkdtemp(prefix="kernelexec-mcp-"))
    config = McpConfig(
        work_root=work_root.resolve(),
        timeout=args.timeout,
        max_timeout=args.max_timeout,
        max_sessions=args.max_sessions,
        kernel_name=args.kernel_name,
    )
    server = build_server(config)
    # stdout is the protocol's under stdio: everything for people goes to stderr.
    print(f"kernelexec mcp: work root {config.work_root}", file=sys.stderr, flush=True)
    if args.http:
        print(
            f"kernelexec mcp: serving http://127.0.0.1:{args.port}/mcp", file=sys.stderr, flush=True
        )
        server.run("streamable-http", host="127.0.0.1", port=args.port)
    else:
        server.run("stdio")
    return 0
