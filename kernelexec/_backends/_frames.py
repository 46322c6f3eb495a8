"""A kernel WebSocket's frames read one at a time, under the host's cap.

websocket-client reads a whole frame, and a whole fragmented message, into
memory before it returns any of it: a kernel's 300 MB message (a gateway
passes on what the kernel sends) would be 300 MB here, and more once decoded.
So each frame's header is read first, through the client's own frame buffer
(which then goes on from there), and a message whose length says it is over
the cap is read off the socket in chunks of ``CHUNK`` bytes and thrown away,
never held whole; the connection stays up, and nothing else is lost. The v1
framing (``_wire.py``) names the channel before the message's parts, so a
dropped message's channel is read on the way; a legacy JSON frame does not
say it before its end.
"""

from __future__ import annotations

from typing import NamedTuple

import websocket
from websocket import ABNF

__all__ = ["CHUNK", "CappedReader", "Oversized"]

CHUNK = 1 << 20
_DATA = (ABNF.OPCODE_TEXT, ABNF.OPCODE_BINARY, ABNF.OPCODE_CONT)
_CHANNELS = frozenset({"iopub", "shell", "stdin", "control"})
_MAX_OFFSETS = 64  # a v1 frame's offsets: its parts and buffers, and a few more


class Oversized(NamedTuple):
    """A message over the cap, dropped unread."""

    size: int  # its bytes
    channel: str | None  # where the frame said so before its content (the v1 framing)


class CappedReader:
    """Reads one WebSocket's messages, dropping those over ``cap`` bytes.

    Args:
        ws: the open socket; only this reader may read it.
        cap: the most bytes one message may have (its fragments together).
    """

    def __init__(self, ws: websocket.WebSocket, cap: int) -> None:
        self.ws = ws
        self.cap = cap
        self._dropping: Oversized | None = None  # a fragmented message being drained

    def receive(self, *, v1: bool) -> tuple[int, bytes] | Oversized:
        """The next message or control frame as (opcode, payload), or the message dropped.

        Pings are answered (as websocket-client does) and returned too, so
        the caller hears that the peer is alive.

        Raises:
            websocket.WebSocketException, OSError: the socket failed or broke the protocol.
        """
        buffer, cont = self.ws.frame_buffer, self.ws.cont_frame
        while True:
            if buffer.needs_header():
                buffer.recv_header()
            if buffer.needs_length():
                buffer.recv_length()
            assert buffer.header is not None and buffer.length is not None
            fin, opcode, masked = buffer.header[0], buffer.header[4], buffer.header[5]
            length = buffer.length
            held = len(cont.cont_data[1]) if cont.cont_data else 0
            if opcode in _DATA and (self._dropping is not None or held + length > self.cap):
                dropped = self._drop(opcode, bool(fin), bool(masked), length, held, v1)
                if dropped is not None:
                    return dropped
                continue
            frame = self.ws.recv_frame()  # the rest of the frame whose header is read
            if frame.opcode in _DATA:
                cont.validate(frame)
                cont.add(frame)
                if cont.is_fire(frame):
                    kind, whole = cont.extract(frame)
                    return kind, whole.data
                continue
            if frame.opcode == ABNF.OPCODE_PING:
                if len(frame.data) >= 126:
                    raise websocket.WebSocketProtocolException("Ping message is too long")
                self.ws.pong(frame.data)
            return frame.opcode, frame.data

    def _drop(
        self, opcode: int, fin: bool, masked: bool, length: int, held: int, v1: bool
    ) -> Oversized | None:
        # One frame of a message over the cap, read and thrown away; the
        # message once its last frame is gone.
        buffer, cont = self.ws.frame_buffer, self.ws.cont_frame
        if masked:
            buffer.recv_mask()  # a server's frames are not masked; its channel is not read
        used = 0
        if self._dropping is None:
            channel = None
            if v1 and opcode == ABNF.OPCODE_BINARY and not masked and not held:
                channel, used = _read_channel(buffer, length)
            self._dropping = Oversized(held, channel)
            cont.cont_data, cont.recving_frames = None, None  # its first fragments, let go
        _skip(buffer, length - used)
        buffer.clear()
        dropping = self._dropping._replace(size=self._dropping.size + length)
        self._dropping = None if fin else dropping
        return dropping if fin else None


def _read_channel(buffer: websocket._abnf.frame_buffer, length: int) -> tuple[str | None, int]:
    """A v1 frame's channel, read from the start of its payload; and the bytes read."""
    head = buffer.recv_strict(min(length, 24))  # the offsets' count, the channel's start and end
    if len(head) < 24:
        return None, len(head)
    count = int.from_bytes(head[:8], "little")
    start, end = int.from_bytes(head[8:16], "little"), int.from_bytes(head[16:24], "little")
    if not (2 <= count <= _MAX_OFFSETS and start == 8 * (count + 1) and 0 < end - start <= 16):
        return None, 24
    if end > length:
        return None, 24
    name = buffer.recv_strict(end - 24)[start - 24 :]
    channel = name.decode("ascii", "replace")
    return (channel if channel in _CHANNELS else None), end


def _skip(buffer: websocket._abnf.frame_buffer, size: int) -> None:
    while size > 0:
        size -= len(buffer.recv_strict(min(size, CHUNK)))
