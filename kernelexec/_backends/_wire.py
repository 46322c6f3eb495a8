"""Jupyter messages on a kernel WebSocket, as bytes and back; no I/O.

Two framings exist. The ``v1.kernel.websocket.jupyter.org`` subprotocol sends
one binary frame per message: a little-endian uint64 count of offsets, the
offsets, then the channel name and the message parts (header, parent header,
metadata, content, buffers). The legacy framing (no subprotocol) sends a JSON
text frame with a ``channel`` key, or, for a message with buffers, a binary
frame of big-endian uint32 offsets, the JSON, then the buffers.
"""

from __future__ import annotations

import datetime
import itertools
import json
import struct
import uuid
from typing import Any

from jupyter_client.jsonutil import json_default

from ._base import KernelMessage

__all__ = ["SUBPROTOCOL", "decode", "encode", "json_frame", "new_message"]

SUBPROTOCOL = "v1.kernel.websocket.jupyter.org"
PROTOCOL_VERSION = "5.3"


def new_message(
    msg_type: str, content: dict[str, Any], *, session: str, parent: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A client message of ``msg_type``, with a fresh msg_id."""
    msg_id = uuid.uuid4().hex
    header = {
        "msg_id": msg_id,
        "msg_type": msg_type,
        "session": session,
        "username": "kernelexec",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "version": PROTOCOL_VERSION,
    }
    return {
        "header": header,
        "parent_header": parent or {},
        "metadata": {},
        "content": content,
        "buffers": [],
        "msg_id": msg_id,
        "msg_type": msg_type,
    }


def json_frame(channel: str, msg: dict[str, Any]) -> str:
    """``msg`` as a legacy JSON text frame on ``channel`` (no buffers; dates in ISO 8601)."""
    fields = {k: msg[k] for k in ("header", "parent_header", "metadata", "content")}
    header = msg["header"]
    frame = {"channel": channel, **fields, "buffers": []}
    frame |= {"msg_id": header.get("msg_id"), "msg_type": header.get("msg_type")}
    return json.dumps(frame, default=json_default)


def encode(channel: str, msg: dict[str, Any], *, v1: bool) -> bytes | str:
    """The frame for ``msg`` on ``channel``: bytes for v1, JSON text for legacy."""
    if not v1:
        fields = {k: msg[k] for k in ("header", "parent_header", "metadata", "content")}
        return json.dumps({**fields, "channel": channel, "buffers": []})
    parts = [
        _pack(msg["header"]),
        _pack(msg["parent_header"]),
        _pack(msg["metadata"]),
        _pack(msg["content"]),
        *msg.get("buffers", []),
    ]
    name = channel.encode()
    count = len(parts) + 2  # the channel's start, each part's start, the end
    offsets = [8 * (1 + count), 8 * (1 + count) + len(name)]
    for part in parts:
        offsets.append(offsets[-1] + len(part))
    head = b"".join(n.to_bytes(8, "little") for n in (count, *offsets))
    return head + name + b"".join(parts)


def decode(frame: bytes | str, *, v1: bool) -> KernelMessage:
    """(channel, message) from one frame, in jupyter_client's message shape.

    Raises:
        ValueError: the frame is not a kernel message.
    """
    if isinstance(frame, str):
        data = json.loads(frame)
        channel = data.pop("channel", None)
        data.setdefault("buffers", [])
        return _finish(str(channel), data)
    if v1:
        return _decode_v1(frame)
    return _decode_legacy_binary(frame)


def _decode_v1(frame: bytes) -> KernelMessage:
    if len(frame) < 8:
        raise ValueError("frame shorter than its offset count")
    count = int.from_bytes(frame[:8], "little")
    if count < 6 or len(frame) < 8 * (1 + count):
        raise ValueError(f"bad v1 frame: {count} offsets")
    offsets = [int.from_bytes(frame[8 * i : 8 * (i + 1)], "little") for i in range(1, count + 1)]
    parts = [frame[a:b] for a, b in itertools.pairwise(offsets)]
    channel = parts[0].decode()
    header, parent, metadata, content = (json.loads(p) for p in parts[1:5])
    msg = {
        "header": header,
        "parent_header": parent,
        "metadata": metadata,
        "content": content,
        "buffers": [bytes(b) for b in parts[5:]],
    }
    return _finish(channel, msg)


def _decode_legacy_binary(frame: bytes) -> KernelMessage:
    (count,) = struct.unpack("!I", frame[:4])
    offsets = [*struct.unpack(f"!{count}I", frame[4 : 4 * (count + 1)]), len(frame)]
    parts = [frame[a:b] for a, b in itertools.pairwise(offsets)]
    data = json.loads(parts[0])
    channel = data.pop("channel", None)
    data["buffers"] = parts[1:]
    return _finish(str(channel), data)


def _finish(channel: str, msg: dict[str, Any]) -> KernelMessage:
    header = msg.get("header") or {}
    msg["parent_header"] = msg.get("parent_header") or {}
    msg["metadata"] = msg.get("metadata") or {}
    msg["content"] = msg.get("content") or {}
    msg["msg_id"] = header.get("msg_id")
    msg["msg_type"] = header.get("msg_type")
    return channel, msg


def _pack(value: Any) -> bytes:
    return json.dumps(value, default=str, ensure_ascii=False).encode()
