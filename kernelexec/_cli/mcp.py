"""The ``kernelexec mcp`` command: an MCP server over stdio or streamable HTTP."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from .._environment import server_token
from .._exceptions import ConfigurationError
from .._extras import missing_extra
from .._server._token import check_token
from ._ray import join_ray
from ._startup import (
    DEFAULT_PORTS,
    add_zygote_option,
    apply_zygote_option,
    url,
    usable_work_root,
)
from .serve import add_policy_options, add_tenant_options, policy_from, token_or_tenants

__all__ = ["add_command"]

_HOST = "127.0.0.1"  # no --host: MCP over HTTP stays on loopback


def add_command(commands: Any) -> None:
    """Adds ``mcp`` to ``kernelexec``'s subparsers."""
    mcp = commands.add_parser(
        "mcp",
        help="serve sessions to MCP clients (stdio, or --http)",
        description="Serves stateful code execution to an MCP client: over stdin/stdout "
        "by default (what a client's config launches), or over streamable HTTP on "
        "127.0.0.1 with --http. Tools: execute_code, create_session, list_sessions, "
        "restart_session, interrupt_session, fork_session, checkpoint_session, "
        "restore_session, list_files, read_file, get_notebook. Its "
        "sessions are its own, or with --server those of a running `kernelexec serve`, "
        "shared with its HTTP clients. Needs the mcp extra (pip install -e '.[mcp]' from a "
        "clone, or the wheel with [mcp]).",
        epilog="example:\n"
        "  kernelexec mcp --work-root runs        # the command an MCP client's config runs\n"
        "  KERNELEXEC_TOKEN=... kernelexec mcp --server http://127.0.0.1:8765\n",
    )
    mcp.add_argument(
        "--server",
        metavar="URL",
        help="serve the sessions of the `kernelexec serve` at URL instead of its own; "
        "--token (or $KERNELEXEC_TOKEN) is that server's token, and with --http the one "
        "MCP clients send too. The server's flags decide which session options are allowed",
    )
    mcp.add_argument(
        "--http",
        action="store_true",
        help="serve streamable HTTP at http://127.0.0.1:PORT/mcp instead of stdio; every "
        "request needs 'Authorization: Bearer <token>'",
    )
    mcp.add_argument(
        "--port",
        default=DEFAULT_PORTS["mcp"],
        help=f"with --http (default {DEFAULT_PORTS['mcp']}; 0 picks a free one, "
        "and the printed URL has it)",
    )
    mcp.add_argument(
        "--token",
        default=server_token(),
        help="with --http: the bearer token clients must send; with --server: the server's "
        "token (default: $KERNELEXEC_TOKEN, else with --http a new one, printed)",
    )
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
    mcp.add_argument(
        "--max-file-mb",
        type=float,
        default=32.0,
        help="the largest file a client may read whole, as a resource (default 32 MB)",
    )
    add_policy_options(mcp)
    add_tenant_options(mcp)
    add_zygote_option(mcp)
    mcp.set_defaults(handler=_mcp)


