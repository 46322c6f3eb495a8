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

Every socket refuses a frame over the host's cap (``ZMQ_MAXMSGSIZE``, see
``_caps.py``) unread. libzmq then breaks the connection as a protocol error
and never reconnects it; the same monitor reports the disconnection, and the
socket is made again (what it had taken before is kept, in order) with a
"dropped" notice queued after it. Messages the kernel sent while the new
socket connects may be lost (an IOPub status, a reply): ``_run.py`` knows.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import itertools
import json
import logging
import struct
import time
from collections import deque
from collections.abc import Mapping
from typing import Any, cast

import zmq
from jupyter_client.session import DELIM, Session

from .._exceptions import KernelexecError
from ._base import KernelMessage
from ._caps import DROPPED, dropped_notice

__all__ = ["KernelSockets", "ask_control"]

log = logging.getLogger("kernelexec")

# Messages our side may queue unread per socket (ZMQ counts messages, not
# bytes); beyond it they wait in the kernel's process, whose IOPub never drops
# (``guard.py``). A kernel that sends while no execution reads holds here at
# most this many and the one being read, each under the host's cap: with 64,
# one cell that sent raw 8 MB messages held 380 MB of this process (64 MB ones:
# 4 GB). With the boot script's stream messages of at most 128K characters a
# flood holds 1 MB here. Fewer costs a flood of small messages: libzmq wakes
# the kernel's side of the pipe every half queue read: at 4, 5,000 flushed
# prints took 1.4x their time at 64 (at 2, 20,000 of them 1.6x); at 8 no
# change was measurable, in them or in a round trip.
_RECEIVE_QUEUE = 8
# Plain ints: pyzmq's enum flags make every bitwise test a slow Python call.
_EVENTS, _POLLIN, _NOBLOCK = int(zmq.EVENTS), int(zmq.POLLIN), int(zmq.NOBLOCK)
_RCVMORE = int(zmq.RCVMORE)
_DELIM = DELIM.encode() if isinstance(DELIM, str) else DELIM
# The monitor event that says a peer is known at the other end (libzmq 4.3
# made it stable); before the handshake, a connected socket is not yet routable.
_HANDSHAKE = int(
    zmq.EVENT_HANDSHAKE_SUCCEEDED if zmq.zmq_version_info() >= (4, 3) else zmq.EVENT_CONNECTED
)
_DISCONNECTED = int(zmq.EVENT_DISCONNECTED)
_RECONNECT_MS = 5
_MONITORS = itertools.count()  # each monitor's inproc address must be unique in the context
_KINDS = {"iopub": zmq.SUB, "shell": zmq.DEALER, "stdin": zmq.DEALER}


