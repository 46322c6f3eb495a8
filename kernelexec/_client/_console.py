"""A console's way into a session's kernel: a stand-in kernel, bridged over the WebSocket.

``kernelexec attach`` gives ``jupyter console`` the connection file of a
kernel that lives in this process: ZMQ sockets on 127.0.0.1 with a key of
its own. Every message the console sends is checked against that key and
passed to the server's channels WebSocket (``/api/kernels/{id}/channels``),
and every message from there is signed and passed back. So the console
never holds the agent's kernel's key, and everything it sends goes through
the server, which refuses a ``shutdown_request`` (and the kernel itself
keeps running on ``exit``): a console can inspect and change the kernel's
state but not end it. The console may run on another machine than the server: only the
server's URL and token are needed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
from collections.abc import Awaitable, Callable
from typing import Any

import zmq
import zmq.asyncio
from jupyter_client.session import Session
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from .._backends._wire import json_frame
from .._exceptions import ServerError

__all__ = ["ConsoleBridge", "channels_url", "run_bridged"]

_ROUTED = ("shell", "control", "stdin")  # ROUTER sockets: a reply goes to its asker
_MAX_MESSAGE = 64 * 1024 * 1024  # bytes of one WebSocket frame from the server


def channels_url(server_url: str, session_id: str) -> str:
    """The WebSocket URL of a session's kernel channels on the server at ``server_url``."""
    base = server_url.rstrip("/")
    scheme, _, rest = base.partition("://")
    ws = {"http": "ws", "https": "wss"}.get(scheme.lower(), scheme)
    return f"{ws}://{rest}/api/kernels/{session_id}/channels"


class ConsoleBridge:
    """A stand-in kernel on 127.0.0.1 whose every message goes to and from the server.

    Use ``async with ConsoleBridge(url, token) as bridge``, hand
    ``bridge.connection_info`` to a Jupyter client, and ``await bridge.closed()``
    (the server went away) if you like.

    Args:
        ws_url: the session's channels WebSocket (``channels_url``).
        token: the server's token.

    Raises:
        ServerError: from ``__aenter__``, when the server refuses or cannot be reached.
    """

    def __init__(self, ws_url: str, token: str) -> None:
        self.ws_url = ws_url
        self._token = token
        self._context = zmq.asyncio.Context()
        self._session = Session(key=secrets.token_hex(32).encode(), signature_scheme="hmac-sha256")
        self._sockets: dict[str, zmq.asyncio.Socket] = {}
        self._askers: dict[str, list[bytes]] = {}  # channel -> the console's identity there
        self._ws: ClientConnection | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self.connection_info: dict[str, Any] = {}

    async def __aenter__(self) -> ConsoleBridge:
        try:
            self._ws = await connect(
                self.ws_url,
                additional_headers={"Authorization": f"Bearer {self._token}"},
                max_size=_MAX_MESSAGE,
                proxy=None,  # a proxy from the environment must not see the token
                compression=None,
            )
        except InvalidStatus as exc:
            status = exc.response.status_code
            raise ServerError(
                f"the server refused the console (HTTP {status}): check the token and that "
                "the session exists and is not culled (GET /sessions)",
                status=status,
                code="refused",
            ) from None
        except (OSError, TimeoutError) as exc:
            raise ServerError(f"cannot reach {self.ws_url}: {exc}", code="unreachable") from None
        kinds = {"shell": zmq.ROUTER, "control": zmq.ROUTER, "stdin": zmq.ROUTER}
        kinds |= {"iopub": zmq.PUB, "hb": zmq.REP}
        ports = {}
        for name, kind in kinds.items():
            socket = self._context.socket(kind)
            socket.setsockopt(zmq.LINGER, 0)
            ports[f"{name}_port"] = socket.bind_to_random_port("tcp://127.0.0.1")
            self._sockets[name] = socket
        self.connection_info = {
            **ports,
            "ip": "127.0.0.1",
            "transport": "tcp",
            "key": self._session.key.decode("ascii"),
            "signature_scheme": "hmac-sha256",
            "kernel_name": "",
        }
        self._tasks = [
            asyncio.ensure_future(self._from_server()),
            asyncio.ensure_future(self._heartbeat()),
            *(asyncio.ensure_future(self._to_server(name)) for name in _ROUTED),
        ]
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(BaseException):
                await task
        if self._ws is not None:
            await self._ws.close()
        for socket in self._sockets.values():
            socket.close(linger=0)
        self._context.term()

    async def closed(self) -> None:
        """Returns once the server has closed the WebSocket."""
        if self._tasks:
            await asyncio.wait([self._tasks[0]])

    async def _to_server(self, channel: str) -> None:
        socket, ws = self._sockets[channel], self._ws
        assert ws is not None
        while True:
            parts = await socket.recv_multipart()
            try:
                identities, rest = self._session.feed_identities(parts)
                msg = self._session.deserialize(rest)  # checks the signature
            except (ValueError, TypeError, KeyError):
                continue  # not signed with our key, or not a message
            self._askers[channel] = identities
            with contextlib.suppress(ConnectionClosed):
                await ws.send(json_frame(channel, msg))

    async def _from_server(self) -> None:
        ws = self._ws
        assert ws is not None
        with contextlib.suppress(ConnectionClosed):
            async for frame in ws:
                self._deliver(frame)

    def _deliver(self, frame: str | bytes) -> None:
        try:
            msg = json.loads(frame)
            channel = msg["channel"]
        except (ValueError, KeyError, TypeError):
            return
        try:
            if channel == "iopub":
                self._session.send(self._sockets["iopub"], msg)
            elif channel in _ROUTED and channel in self._askers:
                self._session.send(self._sockets[channel], msg, ident=self._askers[channel])
        except (KeyError, TypeError, ValueError):
            pass  # not a whole message: nothing a console could read

    async def _heartbeat(self) -> None:
        socket = self._sockets["hb"]
        while True:
            await socket.send_multipart(await socket.recv_multipart())


async def run_bridged(
    ws_url: str,
    token: str,
    use: Callable[[dict[str, Any]], Awaitable[int]],
) -> int:
    """Runs ``use(connection_info)`` with a bridge up; its result, or 1 if the server left first."""
    async with ConsoleBridge(ws_url, token) as bridge:
        user = asyncio.ensure_future(use(bridge.connection_info))
        gone = asyncio.ensure_future(bridge.closed())
        await asyncio.wait([user, gone], return_when=asyncio.FIRST_COMPLETED)
        if user.done():
            gone.cancel()
            return user.result()
        user.cancel()
        with contextlib.suppress(BaseException):
            await user
        return 1
