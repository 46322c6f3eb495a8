"""serve: run a server until SIGTERM or SIGINT, then close every session and return."""

from __future__ import annotations

import asyncio
import errno
import signal
import socket
import threading
from collections.abc import Callable
from types import FrameType

import uvicorn

from .._exceptions import ConfigurationError
from .._tenants._registry import TenantRegistry
from ._app import audit_of, create_app, tenants_of
from ._config import ServerConfig
from ._records import claim
from ._registry import Registry

__all__ = ["check_port", "listen", "run_until_signalled", "serve"]

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class _Server(uvicorn.Server):
    """uvicorn, but a stop signal first closes the sessions.

    uvicorn on its own waits for open requests to end before its shutdown;
    an execution running a long loop would hold it there. Closing the sessions
    at once interrupts running executions and cancels queued ones, so every
    request ends promptly with a result.
    """

    def __init__(self, config: uvicorn.Config, registry: Registry) -> None:
        super().__init__(config)
        self._registry = registry
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closing: asyncio.Task[None] | None = None

    async def serve(self, sockets: list[object] | None = None) -> None:  # type: ignore[override]
        self._loop = asyncio.get_running_loop()
        await super().serve(sockets)  # type: ignore[arg-type]

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        super().handle_exit(sig, frame)
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._close_sessions)

    def _close_sessions(self) -> None:
        if self._closing is None and self._loop is not None:
            self._closing = self._loop.create_task(self._registry.close_all())


def _ignore(signum: int, frame: FrameType | None) -> None:
    """Stands in for the default handlers, which uvicorn re-raises a caught signal to."""


def serve(
    config: ServerConfig,
    *,
    log_level: str = "warning",
    on_listening: Callable[[int], None] | None = None,
) -> None:
    """Serves until SIGTERM or SIGINT; returns once every kernel is shut down.

    Args:
        config: the server's settings; port 0 picks a free port.
        log_level: uvicorn's.
        on_listening: called with the port once it is bound, before serving.

    Raises:
        ConfigurationError: the tenants file or the audit log's path is unusable, the
            address cannot be bound (in use, or not this machine's), or another server
            uses the work root.
    """
    # A wrong tenants file or audit log path is refused before anything is bound,
    # written in the work root, or said to be serving.
    tenants = tenants_of(config)
    audit = audit_of(config)
    # Bound here, not by uvicorn, so that port 0 can be reported: a port chosen
    # free beforehand could be taken by another process before it is bound.
    try:
        sock = listen(config.host, config.port)
    except BaseException:
        if audit is not None:
            audit.close()
        raise
    # One server per work root: it sweeps what a crash left there as it starts.
    try:
        lock = claim(config.work_root.expanduser())
    except BaseException:
        sock.close()
        if audit is not None:
            audit.close()
        raise
    if on_listening is not None:
        on_listening(sock.getsockname()[1])
    app = create_app(config, tenants, audit)
    uv_config = uvicorn.Config(
        app,
        host=config.host,
        port=config.port,
        log_level=log_level,
        lifespan="on",
        timeout_graceful_shutdown=30,
        server_header=False,
    )
    try:
        run_until_signalled(
            _Server(uv_config, app.state.kexec.registry), sock, on_hangup=reloader(tenants)
        )
    finally:
        lock.close()


def reloader(tenants: TenantRegistry) -> Callable[[], None]:
    """What SIGHUP does: reads the tenants file again (in a thread, off the event loop)."""

    def reload() -> None:
        # reload() logs what it did, and never raises: a broken file keeps the tenants before.
        threading.Thread(target=tenants.reload, daemon=True).start()

    return reload


def run_until_signalled(
    server: uvicorn.Server, sock: socket.socket, *, on_hangup: Callable[[], None] | None = None
) -> None:
    """Runs ``server`` on ``sock`` until SIGTERM or SIGINT, then returns (exit status 0).

    ``on_hangup`` is called on SIGHUP (else SIGHUP is left as it was).
    Closes the socket when done.
    """
    previous = {sig: signal.signal(sig, _ignore) for sig in _SIGNALS}
    if on_hangup is not None:
        previous[signal.SIGHUP] = signal.signal(signal.SIGHUP, lambda *_: on_hangup())
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def check_port(port: int | str) -> int:
    """``port`` as a number, if it is a TCP port (0 asks for a free one).

    Takes the text of ``--port`` as well, so that every command refuses a
    bad one with the same one line (argparse would print its usage too).

    Raises:
        ConfigurationError: it is not a whole number from 0 to 65535.
    """
    text = str(port).strip()
    if text.isascii() and text.isdigit() and int(text) <= 65535:
        return int(text)
    raise ConfigurationError(
        f"the port must be a whole number from 0 to 65535, not {text!r}: "
        "pass another --port (0 picks a free one)"
    )


def listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (port 0: a free one).

    Raises:
        ConfigurationError: the port is out of range, or the address cannot be
            bound (in use, or not this machine's).
    """
    port = check_port(port)
    try:
        return _listen(host.strip("[]"), port)
    except OSError as exc:
        if isinstance(exc, socket.gaierror) or exc.errno == errno.EADDRNOTAVAIL:
            fix = "pass a --host this machine has, such as 127.0.0.1"
        else:  # in use, or a port below 1024 without the privilege
            fix = "choose another port (port 0 picks a free one)"
        raise ConfigurationError(
            f"cannot listen on {host}:{port}: {exc.strerror or exc}; {fix}"
        ) from exc


def _listen(host: str, port: int) -> socket.socket:
    # Made with proto IPPROTO_TCP, as asyncio makes its own: asyncio turns on
    # TCP_NODELAY only for sockets whose proto says TCP, and without it a small
    # response waits for the client's delayed ACK (40 ms a request).
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except OSError:
        sock.close()
        raise
    return sock
