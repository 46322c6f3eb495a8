"""The ``kernelexec serve`` command: the HTTP execution server."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from .._environment import pool_size, preload, server_token, venv_cache_dir
from .._exceptions import ConfigurationError
from .._extras import missing_extra
from ._ray import add_ray_options, join_ray, ray_policy
from ._startup import (
    DEFAULT_PORTS,
    add_zygote_option,
    apply_zygote_option,
    resolve_token,
    url,
    usable_work_root,
)

__all__ = [
    "add_command",
    "add_policy_options",
    "add_sandbox_options",
    "policy_from",
    "sandbox_from",
]


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
        help="seconds idle before a session is suspended: its variables checkpointed into "
        "<work-root>/.checkpoints/, its kernel shut down, and restored by its next "
        "execution (default 3600; 0 never)",
    )
    serve.add_argument(
        "--no-suspend",
        action="store_true",
        help="cull idle sessions instead of suspending them: the kernel is shut down and "
        "its state lost (files kept); the session answers HTTP 409 from then on",
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
        "--max-queued",
        type=int,
        default=32,
        help="executions a session may hold not yet ended, queued or running (default 32); "
        "one more gets HTTP 429 with Retry-After",
    )
    serve.add_argument(
        "--max-queued-mb",
        type=float,
        default=64.0,
        help="request bytes a session's executions not yet ended may hold together "
        "(default 64 MB); past it HTTP 429, or 413 for one body alone over it",
    )
    serve.add_argument(
        "--session-disk-mb",
        type=float,
        default=4096.0,
        help="what one session's checkpoints in <work-root>/.checkpoints/ may hold together, "
        "and what a fork may copy of its files (default 4096 MB; sparse files count at "
        "their full length); past it HTTP 507, before anything is written",
    )
    serve.add_argument(
        "--store-disk-mb",
        type=float,
        default=16384.0,
        help="what the whole checkpoint store may hold (default 16384 MB); past it HTTP 507",
    )
    serve.add_argument(
        "--checkpoint-max-age-days",
        type=float,
        default=7.0,
        help="days a checkpoint is kept in the store, a suspended session's too (that session "
        "is then culled; its files stay); default 7, 0 keeps them forever",
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
    add_policy_options(serve)
    add_zygote_option(serve)
    serve.add_argument(
        "--trace-content",
        action="store_true",
        help="put each execution's code and output text into its OpenTelemetry span "
        "(default: never; also $KERNELEXEC_OTEL_CAPTURE_CONTENT=1)",
    )
    add_tenant_options(serve)
    serve.add_argument(
        "--e2b",
        action="store_true",
        help="also answer E2B's Python SDK (e2b-code-interpreter) under /e2b: point "
        "E2B_API_URL at <url>/e2b and E2B_SANDBOX_URL at <url>/e2b/sandbox, with the "
        "token as E2B_API_KEY (docs/guides/e2b.md); needs the e2b extra",
    )
    serve.add_argument("--log-level", default="warning", help="uvicorn's (default warning)")
    serve.set_defaults(handler=_serve)


def add_tenant_options(parser: argparse.ArgumentParser) -> None:
    """``--tenants`` and the audit log's options, for ``serve`` and ``mcp --http``."""
    parser.add_argument(
        "--tenants",
        type=Path,
        metavar="FILE",
        help="a tenants file (TOML): who may call, each with its own tokens (kept as hashes; "
        "kernelexec token NAME makes one), scopes, quotas, session options and request rate; "
        "read again on SIGHUP and when it changes. Replaces --token",
    )
    parser.add_argument(
        "--audit-log",
        type=Path,
        metavar="FILE",
        help="append a JSON line to FILE for every state-changing request and every "
        "execution (who, what, status, cost; never code, outputs or tokens)",
    )
    parser.add_argument(
        "--audit-max-mb",
        type=float,
        default=64.0,
        help="rotate the audit log past this size (default 64; 5 old files are kept)",
    )


def token_or_tenants(args: argparse.Namespace, host: str) -> tuple[str | None, bool]:
    """The token a server requires and whether it was generated, or (None, False) when
    it has a tenants file.

    Raises:
        ConfigurationError: both are given, or the token breaks the token rule.
    """
    if args.tenants is None:
        return resolve_token(args.token, host)
    if args.token:
        from .._server._config import BOTH_GIVEN

        raise ConfigurationError(BOTH_GIVEN)
    return None, False


