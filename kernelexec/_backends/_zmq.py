"""A kernel's shell, IOPub and stdin sockets, read straight from the event loop.

jupyter_client's asyncio channels make futures for every poll and receive and
parse the dates in every header; on a trivial execution that costs the client
about as much CPU as the kernel's own work. Here the event loop watches each
socket's file descriptor, messages are taken without blocking, and header
dates stay the ISO strings they were on the wire (as over a gateway).

ZMQ's descriptor only says "look at ZMQ_EVENTS", and reading ZMQ_EVENTS is
what re-arms it: so the watcher always reads it, and a wait only begins after
ZMQ_EVENTS said there is nothing to take.

A socket's connection is made in ZMQ's I/O thread, retried until the kernel
has bound its end; until its handshake is done the kernel drops what it sends
there (IOPub for a subscriber it has not heard of, stdin for a peer it does
not know). A monitor on each socket reports the handshake, so ``connected``
can say when nothing the kernel sends can be lost any more.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import itertools
import json
import logging
from collections import deque
from collections.abc import Mapping
from typing import Any, cast

import zmq
from jupyter_client.session import DELIM, Session

from ._base import KernelMessage

__all__ = ["KernelSockets", "ask_control"]

log = logging.getLogger("kernelexec")

# Messages our side may queue unread per socket: with the boot script's stream
# messages of at most 256 KB, 16 MB at most; beyond it they wait in the
# kernel's process. (ZMQ's default, 1000, would let a flood fill 256 MB here.)
_RECEIVE_QUEUE = 64
# Plain ints: pyzmq's enum flags make every bitwise test a slow Python call.
_EVENTS, _POLLIN, _NOBLOCK = int(zmq.EVENTS), int(zmq.POLLIN), int(zmq.NOBLOCK)
_DELIM = DELIM.encode() if isinstance(DELIM, str) else DELIM
# The monitor event that says a peer is known at the other end (libzmq 4.3
# made it stable); before the handshake, a connected socket is not yet routable.
_HANDSHAKE = int(
    zmq.EVENT_HANDSHAKE_SUCCEEDED if zmq.zmq_version_info() >= (4, 3) else zmq.EVENT_CONNECTED
)
_RECONNECT_MS = 5
_MONITORS = itertools.count()  # each monitor's inproc address must be unique in the context


class KernelSockets:
    """Connects to a kernel's shell, IOPub and stdin sockets and speaks on them.

    Args:
        info: the kernel's connection info (transport, ip, the three ports).
        session: signs what is sent and checks what is received.
        context: the zmq context to make the sockets in.
    """

    def __init__(
        self, info: Mapping[str, Any], session: Session, context: zmq.Context[Any]
    ) -> None:
        self.session = session
        self._loop = asyncio.get_running_loop()
        self._pending: deque[KernelMessage] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self._sockets: dict[str, zmq.Socket[bytes]] = {}
        # channel -> the monitor that waits for its handshake, until it is done
        self._handshaking: dict[str, zmq.Socket[bytes]] = {}
        for channel, kind in (("iopub", zmq.SUB), ("shell", zmq.DEALER), ("stdin", zmq.DEALER)):
            # zmq.Socket, not context.socket(): a plain socket even in an asyncio context.
            sock: zmq.Socket[bytes] = zmq.Socket(context, kind)
            sock.linger = 1000
            sock.rcvhwm = _RECEIVE_QUEUE  # a context's defaults reach only context.socket()
            # Connected before the kernel has bound its end, a socket tries
            # again every reconnect_ivl: 100 ms by default, most of a forked
            # kernel's start. Over Unix sockets or loopback a try costs little.
            sock.reconnect_ivl = _RECONNECT_MS
            if kind == zmq.SUB:
                sock.setsockopt(zmq.SUBSCRIBE, b"")
            else:
                # The kernel routes an input request to the stdin socket with the shell's identity.
                sock.setsockopt(zmq.IDENTITY, session.bsession)
            self._sockets[channel] = sock
            self._watch_handshake(channel, context)  # before connect(), or it could be missed
            sock.connect(_url(info, channel))
            self._loop.add_reader(sock.fileno(), self._on_readable, sock)

    def send(self, channel: str, msg_type: str, content: dict[str, Any]) -> str:
        """Sends a message on "shell" or "stdin"; returns its msg_id."""
        msg = self.session.msg(msg_type, content)
        self.session.send(self._sockets[channel], msg)
        return str(msg["header"]["msg_id"])

    async def connected(self, timeout: float) -> bool:
        """True once every socket's handshake with the kernel is done; False after ``timeout`` s.

        Only then is a message the kernel sends sure to arrive: the idle
        status that proves a kernel ready, or an input request (lost, the
        code would wait for its answer forever).
        """
        self._note_handshakes()
        if self._handshaking and self._sockets and timeout > 0:
            await self._wait(timeout)
            self._note_handshakes()
        return not self._handshaking and bool(self._sockets)

    async def receive(self, timeout: float) -> KernelMessage | None:
        """The next message from any channel, or None after ``timeout`` seconds."""
        if not self._pending:
            self._take()
        if not self._pending and self._sockets and timeout > 0:
            await self._wait(timeout)
            self._take()
        return self._pending.popleft() if self._pending else None

    def put_back(self, messages: list[KernelMessage]) -> None:
        """Returns messages taken by ``receive`` to the front of the queue, in order."""
        self._pending.extendleft(reversed(messages))

    def close(self) -> None:
        """Closes the sockets; a pending ``receive`` returns None."""
        for channel in list(self._handshaking):
            self._end_watch(channel)
        sockets, self._sockets = self._sockets, {}
        for sock in sockets.values():
            self._loop.remove_reader(sock.fileno())
            sock.close()
        if self._waiter is not None:
            _wake(self._waiter)

    # -- internals

    async def _wait(self, timeout: float) -> None:
        # Until a socket may have a message, a handshake is done, or the timeout.
        waiter = self._waiter = self._loop.create_future()
        timer = self._loop.call_later(timeout, _wake, waiter)
        try:
            await waiter
        finally:
            timer.cancel()
            self._waiter = None

    def _watch_handshake(self, channel: str, context: zmq.Context[Any]) -> None:
        address = f"inproc://kernelexec-handshake-{next(_MONITORS)}"
        self._sockets[channel].monitor(address, _HANDSHAKE)
        monitor: zmq.Socket[bytes] = zmq.Socket(context, zmq.PAIR)
        monitor.connect(address)
        self._handshaking[channel] = monitor
        self._loop.add_reader(monitor.fileno(), self._note_handshakes)

    def _note_handshakes(self) -> None:
        # The monitors report only the handshake, so any event is the one.
        for channel, monitor in list(self._handshaking.items()):
            if _readable(monitor):
                self._end_watch(channel)
        if not self._handshaking and self._waiter is not None:
            _wake(self._waiter)

    def _end_watch(self, channel: str) -> None:
        monitor = self._handshaking.pop(channel)
        self._loop.remove_reader(monitor.fileno())
        self._sockets[channel].disable_monitor()
        monitor.close(linger=0)

    def _on_readable(self, sock: zmq.Socket[bytes]) -> None:
        if not sock.closed and _readable(sock) and self._waiter is not None:
            _wake(self._waiter)

    def _take(self) -> None:
        # One message per socket at a time: a flood stays queued in ZMQ, whose
        # receive limit pushes back on the kernel, not in this deque.
        for channel, sock in self._sockets.items():
            if _readable(sock):
                msg = self._decode(sock.recv_multipart(_NOBLOCK))
                if msg is not None:
                    self._pending.append((channel, msg))

    def _decode(self, parts: list[bytes]) -> dict[str, Any] | None:
        try:
            frames = parts[parts.index(_DELIM) + 1 :]
            signature, header, parent, metadata, content = frames[:5]
        except ValueError:
            log.warning("kernelexec: dropped a malformed message from the kernel")
            return None
        if self.session.auth is not None and not hmac.compare_digest(
            signature, self.session.sign([header, parent, metadata, content])
        ):
            log.warning("kernelexec: dropped a message with a bad signature")
            return None
        try:
            msg: dict[str, Any] = {
                "header": json.loads(header),
                "parent_header": json.loads(parent),
                "metadata": json.loads(metadata),
                "content": json.loads(content),
                "buffers": frames[5:],
            }
        except (ValueError, RecursionError):  # a hostile kernel can nest deeper than we decode
            log.warning("kernelexec: dropped a message that is not JSON (or nested too deep)")
            return None
        if not all(isinstance(msg[k], dict) for k in ("header", "parent_header", "content")):
            log.warning("kernelexec: dropped a message whose parts are not objects")
            return None
        msg["msg_id"] = msg["header"].get("msg_id")
        msg["msg_type"] = msg["header"].get("msg_type")
        return msg


async def ask_control(
    info: Mapping[str, Any],
    session: Session,
    context: zmq.Context[Any],
    msg_type: str,
    content: dict[str, Any],
    reply: str,
    timeout: float,
) -> dict[str, Any] | None:
    """Sends a request on the kernel's control channel; its reply's content, or None.

    A DEALER of its own, made for the one request and closed after: the
    kernel's other sockets, read by an execution meanwhile, are not touched,
    and a kernel holds no fourth socket per session for a rare request.
    ipykernel 7 serves control on a thread of its own, so the reply comes while
    a cell runs. None after ``timeout`` s (a kernel that does not know the
    request never replies to it).
    """
    sock: zmq.Socket[bytes] = zmq.Socket(context, zmq.DEALER)
    loop = asyncio.get_running_loop()
    arrived = loop.create_future()
    sock.linger = 0
    sock.reconnect_ivl = _RECONNECT_MS
    fd = sock.fileno()

    def wake() -> None:
        if not arrived.done():
            arrived.set_result(None)

    loop.add_reader(fd, wake)
    try:
        sock.connect(_url(info, "control"))
        msg = session.msg(msg_type, content)
        session.send(sock, msg)
        deadline = loop.time() + timeout
        while True:
            while _readable(sock):
                got = _reply_to(session, sock.recv_multipart(_NOBLOCK), msg, reply)
                if got is not None:
                    return got
            left = deadline - loop.time()
            if left <= 0:
                return None
            arrived = loop.create_future()
            if _readable(sock):  # reading ZMQ_EVENTS re-armed the descriptor: look again
                continue
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(arrived), left)
    finally:
        loop.remove_reader(fd)
        sock.close()


def _reply_to(
    session: Session, parts: list[bytes], request: dict[str, Any], reply: str
) -> dict[str, Any] | None:
    # Through jupyter_client's own checks (signature, JSON); anything else is dropped.
    try:
        _, frames = session.feed_identities(parts)
        msg = session.deserialize(frames)
    except Exception:
        log.warning("kernelexec: dropped a malformed or unsigned control message")
        return None
    parent = msg.get("parent_header") or {}
    if msg.get("msg_type") != reply or parent.get("msg_id") != request["header"]["msg_id"]:
        return None
    content = msg.get("content")
    return dict(content) if isinstance(content, dict) else None


def _url(info: Mapping[str, Any], channel: str) -> str:
    port = info[f"{channel}_port"]
    if info.get("transport", "tcp") == "ipc":
        return f"ipc://{info['ip']}-{port}"
    return f"tcp://{info['ip']}:{port}"


def _readable(sock: zmq.Socket[bytes]) -> bool:
    return bool(cast(int, sock.getsockopt(_EVENTS)) & _POLLIN)


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
