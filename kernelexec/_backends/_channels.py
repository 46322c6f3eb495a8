"""A kernel's channels WebSocket that stays up: keepalive and reconnect.

websocket-client is blocking, so one reader thread per socket receives frames
and hands them to the event loop through an asyncio queue; ``receive`` is then
a bounded ``wait_for`` on that queue. The reader thread also keeps the socket
alive: after ``ping_interval`` seconds without a frame it pings, and a socket
that stays silent ``ping_timeout`` seconds more is treated as dead (idle
connections through proxies and NATs die without a FIN). A dropped socket is
re-opened with the same session id, so the server replays what it buffered
meanwhile; only a kernel the server no longer has ends the reconnecting.

A request sent just as the network failed may never have reached the server.
A shell request is remembered until the kernel's first message about it (its
"busy" status, sent at once by an idle kernel); one sent before a reconnect
and still unanswered ``RESEND_AFTER`` seconds after it (the server's replay
comes at once) is sent again, so a blip costs seconds, not the execution.

A message over the host's cap is drained unread by the reader (``_frames.py``)
and queued as a "dropped" notice in its place; the socket stays up.

What the reader has queued and nobody has taken is bounded in bytes
(``QUEUED_BYTES``, and the one message that passes it): a kernel that sends
while no execution reads would otherwise fill this process without end. Past
it the reader stops reading until ``receive`` takes some, so the rest waits
in the socket and the gateway, as a ZMQ kernel's waits in the kernel.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import select
import socket
import ssl
import threading
import time
from collections.abc import Callable
from typing import Any

import websocket

from . import _wire
from ._base import KernelMessage
from ._caps import dropped_notice
from ._frames import CappedReader, Oversized

__all__ = ["KernelChannels", "OpenFailed"]

_SELECT_SECONDS = 1.0  # how often an idle reader notices close()
_FRAME_SECONDS = 60.0  # a frame that has begun must finish within this
RESEND_AFTER = 3.0
QUEUED_BYTES = 16 * 2**20  # the reader pauses past this many bytes queued and not taken


class OpenFailed(Exception):
    """The WebSocket could not be opened; ``status`` is the HTTP status if there was one."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class KernelChannels:
    """One kernel's shell, iopub and stdin channels over one WebSocket.

    Args:
        url: the ``ws(s)://.../api/kernels/{id}/channels?session_id=...`` URL.
        headers: HTTP headers for the handshake (the token).
        ping_interval: seconds of silence before a ping.
        ping_timeout: seconds a ping may go unanswered before the socket is
            given up and re-opened.
        reconnect_for: seconds to keep trying to re-open a dropped socket.
        on_gone: called (in the reader thread) when the socket cannot be
            re-opened; its argument says why.
        max_message_bytes: the host's cap on one message from the kernel; a
            bigger one is drained unread and a "dropped" notice takes its place.
    """

    def __init__(
        self,
        url: str,
        headers: dict[str, str],
        *,
        ping_interval: float,
        ping_timeout: float,
        reconnect_for: float,
        on_gone: Callable[[str], None],
        max_message_bytes: int,
    ) -> None:
        self.url = url
        self.max_message_bytes = max_message_bytes
        self.headers = headers
        self.ping_interval = ping_interval
        self.ping_timeout = ping_timeout
        self.reconnect_for = reconnect_for
        self.on_gone = on_gone
        self.v1 = False
        self.reconnects = 0
        self.gave_up = False
        self.last_heard = time.monotonic()
        self._ws: websocket.WebSocket | None = None
        self._reader: CappedReader | None = None  # the current socket's
        self._lock = threading.Lock()  # guards _ws swaps, not sends
        self._closed = threading.Event()
        self._up = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._queue: asyncio.Queue[tuple[KernelMessage, int]] = asyncio.Queue()
        self._queued = 0  # bytes of the frames in _queue (a dropped notice counts 0)
        self._taken = threading.Condition()  # guards _queued; notified as receive takes
        self._thread: threading.Thread | None = None
        # shell requests the kernel has not spoken of yet: msg_id -> (connection, msg)
        self._unanswered: dict[str, tuple[int, dict[str, Any]]] = {}
        self._resend_at: float | None = None
        self._connection = 0  # which socket this is: 1 the first, then one more per reconnect

    @property
    def connected(self) -> bool:
        return self._up.is_set()

    async def open(self) -> None:
        """Opens the socket and starts the reader.

        Raises:
            OpenFailed: the handshake failed.
        """
        self._loop = asyncio.get_running_loop()
        await asyncio.to_thread(self._connect)
        self._thread = threading.Thread(target=self._read, name="kernelexec-ws", daemon=True)
        self._thread.start()

    async def send(self, channel: str, msg: dict[str, Any]) -> None:
        """Sends one message, waiting up to ``reconnect_for`` for a dropped socket to return.

        Raises:
            ConnectionError: the socket is down and did not come back.
        """
        await asyncio.to_thread(self._send, channel, msg)

    async def receive(self, timeout: float) -> KernelMessage | None:
        """The next message, or None after ``timeout`` seconds."""
        if not self._queue.empty():
            return self._took(self._queue.get_nowait())
        try:
            return self._took(await asyncio.wait_for(self._queue.get(), max(timeout, 0)))
        except asyncio.TimeoutError:
            return None

    def clear(self) -> None:
        """Forgets every message received so far and not yet taken."""
        while not self._queue.empty():
            self._took(self._queue.get_nowait())

    @property
    def queued_bytes(self) -> int:
        """Bytes of the messages received and not yet taken."""
        return self._queued

    def _took(self, entry: tuple[KernelMessage, int]) -> KernelMessage:
        item, size = entry
        if size:
            with self._taken:
                self._queued -= size
                self._taken.notify()
        return item

    def drop(self) -> None:
        """Closes the current socket as a network failure would; the reader reconnects."""
        with self._lock:
            ws = self._ws
        if ws is not None and ws.sock is not None:
            with contextlib.suppress(OSError):
                ws.sock.shutdown(2)

    def close(self) -> None:
        """Closes for good; safe to call twice and from any thread."""
        self._closed.set()
        self._up.clear()
        with self._lock:
            ws, self._ws = self._ws, None
        if ws is not None:
            with contextlib.suppress(Exception):
                ws.close(timeout=1)

    # -- the reader thread and its helpers

    def _connect(self) -> None:
        # The subprotocol is offered as a plain header and the server's choice
        # read from its answer. Passed as ``subprotocols=``, websocket-client
        # fails a handshake the server answered without one (a legacy gateway),
        # and a second handshake under the same session id then races the
        # gateway's handling of the first: it closes it, buffers the kernel's
        # messages for that session and hands them to the second, while the
        # first's readiness check still runs on the same ZMQ streams, and may
        # unsubscribe the second's (its kernel then "did not answer" for 60 s).
        try:
            ws = websocket.create_connection(
                self.url,
                header={**self.headers, "Sec-WebSocket-Protocol": _wire.SUBPROTOCOL},
                timeout=_FRAME_SECONDS,
                enable_multithread=True,
            )
        except websocket.WebSocketBadStatusException as exc:
            raise OpenFailed(f"HTTP {exc.status_code}", exc.status_code) from exc
        except (websocket.WebSocketException, OSError) as exc:
            raise OpenFailed(str(exc) or type(exc).__name__) from exc
        chosen = (ws.getheaders() or {}).get("sec-websocket-protocol", "")
        with self._lock:
            if self._closed.is_set():
                ws.close()
                return
            self._ws, self._reader = ws, CappedReader(ws, self.max_message_bytes)
            # Without the subprotocol (an older jupyter_server, or one told to
            # use the legacy protocol): JSON frames.
            self.v1 = chosen.strip().lower() == _wire.SUBPROTOCOL
            self._connection += 1
        self.last_heard = time.monotonic()
        self._up.set()

    def _send(self, channel: str, msg: dict[str, Any]) -> None:
        for _ in range(2):  # once more after a reconnect, if the first send hit a dead socket
            if not self._wait_up():
                raise ConnectionError("the kernel's WebSocket is down")
            with self._lock:
                ws, connection = self._ws, self._connection
            if ws is None:
                continue
            if not _still_open(ws):
                # Closed by the peer but not yet noticed by the reader: a frame
                # sent now would vanish, so wait for the reconnect instead.
                self._lost(ws)
                continue
            if channel == "shell":
                self._unanswered[msg["msg_id"]] = (connection, msg)
            try:
                self._send_frame(ws, channel, msg)
                return
            except (websocket.WebSocketException, OSError):
                self._lost(ws)
        raise ConnectionError("the kernel's WebSocket dropped while sending")

    def _send_frame(self, ws: websocket.WebSocket, channel: str, msg: dict[str, Any]) -> None:
        frame = _wire.encode(channel, msg, v1=self.v1)
        if isinstance(frame, bytes):
            ws.send_bytes(frame)
        else:
            ws.send_text(frame)

    def _resend_unanswered(self, ws: websocket.WebSocket) -> None:
        self._resend_at = None
        for connection, msg in list(self._unanswered.values()):
            if connection < self._connection:  # sent on a socket that has died since
                self._unanswered[msg["msg_id"]] = (self._connection, msg)
                with contextlib.suppress(websocket.WebSocketException, OSError):
                    self._send_frame(ws, "shell", msg)

    def _wait_up(self) -> bool:
        deadline = time.monotonic() + self.reconnect_for
        while not self._up.wait(0.1):
            if self._closed.is_set() or self.gave_up or time.monotonic() > deadline:
                return False
        return not self._closed.is_set()

    def _read(self) -> None:
        pinged: float | None = None
        paused_pong = -math.inf  # when a pong last went out while reading paused
        while not self._closed.is_set():
            with self._lock:
                ws, reader = self._ws, self._reader
            if ws is None or reader is None:
                if not self._reconnect():
                    return
                pinged = None
                self._resend_at = time.monotonic() + RESEND_AFTER
                continue
            if self._resend_at is not None and time.monotonic() >= self._resend_at:
                self._resend_unanswered(ws)
            if not self._room():
                # Not read, so not heard: the silence was ours. The peer's pings wait
                # unread too, and a gateway closes a socket whose pongs stop (after
                # 90 s); an unsolicited pong (RFC 6455, 5.5.3) keeps it open.
                self.last_heard, pinged = time.monotonic(), None
                if self.last_heard - paused_pong > self.ping_interval:
                    paused_pong = self.last_heard
                    with contextlib.suppress(websocket.WebSocketException, OSError):
                        ws.pong(b"")
                continue
            try:
                if not _readable(ws):
                    silent = time.monotonic() - self.last_heard
                    if pinged is not None and time.monotonic() - pinged > self.ping_timeout:
                        self._lost(ws)
                    elif pinged is None and silent > self.ping_interval:
                        ws.ping()
                        pinged = time.monotonic()
                    continue
                got = reader.receive(v1=self.v1)
            except (websocket.WebSocketException, OSError, ValueError):
                self._lost(ws)
                continue
            self.last_heard, pinged = time.monotonic(), None
            if isinstance(got, Oversized):
                notice = dropped_notice(got.channel, self.max_message_bytes, got.size)
                self._put(notice)
                continue
            opcode, data = got
            if opcode == websocket.ABNF.OPCODE_CLOSE:
                self._lost(ws)
            elif opcode in (websocket.ABNF.OPCODE_TEXT, websocket.ABNF.OPCODE_BINARY):
                self._deliver(data.decode() if opcode == websocket.ABNF.OPCODE_TEXT else data)

    def _room(self) -> bool:
        # Whether the queue has room for another frame; waits a while for it.
        with self._taken:
            if self._queued >= QUEUED_BYTES:
                self._taken.wait(_SELECT_SECONDS)
            return self._queued < QUEUED_BYTES

    def _deliver(self, frame: bytes | str) -> None:
        try:
            item = _wire.decode(frame, v1=self.v1)
        except (ValueError, KeyError, UnicodeDecodeError):
            return  # not a kernel message; nothing to do with it
        if self._unanswered:
            self._unanswered.pop(str(item[1]["parent_header"].get("msg_id")), None)
        self._put(item, len(frame))

    def _put(self, item: KernelMessage, size: int = 0) -> None:
        if self._loop is not None and not self._loop.is_closed():
            with self._taken:
                self._queued += size
            try:
                self._loop.call_soon_threadsafe(self._queue.put_nowait, (item, size))
            except RuntimeError:  # the loop closed meanwhile
                with self._taken:
                    self._queued -= size

    def _lost(self, ws: websocket.WebSocket) -> None:
        with self._lock:
            if self._ws is ws:
                self._ws = self._reader = None
                self._up.clear()
        with contextlib.suppress(Exception):
            ws.close(timeout=0)

    def _reconnect(self) -> bool:
        deadline = time.monotonic() + self.reconnect_for
        delay = 0.1
        why = "no attempt"
        while not self._closed.is_set():
            try:
                self._connect()
                self.reconnects += 1
                return True
            except OpenFailed as exc:
                why = str(exc)
                if exc.status in (401, 403, 404):
                    break  # the kernel is gone or we are no longer let in: retrying is futile
            if time.monotonic() + delay > deadline:
                break
            self._closed.wait(delay)
            delay = min(delay * 2, 2.0)
        if not self._closed.is_set():
            self.gave_up = True
            self.on_gone(why)
        return False


def _readable(ws: websocket.WebSocket) -> bool:
    sock = ws.sock
    if sock is None:
        raise OSError("socket closed")
    if isinstance(sock, ssl.SSLSocket) and sock.pending():
        return True
    # poll, not select: a server holding many sessions has descriptors past 1,024.
    watch = select.poll()
    watch.register(sock.fileno(), select.POLLIN)
    return bool(watch.poll(_SELECT_SECONDS * 1000))


def _still_open(ws: websocket.WebSocket) -> bool:
    sock = ws.sock
    if sock is None:
        return False
    if isinstance(sock, ssl.SSLSocket):
        return True  # no peeking under TLS; the reader notices a close soon enough
    # Peek through a non-blocking duplicate: the socket itself has a timeout,
    # so Python would wait for data before even trying, and the reader
    # thread may take the data first. (A socket with a timeout is already
    # O_NONBLOCK underneath, so the duplicate's setblocking changes nothing
    # for the reader.)
    try:
        with socket.socket(fileno=os.dup(sock.fileno())) as peek:
            peek.setblocking(False)
            return bool(peek.recv(1, socket.MSG_PEEK))
    except BlockingIOError:
        return True  # nothing to read: open
    except OSError:
        return False