def _mcp(args: argparse.Namespace) -> int:
    apply_zygote_option(args)
    try:
        from .._mcp import McpConfig, build_server
    except ImportError as exc:
        print(f"kernelexec: {missing_extra('kernelexec mcp', 'mcp', exc)}", file=sys.stderr)
        return 2
    if (
        not args.timeout > 0
        or not args.max_timeout > 0
        or args.max_sessions < 1
        or not args.max_file_mb > 0
    ):
        print(
            "kernelexec: --timeout, --max-timeout, --max-sessions and --max-file-mb must be "
            "positive",
            file=sys.stderr,
        )
        return 2
    port, token, generated = 0, "", False
    if (args.tenants or args.audit_log) and not (args.http and not args.server):
        raise ConfigurationError(
            "--tenants and --audit-log are for kernelexec mcp --http with sessions of its "
            "own; a kernelexec serve holds its tenants itself (pass --server a tenant's token)"
        )
    if args.server:
        token = _check_server(args.server, args.token)
    tenants = None
    if args.http:
        from .._server._serve import check_port

        # Every check before anything says "serving" (see _startup).
        port = check_port(args.port)
        if not args.server:
            made, generated = token_or_tenants(args, _HOST)
            token = made or ""
            from .._tenants._registry import TenantRegistry

            tenants = TenantRegistry.of(args.tenants, made)
    if args.server:
        from .._client import AsyncClient
        from .._mcp._remote_door import RemoteDoor

        config = McpConfig(
            work_root=Path("."),  # unused: the server keeps the work dirs
            timeout=args.timeout,
            max_timeout=args.max_timeout,
            max_file_bytes=int(args.max_file_mb * 1024 * 1024),
        )
        # No read timeout of its own: executions and starts are bounded by the server.
        door = RemoteDoor(AsyncClient(args.server, token=token))
        server = build_server(config, door)
        where = f"the sessions of {args.server}"
        if args.http:
            from .._tenants._registry import TenantRegistry

            single = TenantRegistry.single(token)
            _serve_http(server, where, port=port, tenants=single, token=token, generated=False)
            return 0
        print(f"kernelexec mcp: serving {where}", file=sys.stderr, flush=True)
        server.run("stdio")
        return 0
    work_root, temporary = usable_work_root(args.work_root, prefix="kernelexec-mcp-")
    try:
        config = McpConfig(
            work_root=work_root,
            timeout=args.timeout,
            max_timeout=args.max_timeout,
            max_sessions=args.max_sessions,
            kernel_name=args.kernel_name,
            max_file_bytes=int(args.max_file_mb * 1024 * 1024),
            policy=policy_from(args),
        )
        join_ray(config.policy)
        audit = None
        if args.audit_log is not None:
            from .._audit import AuditLog

            audit = AuditLog(args.audit_log, max_bytes=int(args.audit_max_mb * 1024 * 1024))
        if args.tenants is not None:
            from .._mcp._tenant_doors import tenant_doors

            server = build_server(config, tenant_doors(config, audit))
        else:
            from .._mcp._local_door import LocalDoor

            server = build_server(config, LocalDoor(config, audit=audit))
        if args.http:
            assert tenants is not None
            where = f"work root {work_root}"
            _serve_http(
                server,
                where,
                port=port,
                tenants=tenants,
                token=token,
                generated=generated,
                audit=audit,
            )
            return 0
    except ConfigurationError:
        if temporary:
            work_root.rmdir()  # made above, still empty
        raise
    # stdout is the protocol's under stdio: everything for people goes to stderr.
    print(f"kernelexec mcp: work root {work_root}", file=sys.stderr, flush=True)
    server.run("stdio")
    return 0


def _check_server(server: str, token: str | None) -> str:
    """The token for the ``kernelexec serve`` at ``server``, once it has answered with it.

    Raises:
        ConfigurationError: the URL is not an http(s) one, no token was given,
            or the server does not answer or refuses the token.
    """
    import httpx

    parsed = httpx.URL(server) if server.startswith(("http://", "https://")) else None
    if parsed is None or not parsed.host:
        raise ConfigurationError(
            f"--server {server[:200]!r} is not a server's URL: pass the one `kernelexec serve` "
            "printed, such as http://127.0.0.1:8765"
        )
    if not token:
        raise ConfigurationError(
            "--server needs the server's token: set KERNELEXEC_TOKEN (or pass --token)"
        )
    check_token(token)
    try:
        with httpx.Client(base_url=server.rstrip("/"), trust_env=False, timeout=10) as http:
            health = http.get("/health")
            answer = http.get("/sessions", headers={"Authorization": f"Bearer {token}"})
    except httpx.HTTPError as exc:
        raise ConfigurationError(
            f"the kernelexec server at {server} does not answer ({type(exc).__name__}: {exc}); "
            "start `kernelexec serve` there, or pass the URL it printed"
        ) from None
    if health.status_code != 200 or answer.status_code == 404:
        raise ConfigurationError(
            f"{server} is not a kernelexec server (GET /health: HTTP {health.status_code}); "
            "pass the URL `kernelexec serve` printed"
        )
    if answer.status_code == 401:
        raise ConfigurationError(
            f"the kernelexec server at {server} refused the token: pass the one it printed "
            "(KERNELEXEC_TOKEN or --token)"
        )
    if answer.status_code not in (200, 403):  # 403: a tenant's token without `sessions`
        raise ConfigurationError(
            f"the kernelexec server at {server} answered GET /sessions with HTTP "
            f"{answer.status_code}; check its log"
        )
    return token


def _serve_http(
    server: Any,
    where: str,
    *,
    port: int,
    tenants: Any,
    token: str,
    generated: bool,
    audit: Any = None,
) -> None:
    from .._mcp._http import PATH, serve_http

    def listening(port: int) -> None:
        print(
            f"kernelexec mcp: serving {url(_HOST, port, PATH)} ({where})",
            file=sys.stderr,
            flush=True,
        )
        if generated:
            print(
                f"kernelexec mcp: token {token} (clients send 'Authorization: Bearer <token>')",
                file=sys.stderr,
                flush=True,
            )

    serve_http(server, tenants=tenants, port=port, host=_HOST, audit=audit, on_listening=listening)