class KernelSockets:
    """Connects to a kernel's shell, IOPub and stdin sockets and speaks on them.

    Args:
        info: the kernel's connection info (transport, ip, the three ports).
        session: signs what is sent and checks what is received.
        context: the zmq context to make the sockets in.
        max_message_bytes: the host's cap on one message from the kernel; a
            bigger one is dropped unread and a "dropped" notice takes its place.
    """

    def __init__(
        self,
        info: Mapping[str, Any],
        session: Session,
        context: zmq.Context[Any],
        *,
        max_message_bytes: int,
    ) -> None:
        self.session = session
        self.max_message_bytes = max_message_bytes
        self._info = info
        self._context = context
        self._loop = asyncio.get_running_loop()
        self._pending: deque[KernelMessage] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self._sockets: dict[str, zmq.Socket[bytes]] = {}
        self._monitors: dict[str, zmq.Socket[bytes]] = {}  # channel -> its socket's monitor
        self._handshaking: set[str] = set()  # channels whose handshake is not done yet
        for channel in _KINDS:
            self._open(channel)

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
        self._note_events()
        if self._handshaking and self._sockets and timeout > 0:
            await self._wait(timeout)
            self._note_events()
        return not self._handshaking and bool(self._sockets)

    async def receive(self, timeout: float) -> KernelMessage | None:
        """The next message from any channel, or None after ``timeout`` seconds."""
        if not self._pending and self._take() and not self._pending:
            # A message was read and dropped (malformed, unsigned): more may wait
            # behind it with no wakeup to come, so look again, not at the timeout.
            await self._skip_dropped(timeout)
        if not self._pending and self._sockets and timeout > 0:
            await self._wait(timeout)
            if self._take() and not self._pending:
                await self._skip_dropped(timeout)
        return self._pending.popleft() if self._pending else None

    def put_back(self, messages: list[KernelMessage]) -> None:
        """Returns messages taken by ``receive`` to the front of the queue, in order."""
        self._pending.extendleft(reversed(messages))

    def close(self) -> None:
        """Closes the sockets; a pending ``receive`` returns None."""
        for channel in list(self._sockets):
            self._close(channel)
        if self._waiter is not None:
            _wake(self._waiter)

    # -- internals

    async def _skip_dropped(self, timeout: float) -> None:
        # Takes until a message is kept, nothing is left or ``timeout`` passes,
        # letting the event loop run between two: a flood of junk costs this
        # session's receive its time, not the other sessions theirs.
        until = self._loop.time() + timeout
        while self._loop.time() < until:
            await asyncio.sleep(0)
            if not self._take() or self._pending:
                return

    async def _wait(self, timeout: float) -> None:
        # Until a socket may have a message, a handshake is done, a notice is
        # queued, or the timeout.
        waiter = self._waiter = self._loop.create_future()
        timer = self._loop.call_later(timeout, _wake, waiter)
        try:
            await waiter
        finally:
            timer.cancel()
            self._waiter = None

    def _open(self, channel: str) -> None:
        kind = _KINDS[channel]
        # zmq.Socket, not context.socket(): a plain socket even in an asyncio context.
        sock: zmq.Socket[bytes] = zmq.Socket(self._context, kind)
        sock.linger = 1000
        sock.rcvhwm = _RECEIVE_QUEUE  # a context's defaults reach only context.socket()
        # libzmq reads a frame's length before the frame, and drops a bigger
        # one without allocating it.
        sock.maxmsgsize = self.max_message_bytes
        # Connected before the kernel has bound its end, a socket tries
        # again every reconnect_ivl: 100 ms by default, most of a forked
        # kernel's start. Over Unix sockets or loopback a try costs little.
        sock.reconnect_ivl = _RECONNECT_MS
        if kind == zmq.SUB:
            sock.setsockopt(zmq.SUBSCRIBE, b"")
        else:
            # The kernel routes an input request to the stdin socket with the shell's identity.
            sock.setsockopt(zmq.IDENTITY, self.session.bsession)
        self._sockets[channel] = sock
        self._handshaking.add(channel)
        self._watch(channel)  # before connect(), or the handshake could be missed
        sock.connect(_url(self._info, channel))
        self._loop.add_reader(sock.fileno(), self._on_readable, sock)

    def _watch(self, channel: str) -> None:
        # For the socket's life: after its handshake, a disconnection is the
        # kernel breaking the connection (a frame over the cap, a protocol error).
        address = f"inproc://kernelexec-monitor-{next(_MONITORS)}"
        self._sockets[channel].monitor(address, _HANDSHAKE | _DISCONNECTED)
        monitor: zmq.Socket[bytes] = zmq.Socket(self._context, zmq.PAIR)
        monitor.connect(address)
        self._monitors[channel] = monitor
        self._loop.add_reader(monitor.fileno(), self._note_events)

    def _note_events(self) -> None:
        noticed = False
        for channel, monitor in list(self._monitors.items()):
            broke = False
            while not broke and _readable(monitor):
                event = _event(monitor.recv_multipart(_NOBLOCK))
                if event == _HANDSHAKE:
                    self._handshaking.discard(channel)
                elif event == _DISCONNECTED and channel not in self._handshaking:
                    broke = True
            if broke:
                self._reopen(channel)
                noticed = True
        if self._waiter is not None and (noticed or not self._handshaking):
            _wake(self._waiter)

    def _reopen(self, channel: str) -> None:
        old = self._sockets[channel]
        while _readable(old):  # what came before the dropped message, in order
            self._take_from(channel, old)
        self._close(channel)
        self._open(channel)
        self._notice(channel, None)
        # A new socket's descriptor signals only once ZMQ_EVENTS has been read
        # (libzmq wakes a reader that has looked and found nothing): look.
        self._loop.call_soon(self._note_events)
        self._loop.call_soon(self._on_readable, self._sockets[channel])

    def _close(self, channel: str) -> None:
        sock, monitor = self._sockets.pop(channel), self._monitors.pop(channel)
        self._handshaking.discard(channel)
        self._loop.remove_reader(monitor.fileno())
        self._loop.remove_reader(sock.fileno())
        sock.disable_monitor()
        monitor.close(linger=0)
        sock.close()

    def _notice(self, channel: str, size: int | None) -> None:
        # A flood of drops stays one notice (a count) while nobody reads.
        last = self._pending[-1] if self._pending else None
        if last is not None and last[0] == DROPPED and last[1]["content"]["channel"] == channel:
            content = last[1]["content"]
            content["count"] += 1
            content["at"] = time.monotonic()
            if size is not None:
                content["bytes"] = max(size, content["bytes"] or 0)
        else:
            self._pending.append(dropped_notice(channel, self.max_message_bytes, size))

    def _on_readable(self, sock: zmq.Socket[bytes]) -> None:
        if not sock.closed and _readable(sock) and self._waiter is not None:
            _wake(self._waiter)

    def _take(self) -> bool:
        # One message per socket at a time: a flood stays queued in ZMQ, whose
        # receive limit pushes back on the kernel, not in this deque. True if
        # any was read, kept or not.
        took = False
        for channel, sock in self._sockets.items():
            if _readable(sock):
                self._take_from(channel, sock)
                took = True
        return took

    def _take_from(self, channel: str, sock: zmq.Socket[bytes]) -> None:
        parts = _receive(sock, self.max_message_bytes)
        if isinstance(parts, int):
            self._notice(channel, parts)
            return
        msg = self._decode(parts)
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
    *,
    max_message_bytes: int,
) -> dict[str, Any] | None:
    """Sends a request on the kernel's control channel; its reply's content, or None.

    A DEALER of its own, made for the one request and closed after: the
    kernel's other sockets, read by an execution meanwhile, are not touched,
    and a kernel holds no fourth socket per session for a rare request.
    ipykernel 7 serves control on a thread of its own, so the reply comes while
    a cell runs. None after ``timeout`` s (a kernel that does not know the
    request never replies to it).

    Raises:
        KernelexecError: the kernel broke the connection instead of replying:
            a message over ``max_message_bytes`` (dropped unread), or it closed.
    """
    sock: zmq.Socket[bytes] = zmq.Socket(context, zmq.DEALER)
    sock.linger = 0
    sock.reconnect_ivl = _RECONNECT_MS
    sock.maxmsgsize = max_message_bytes
    sock.rcvhwm = _RECEIVE_QUEUE
    address = f"inproc://kernelexec-monitor-{next(_MONITORS)}"
    sock.monitor(address, _HANDSHAKE | _DISCONNECTED)
    monitor: zmq.Socket[bytes] = zmq.Socket(context, zmq.PAIR)
    monitor.connect(address)
    loop = asyncio.get_running_loop()
    arrived = loop.create_future()
    handshaken = False

    def wake() -> None:
        if not arrived.done():
            arrived.set_result(None)

    loop.add_reader(sock.fileno(), wake)
    loop.add_reader(monitor.fileno(), wake)
    try:
        sock.connect(_url(info, "control"))
        msg = session.msg(msg_type, content)
        session.send(sock, msg)
        deadline = loop.time() + timeout
        while True:
            while _readable(sock):
                parts = _receive(sock, max_message_bytes)
                got = None if isinstance(parts, int) else _reply_to(session, parts, msg, reply)
                if got is not None:
                    return got
            while _readable(monitor):
                event = _event(monitor.recv_multipart(_NOBLOCK))
                if event == _DISCONNECTED and handshaken:
                    raise KernelexecError(
                        f"the kernel broke the connection instead of answering {msg_type}: "
                        f"a message over the host's cap of {max_message_bytes:,} bytes "
                        "(Limits.max_message_bytes) was dropped unread, or the kernel closed"
                    )
                handshaken = handshaken or event == _HANDSHAKE
            left = deadline - loop.time()
            if left <= 0:
                return None
            arrived = loop.create_future()
            if _readable(sock) or _readable(monitor):  # reading ZMQ_EVENTS re-armed them
                continue
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(arrived), left)
    finally:
        loop.remove_reader(monitor.fileno())
        loop.remove_reader(sock.fileno())
        sock.disable_monitor()
        monitor.close(linger=0)
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


def _receive(sock: zmq.Socket[bytes], cap: int) -> list[bytes] | int:
    """The next message's frames; its size instead if they are over ``cap`` together.

    Frame by frame, so no more than ``cap`` and one frame (which libzmq keeps
    under the cap) are copied out of ZMQ for a message that is not kept.
    """
    parts: list[bytes] = []
    size = 0
    while True:
        part = sock.recv(_NOBLOCK)
        size += len(part)
        if size <= cap:
            parts.append(part)
        if not sock.getsockopt(_RCVMORE):
            return parts if size <= cap else size


def _event(message: list[bytes]) -> int:
    """A monitor message's event id (libzmq: a 16-bit id, then a 32-bit value)."""
    event: int = struct.unpack("=Hi", message[0][:6])[0]
    return event


def _readable(sock: zmq.Socket[bytes]) -> bool:
    return bool(cast(int, sock.getsockopt(_EVENTS)) & _POLLIN)


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