def add_policy_options(parser: argparse.ArgumentParser) -> None:
    """The operator's flags for the session options clients may ask for (serve and mcp)."""
    group = parser.add_argument_group(
        "session options clients may ask for",
        "By default a client may set preload code and lower output limits only; "
        "anything that runs another interpreter, installs packages, starts a container "
        "or reaches another machine needs one of these (else HTTP 403 naming the flag).",
    )
    group.add_argument(
        "--allow-python",
        action="append",
        default=[],
        metavar="PATH",
        help="an interpreter sessions may ask for with python= (repeat for more)",
    )
    group.add_argument(
        "--allow-packages",
        action="store_true",
        help="sessions may ask for packages=, python_version= and a named venv= "
        "(the server makes the env with uv or pip)",
    )
    group.add_argument(
        "--venv-root",
        type=Path,
        default=None,
        help="where named venvs are made (default $KERNELEXEC_VENV_DIR/named, "
        "else ~/.cache/kernelexec/venvs/named)",
    )
    group.add_argument(
        "--allow-docker",
        action="store_true",
        help="sessions may ask for docker= (a container, network none, within the caps below)",
    )
    group.add_argument(
        "--docker-image",
        default=None,
        help="the image Docker sessions run (default: the one `kernelexec image build` built)",
    )
    group.add_argument(
        "--docker-max-memory",
        default="2g",
        help="each container's memory cap, and its default (default 2g)",
    )
    group.add_argument(
        "--docker-max-cpus",
        type=float,
        default=2.0,
        help="each container's CPU cap, and its default (default 2)",
    )
    group.add_argument(
        "--docker-max-pids",
        type=int,
        default=512,
        help="each container's process cap, and its default (default 512)",
    )
    group.add_argument(
        "--allow-docker-network",
        action="append",
        default=[],
        metavar="NAME",
        help="a Docker network containers may join besides 'none' (repeat for more)",
    )
    group.add_argument(
        "--allow-gateway",
        action="append",
        default=[],
        metavar="URL",
        help="a Jupyter gateway sessions may run on with gateway=URL (repeat for more; "
        "its token from $KERNELEXEC_GATEWAY_TOKEN)",
    )
    add_ray_options(group)
    add_sandbox_options(parser)


def add_sandbox_options(parser: argparse.ArgumentParser) -> None:
    """The containment of local kernels (serve and mcp): on unless ``--no-sandbox``."""
    group = parser.add_argument_group(
        "containment of local kernels",
        "Unless --no-sandbox, each local kernel reads only what Python and the system "
        "need and its work dir, writes only its work dir and a temp dir, sees only its own "
        "processes and has no network (kernelexec.Sandbox). Where this machine cannot "
        "contain kernels, the server refuses to start without --no-sandbox.",
    )
    chosen = group.add_mutually_exclusive_group()
    chosen.add_argument(
        "--sandbox",
        action="store_true",
        help="contain local kernels (the default; KERNELEXEC_SANDBOX=0 in the environment "
        "changes the default)",
    )
    chosen.add_argument(
        "--no-sandbox",
        action="store_true",
        help="run local kernels uncontained, with all of this user's powers; "
        "sessions may not ask for containment",
    )
    group.add_argument(
        "--sandbox-read",
        action="append",
        default=[],
        metavar="PATH",
        help="a path every session's kernel may read, such as a data folder (repeat for more)",
    )
    group.add_argument(
        "--sandbox-gpus",
        action="store_true",
        help="every session's kernel may use this machine's GPUs (/dev/nvidia*, /dev/kfd, "
        "/dev/dri/renderD*); without it a contained kernel sees none",
    )
    group.add_argument(
        "--allow-network",
        action="store_true",
        help='sessions may ask for a network (sandbox={"network": true}); without it, '
        "a kernel has only its own loopback",
    )
    group.add_argument(
        "--sandbox-memory",
        default=None,
        metavar="SIZE",
        help="each session's memory (its kernel and processes together where cgroups can be "
        "made, else each process's), and the most a client may ask for (default: half "
        "this machine's; e.g. 4g)",
    )
    group.add_argument(
        "--sandbox-processes",
        type=int,
        default=None,
        metavar="N",
        help="processes and threads of a session's kernel, and the most a client may ask "
        "for (default 1024)",
    )
    group.add_argument(
        "--sandbox-open-files",
        type=int,
        default=None,
        metavar="N",
        help="open files per process of a kernel, and the most a client may ask for (default 4096)",
    )


