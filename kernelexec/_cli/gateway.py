"""``kernelexec gateway``: a Jupyter Kernel Gateway tuned for agents.

Stock Kernel Gateway, configured and lightly patched in this process:

- a token is required (one is generated when none is given);
- TCP_NODELAY on every kernel WebSocket: tornado leaves Nagle's algorithm on,
  and a small reply frame then waits for the client's delayed ACK;
- IOPub rate limits off: kernelexec caps output on the client, and a rate
  limit would silently drop the output an agent needs to see;
- kernels never see the gateway's secrets: credential-like variables are
  removed from this process's environment before the gateway starts, and
  kernels get the rest plus the client's allowed names; nor can they read
  them out of this process (non-dumpable, ``--token`` hidden from its command
  line, no capability that reads past that: see ``_secrecy``);
- a client's ``KERNEL_WORKING_DIR`` becomes the kernel's cwd when that
  directory exists (GatewayBackend sends its session's work dir on loopback);
- the gateway notices a dead kernel within a second, not three;
- kernels listen on Unix sockets, not on TCP ports another process could take.
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
from typing import Any

from .._environment import kernel_env
from .._secrecy import drop_capabilities, protect_process

__all__ = ["ALLOWED_CLIENT_ENV", "add_command", "run_gateway"]

# Names a client may set in a kernel's env, besides KERNEL_*: kernelexec's
# kernel defaults and common harmless settings.
ALLOWED_CLIENT_ENV = (
    "PAGER",
    "GIT_PAGER",
    "TERM",
    "PYTHONUNBUFFERED",
    "PYTHONHASHSEED",
    "MPLBACKEND",
    "LANG",
    "LC_ALL",
    "TZ",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
)


def add_command(commands: Any) -> None:
    """Adds ``kernelexec gateway``."""
    gateway = commands.add_parser(
        "gateway",
        help="run a local Jupyter Kernel Gateway tuned for agents",
        description="Runs a Jupyter Kernel Gateway for GatewayBackend: token required, "
        "TCP_NODELAY on kernel WebSockets, no IOPub rate limit, no secrets in kernels.",
    )
    gateway.add_argument("--port", type=int, default=8888, help="TCP port (default 8888)")
    gateway.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)"
    )
    gateway.add_argument("--token", help="the clients' token (default: generated and printed)")
    gateway.add_argument(
        "--allow-env",
        nargs="*",
        default=[],
        metavar="NAME",
        help="more variable names clients may set in a kernel's env",
    )
    gateway.add_argument("--no-nodelay", action="store_true", help=argparse.SUPPRESS)
    gateway.set_defaults(handler=_gateway)


def _gateway(args: argparse.Namespace) -> int:
    return run_gateway(
        port=args.port,
        token=args.token,
        host=args.host,
        nodelay=not args.no_nodelay,
        allow_env=tuple(args.allow_env),
    )


def run_gateway(
    *,
    port: int,
    token: str | None,
    host: str = "127.0.0.1",
    nodelay: bool = True,
    allow_env: tuple[str, ...] = (),
    extra_argv: tuple[str, ...] = (),
) -> int:
    """Runs the gateway in this process until it is stopped (Ctrl-C, SIGTERM).

    Args:
        port: the TCP port; 0 picks a free one.
        token: the clients' token; None generates one and prints it.
        host: the address to listen on; keep it on loopback unless TLS and a
            firewall are in front.
        nodelay: set TCP_NODELAY on kernel WebSockets (off only to measure).
        allow_env: more variable names a client may set in a kernel's env.
        extra_argv: further ``--KernelGatewayApp...`` options, passed as is.

    Returns:
        The process exit status.
    """
    from kernel_gateway.gatewayapp import KernelGatewayApp
    from traitlets.config import Config

    # The kernels are stock ipykernel: nothing of kernelexec's runs in them, so
    # this process keeps its secrets itself (see _secrecy): non-dumpable, its
    # --token starred out of /proc/<pid>/cmdline, and the capabilities that
    # would read it anyway dropped from the bounding set the kernels inherit.
    drop_capabilities()
    protect_process()
    if not token:
        token = secrets.token_urlsafe(24)
        print(f"kernelexec gateway: generated token: {token}", flush=True)
    # From here on this process, and so every kernel it starts, has no secrets.
    clean = kernel_env()
    os.environ.clear()
    os.environ.update(clean)
    if nodelay:
        _set_nodelay_on_kernel_websockets()

    config = Config()
    config.KernelGatewayApp.update(
        ip=host,
        port=port,
        port_retries=0,
        auth_token=token,
        env_process_whitelist=sorted(clean),
        kernel_manager_class=f"{__name__}.AgentKernelManager",
    )
    config.JupyterWebsocketPersonality.env_whitelist = [*ALLOWED_CLIENT_ENV, *allow_env]
    config.ZMQChannelsWebsocketConnection.limit_rate = False
    config.KernelRestarter.time_to_dead = 1.0
    if os.name == "posix":
        # Unix sockets beside the connection files, for LocalBackend's reason:
        # no TCP port to lose to another process before the kernel binds it.
        config.KernelManager.transport = "ipc"
    print(f"kernelexec gateway: listening on http://{host}:{port or '<free port>'}", flush=True)
    KernelGatewayApp.launch_instance(argv=list(extra_argv), config=config)
    return 0


def _set_nodelay_on_kernel_websockets() -> None:
    from jupyter_server.services.kernels.websocket import KernelWebsocketHandler

    original = KernelWebsocketHandler.open
    if getattr(original, "_kernelexec_nodelay", False):
        return

    async def open_with_nodelay(self: Any, kernel_id: str) -> None:
        self.set_nodelay(True)
        await original(self, kernel_id)

    open_with_nodelay._kernelexec_nodelay = True  # type: ignore[attr-defined]
    setattr(KernelWebsocketHandler, "open", open_with_nodelay)  # noqa: B010


def _agent_kernel_manager() -> type:
    from kernel_gateway.services.kernels.manager import SeedingMappingKernelManager

    class AgentKernelManager(SeedingMappingKernelManager):  # type: ignore[misc]
        """Starts a kernel in the client's KERNEL_WORKING_DIR when it exists."""

        async def start_kernel(self, *args: Any, **kwargs: Any) -> str:
            wanted = (kwargs.get("env") or {}).get("KERNEL_WORKING_DIR")
            if wanted and kwargs.get("path") is None and os.path.isdir(wanted):
                kwargs["cwd"] = wanted
            kernel_id: str = await super().start_kernel(*args, **kwargs)
            return kernel_id

    return AgentKernelManager


def __getattr__(name: str) -> Any:
    # The kernel manager class is named by import path in the gateway's
    # config; built on first use so importing this module stays cheap.
    if name == "AgentKernelManager":
        cls = _agent_kernel_manager()
        setattr(sys.modules[__name__], name, cls)
        return cls
    raise AttributeError(name)
