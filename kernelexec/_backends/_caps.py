"""The host's caps on what a kernel sends, enforced on our side of every socket.

The kernel runs the code being capped, so the caps inside it
(``kernelexec/_kernel/caps.py`` and ``streams.py``) are a first line only: its
code can take them off, or send raw messages of any size through its own
session. Here every channel of every backend refuses a message over
``Limits.max_message_bytes`` before it is decoded or held whole:

- ZMQ (local and Docker kernels, ``_zmq.py``): libzmq's ``ZMQ_MAXMSGSIZE`` on
  each socket reads a frame's length from its header and, past the cap, drops
  it unread and breaks the connection, which libzmq 4.3 then never makes
  again: a monitor sees the disconnection and the socket is made anew. A
  message of many frames, each under the cap, is left unkept once its frames
  together pass it (libzmq has no cap on a whole message: it holds all of
  such a message's frames before any can be read).
- a gateway's WebSocket (``_frames.py``): the frame's length is read from its
  header, and a bigger frame is read off the socket in chunks and thrown away.

Each drop reaches the session as a "dropped" notice in the kernel's message
stream, where the message would have been; the reducer records it and
``_run.py`` decides when the execution is over without it. What else our side
reads from a kernel or its gateway is bounded too: a kernel's stderr at start-up
(its tail), a forked kernel's status file, a gateway's REST answers, Docker's logs.
"""

from __future__ import annotations

import os
import time
from typing import IO, Any

from ._base import KernelMessage

__all__ = ["DROPPED", "MAX_MESSAGE_BYTES", "dropped_notice", "read_at_most", "read_tail"]

DROPPED = "dropped"
"""The channel of a notice that a message from the kernel was dropped unread."""

MAX_MESSAGE_BYTES = 64_000_000
"""The default cap on one message (``Limits.max_message_bytes``): three times the default
``max_result_bytes`` and four times ``max_code_chars`` (the kernel echoes the code), the
biggest an honest kernel's messages get, with room for JSON's escapes."""


def dropped_notice(
    channel: str | None, cap: int, size: int | None = None, count: int = 1
) -> KernelMessage:
    """The notice for ``count`` messages dropped on ``channel`` (None: not known).

    Shaped as a kernel message (header, parent, content), so code that reads
    the stream and skips what it does not know skips it safely. ``content["at"]``
    is when the drop was seen (``time.monotonic()``): a notice may wait in the
    queue until an execution reads it, and one from before it is not its own.

    Args:
        channel: "iopub", "shell", "stdin", or None where the frame said no channel.
        cap: the host's cap they were over, in bytes.
        size: the biggest one's size in bytes, where the backend knows it
            (libzmq drops a frame without saying how big it was).
        count: how many messages the notice stands for.
    """
    content: dict[str, Any] = {"channel": channel, "cap": cap, "bytes": size, "count": count}
    content["at"] = time.monotonic()
    header = {"msg_type": DROPPED}
    msg = {"header": header, "parent_header": {}, "metadata": {}, "content": content}
    return DROPPED, {**msg, "buffers": [], "msg_id": None, "msg_type": DROPPED}


def read_tail(file: IO[bytes], limit: int) -> bytes:
    """The last ``limit`` bytes of a seekable ``file``; the rest is never read."""
    size = file.seek(0, os.SEEK_END)
    file.seek(max(size - limit, 0))
    return file.read(limit)


def read_at_most(stream: IO[bytes], limit: int) -> bytes | None:
    """All of ``stream`` if it holds at most ``limit`` bytes; None (the rest unread) if more."""
    data = stream.read(limit + 1)
    return data if len(data) <= limit else None