def sandbox_from(args: argparse.Namespace) -> Any:
    """The ``Sandbox`` the flags of ``add_sandbox_options`` describe.

    False for ``--no-sandbox``; None where none was asked for and containment
    is not the default (``contained_by_default``: ``KERNELEXEC_SANDBOX=0``).

    Raises:
        ConfigurationError: a value is unusable, or this machine cannot contain
            a kernel and ``--no-sandbox`` was not given (one line, exit 2).
    """
    from .._containment._platform import contained_by_default, support
    from .._containment._sandbox import Sandbox
    from .._server._options import parse_memory

    if args.no_sandbox:
        return False
    asked = (
        args.sandbox
        or args.sandbox_read
        or args.sandbox_gpus
        or any(
            getattr(args, f"sandbox_{name}") is not None
            for name in ("memory", "processes", "open_files")
        )
    )
    if not asked and not contained_by_default():
        return None  # the environment turned the default off (KERNELEXEC_SANDBOX=0)
    found = support()
    if not found.ok:
        raise ConfigurationError(
            f"this machine cannot contain kernels ({found.why_not()}): pass --no-sandbox "
            "to run them uncontained, with all of this user's powers"
        )
    chosen: dict[str, Any] = {"read": tuple(args.sandbox_read), "gpus": args.sandbox_gpus}
    try:
        if args.sandbox_memory is not None:
            chosen["memory"] = parse_memory(args.sandbox_memory)
        for name in ("processes", "open_files"):
            value = getattr(args, f"sandbox_{name}")
            if value is not None:
                chosen[name] = value
        return Sandbox(**chosen)
    except ValueError as exc:
        flag = str(exc).split(" ", 1)[0].removeprefix("Sandbox.").replace("_", "-")
        raise ConfigurationError(f"--sandbox-{flag}: {exc}") from None


def policy_from(args: argparse.Namespace) -> Any:
    """The ``SessionPolicy`` the flags of ``add_policy_options`` describe.

    Raises:
        ConfigurationError: a flag's value is unusable (one line, exit 2).
    """
    from .._server._options import SessionPolicy

    pythons = []
    for given in args.allow_python:
        python = Path(given).expanduser()
        if not (python.is_absolute() and python.is_file() and os.access(python, os.X_OK)):
            raise ConfigurationError(
                f"--allow-python {given}: give the absolute path of an executable interpreter"
            )
        pythons.append(python)
    # Beside the library's cache of environments made by content, never among them.
    venv_root = args.venv_root or venv_cache_dir() / "named"
    return SessionPolicy(
        pythons=tuple(pythons),
        packages=args.allow_packages,
        venv_root=venv_root.expanduser().resolve(),
        docker=args.allow_docker,
        docker_image=args.docker_image,
        docker_networks=tuple(args.allow_docker_network),
        docker_memory=args.docker_max_memory,
        docker_cpus=args.docker_max_cpus,
        docker_pids=args.docker_max_pids,
        gateways=tuple(args.allow_gateway),
        gateway_token=os.environ.get("KERNELEXEC_GATEWAY_TOKEN") or None,
        sandbox=sandbox_from(args),
        network=args.allow_network,
        ray=ray_policy(args),
    )


def check_e2b_extra() -> None:
    """The E2B door reads the SDK's uploads (multipart) with python-multipart, the e2b extra's.

    Raises:
        ConfigurationError: it is not installed (the message names the extra).
    """
    try:
        import multipart  # noqa: F401 -- only --e2b needs it
    except ImportError as exc:
        raise ConfigurationError(str(missing_extra("kernelexec serve --e2b", "e2b", exc))) from None


def _serve(args: argparse.Namespace) -> int:
    apply_zygote_option(args)
    from .._server import ServerConfig, serve
    from .._server._config import MIB
    from .._server._serve import check_port
    from .._telemetry import set_trace_content

    if args.trace_content:
        set_trace_content(True)

    # Every check before anything says "serving" (see _startup); serve() binds
    # the port before it calls listening(), and fails with one line if it cannot.
    port = check_port(args.port)
    if args.e2b:
        check_e2b_extra()
    token, generated = token_or_tenants(args, args.host)
    policy = policy_from(args)
    join_ray(policy)
    work_root, temporary = usable_work_root(args.work_root, prefix="kernelexec-serve-")
    try:
        config = ServerConfig(
            token=token,
            work_root=work_root,
            host=args.host,
            port=port,
            max_sessions=args.max_sessions,
            idle_timeout=args.idle_timeout or None,
            suspend=not args.no_suspend,
            max_timeout=args.max_timeout,
            max_body=int(args.max_body_mb * 1024 * 1024),
            # Read here, not as argparse defaults, so a bad value is a clear error.
            pool_size=0
            if policy.ray
            else pool_size()
            if args.pool_size is None
            else args.pool_size,
            preload=preload() if args.preload is None else args.preload,
            policy=policy,
            max_queued=args.max_queued,
            max_queued_bytes=int(args.max_queued_mb * MIB),
            session_disk=int(args.session_disk_mb * MIB),
            store_disk=int(args.store_disk_mb * MIB),
            checkpoint_max_age=args.checkpoint_max_age_days * 86400.0 or None,
            tenants=args.tenants,
            audit_log=args.audit_log,
            audit_max_bytes=int(args.audit_max_mb * MIB),
            e2b=args.e2b,
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
