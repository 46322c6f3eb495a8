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
  line, no capability that reads past that: see ``_containment/_secrecy.py``);
- a client's ``KERNEL_WORKING_DIR`` becomes the kernel's cwd when that
  directory exists (GatewayBackend sends its session's work dir on loopback);
- the gateway notices a dead kernel within a second, not three;
- kernels listen on Unix sockets, not on TCP ports another process could take;
- the start-up contract of ``serve`` (see ``_startup``): the port is bound
  before the gateway says it is serving, and that bound socket is the one
  the gateway accepts on, so ``--port 0`` prints the real port and a port in
  use is one line with exit status 2; the same token rule; Ctrl-C stops it
  like SIGTERM, shutting its kernels down.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
from typing import Any

from .._containment._secrecy import drop_capabilities, protect_process
from .._environment import kernel_env, server_token
from .._exceptions import ConfigurationError
from .._extras import missing_extra
from ._startup import DEFAULT_PORTS, resolve_token, url

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
        "TCP_NODELAY on kernel WebSockets, no IOPub rate limit, no secrets in kernels. Needs "
        "the gateway extra (pip install -e '.[gateway]' from a clone, or the wheel with "
        "[gateway]).",
        epilog="example:\n"
        '  kernelexec gateway --token "$KERNELEXEC_TOKEN"   # GatewayBackend(url, token=...)\n',
    )
    gateway.add_argument(
        "--port",
        default=DEFAULT_PORTS["gateway"],
        help=f"TCP port (default {DEFAULT_PORTS['gateway']}; 0 picks a free one, and the "
        "printed URL has it)",
    )
    gateway.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default 127.0.0.1; any other than loopback needs --token)",
    )
    gateway.add_argument(
        "--token",
        default=server_token(),
        help="the clients' token (default: $KERNELEXEC_TOKEN, else a new one, printed)",
    )
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
    from .._server._serve import check_port

    try:
        import kernel_gateway  # noqa: F401  (Jupyter Kernel Gateway: the gateway extra)
    except ImportError as exc:
        raise ConfigurationError(str(missing_extra("kernelexec gateway", "gateway", exc))) from None
    return run_gateway(
        port=check_port(args.port),
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
        port: the TCP port; 0 picks a free one (the printed URL has it).
        token: the clients' token; None generates one and prints it (on
            loopback only).
        host: the address to listen on; keep it on loopback unless TLS and a
            firewall are in front.
        nodelay: set TCP_NODELAY on kernel WebSockets (off only to measure).
        allow_env: more variable names a client may set in a kernel's env.
        extra_argv: further ``--KernelGatewayApp...`` options, passed as is.

    Returns:
        The process exit status.

    Raises:
        ConfigurationError: before anything is printed: the token breaks the
            rule (or is missing off loopback), or the port cannot be bound.
    """
    from traitlets.config import Config

    from .._server._serve import listen

    token, generated = resolve_token(token, host)
    sock = listen(host, port)
    # The kernels are stock ipykernel: nothing of kernelexec's runs in them, so
    # this process keeps its secrets itself (see _containment/_secrecy.py): non-dumpable, its
    # --token starred out of /proc/<pid>/cmdline, and the capabilities that
    # would read it anyway dropped from the bounding set the kernels inherit.
    drop_capabilities()
    protect_process()
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
    app = _gateway_app().instance(config=config)
    app.kernelexec_socket = sock
    app.initialize(list(extra_argv))
    # Said once the socket accepts (it queues connections until start() runs
    # the loop), with the port it really has.
    print(f"kernelexec gateway: serving {url(host, sock.getsockname()[1])}", flush=True)
    if generated:
        print(f"kernelexec gateway: token {token}", flush=True)
    app.start()
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


def _gateway_app() -> Any:
    from kernel_gateway.gatewayapp import KernelGatewayApp
    from tornado.httpserver import HTTPServer

    class AgentGatewayApp(KernelGatewayApp):  # type: ignore[misc]
        """Kernel Gateway on a socket bound before it starts; Ctrl-C stops it like SIGTERM."""

        kernelexec_socket: socket.socket

        def init_http_server(self) -> None:
            # Stock binds here, tries other ports when its own is taken, and
            # keeps the 0 it was given as its port: run_gateway has bound it.
            self.http_server = HTTPServer(
                self.web_app, xheaders=self.trust_xheaders, ssl_options=self._build_ssl_options()
            )
            self.kernelexec_socket.setblocking(False)  # tornado accepts until EAGAIN
            self.http_server.add_sockets([self.kernelexec_socket])
            self.port = self.kernelexec_socket.getsockname()[1]

        def init_signal(self) -> None:
            super().init_signal()
            # Stock Ctrl-C asks "Shutdown this Jupyter server (y/[n])?" on a
            # terminal and raises KeyboardInterrupt off one, which stops the
            # loop before the kernels are shut down.
            signal.signal(signal.SIGINT, self._signal_stop)

    return AgentGatewayApp


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
