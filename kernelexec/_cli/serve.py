"""The ``kernelexec serve`` command: the HTTP execution server."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from .._environment import pool_size, preload, server_token
from .._exceptions import ConfigurationError
from ._startup import DEFAULT_PORTS, resolve_token, url, usable_work_root

__all__ = ["add_command"]


def add_command(commands: Any) -> None:
    """Adds ``serve`` to ``kernelexec``'s subparsers."""
    serve = commands.add_parser(
        "serve",
        help="serve sessions over HTTP",
        description="Serves sessions over an HTTP API (OpenAPI schema at /openapi.json). "
        "Every route but /health needs 'Authorization: Bearer <token>'. Stops cleanly, "
        "shutting every kernel down, on SIGTERM or Ctrl-C.",
        epilog="example:\n"
        "  kernelexec serve --work-root runs --pool-size 2   # prints its URL and token\n",
    )
    serve.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default 127.0.0.1; any other than loopback needs --token)",
    )
    serve.add_argument(
        "--port",
        default=DEFAULT_PORTS["serve"],
        help=f"default {DEFAULT_PORTS['serve']}; 0 picks a free one (the printed URL has it)",
    )
    serve.add_argument(
        "--token",
        default=server_token(),
        help="the bearer token clients must send (default: $KERNELEXEC_TOKEN, "
        "else a new one, printed)",
    )
    serve.add_argument(
        "--work-root",
        type=Path,
        help="sessions' work dirs go in "
        "<work-root>/<session id>/ (default: a new temp dir, printed)",
    )
    serve.add_argument(
        "--max-sessions",
        type=int,
        default=8,
        help="sessions at once (default 8); more get HTTP 429",
    )
    serve.add_argument(
        "--idle-timeout",
        type=float,
        default=3600.0,
        help="seconds idle before a session's kernel is shut down (default 3600; 0 never)",
    )
    serve.add_argument(
        "--max-timeout",
        type=float,
        default=600.0,
        help="the longest execution timeout a request may ask for (default 600 s)",
    )
    serve.add_argument(
        "--max-body-mb",
        type=float,
        default=64.0,
        help="largest request body, uploads included (default 64 MB)",
    )
    serve.add_argument(
        "--pool-size",
        type=int,
        default=None,
        help="kernels kept started for new sessions (default $KERNELEXEC_POOL_SIZE or 0)",
    )
    serve.add_argument(
        "--preload",
        default=None,
        help="code each kernel runs before its first execution, e.g. 'import pandas' "
        "(default $KERNELEXEC_PRELOAD)",
    )
    serve.add_argument("--log-level", default="warning", help="uvicorn's (default warning)")
    serve.set_defaults(handler=_serve)


def _serve(args: argparse.Namespace) -> int:
    from .._server import ServerConfig, serve
    from .._server._serve import check_port

    # Every check before anything says "serving" (see _startup); serve() binds
    # the port before it calls listening(), and fails with one line if it cannot.
    port = check_port(args.port)
    token, generated = resolve_token(args.token, args.host)
    work_root, temporary = usable_work_root(args.work_root, prefix="kernelexec-serve-")
    try:
        config = ServerConfig(
            token=token,
            work_root=work_root,
            host=args.host,
            port=port,
            max_sessions=args.max_sessions,
            idle_timeout=args.idle_timeout or None,
            max_timeout=args.max_timeout,
            max_body=int(args.max_body_mb * 1024 * 1024),
            # Read here, not as argparse defaults, so a bad value is a clear error.
            pool_size=pool_size() if args.pool_size is None else args.pool_size,
            preload=preload() if args.preload is None else args.preload,
        )

        def listening(port: int) -> None:
            print(
                f"kernelexec: serving {url(args.host, port)} (work root {config.work_root})",
                flush=True,
            )
            if generated:
                print(f"kernelexec: token {config.token}", flush=True)

        serve(config, log_level=args.log_level, on_listening=listening)
    except ConfigurationError:
        if temporary:
            work_root.rmdir()  # made above, still empty
        raise
    print("kernelexec: stopped; every kernel is shut down", flush=True)
    return 0
