"""An execution as server-sent events (``POST /sessions/{id}/execute/stream``).

The response is ``text/event-stream``; every event is one ``event:`` line and
one ``data:`` line of JSON, then a blank line::

    event: output
    data: {"output_type": "stream", "name": "stdout", "text": "0\\n"}

    event: result
    data: {"status": "ok", "stdout": "0\\n", ...}

Events, in the order they happen:

- ``output``: one live output: an nbformat output (``stream``, ``display_data``,
  ``execute_result``, ``error``) or a ``clear_output`` / ``update_display_data``
  event, exactly as ``AsyncSession.execute(on_output=...)`` sees them. Stream
  text waiting for a slow reader is merged into one event per stream. A
  DataFrame's or figure's bundle carries its table or chart payload
  (``application/vnd.kernelexec.table+json``, ``...chart+json``), which the
  result's ``data`` has checked and typed.
- ``dropped``: ``{"outputs": n, "chars": m}``: live outputs left out because
  the reader fell more than the server's stream buffer behind, or because one
  output alone is bigger than that buffer (or is not strict JSON); ``chars``
  is about how many characters they hold. The final result still has them
  (capped as every result is).
- ``result``: the last event, ``ExecutionResult.to_dict()``.
- ``error``: instead of ``result`` when the execution could not run to the end
  (``{"error": code, "message": ...}``, as the JSON routes send).

A line starting with ``:`` is a keep-alive comment, sent after 15 s without
events. The execution does not depend on the reader: if the connection
drops, it runs to its end (or timeout) and lands in the transcript.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from .._execution._live import json_size
from .._execution._models import ExecutionResult
from ._errors import ApiError
from ._results import result_json

__all__ = ["KEEPALIVE", "OutputQueue", "execution_events", "frame"]

KEEPALIVE = 15.0


def frame(event: str, data: Any) -> str:
    """One SSE event; ASCII JSON never spans lines."""
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=True, allow_nan=False)}\n\n"


@dataclass
class _Stream:
    name: str
    parts: list[str] = field(default_factory=list)


@dataclass
class _Dropped:
    outputs: int = 0
    chars: int = 0


class OutputQueue:
    """Live outputs not yet sent, at most ``max_chars`` of them.

    ``put`` is the execution's ``on_output`` listener; the sender takes
    everything queued at once. Consecutive stream text is merged, and past
    the cap further outputs are counted instead of kept. An output is sized
    before it is framed, so one bigger than the cap is never copied: the
    queue, and so the server's memory for a slow reader, stays near ``max_chars``.
    """

    def __init__(self, max_chars: int) -> None:
        self.max_chars = max_chars
        self._items: deque[_Stream | _Dropped | str] = deque()
        self._chars = 0
        self._ready = asyncio.Event()

    def put(self, output: dict[str, Any]) -> None:
        last = self._items[-1] if self._items else None
        room = self.max_chars - self._chars
        measured, item = json_size(output), None
        size = measured or 0
        sized = measured is not None
        if sized and size <= room and output.get("output_type") != "stream":
            try:
                item = frame("output", output)
            except (ValueError, RecursionError):
                sized = False  # nested too deep for json: dropped
            else:
                size = len(item)
        if not sized or size > room:
            if not isinstance(last, _Dropped):
                last = _Dropped()
                self._items.append(last)
            last.outputs += 1
            last.chars += size
        elif item is not None:
            self._items.append(item)
            self._chars += size
        else:
            text, name = str(output.get("text", "")), str(output.get("name", "stdout"))
            if not (isinstance(last, _Stream) and last.name == name):
                last = _Stream(name)
                self._items.append(last)
            last.parts.append(text)
            self._chars += size
        self._ready.set()

    def wake(self) -> None:
        self._ready.set()

    async def wait(self, timeout: float) -> bool:
        """Waits until something is queued (or ``wake``); False after ``timeout`` s."""
        waiter = asyncio.ensure_future(self._ready.wait())
        done, _ = await asyncio.wait({waiter}, timeout=timeout)
        waiter.cancel()
        return bool(done)

    def take(self) -> list[str]:
        """Everything queued, as SSE frames."""
        frames = []
        while self._items:
            item = self._items.popleft()
            if isinstance(item, _Stream):
                item = frame(
                    "output",
                    {"output_type": "stream", "name": item.name, "text": "".join(item.parts)},
                )
            elif isinstance(item, _Dropped):
                item = frame("dropped", {"outputs": item.outputs, "chars": item.chars})
            frames.append(item)
        self._chars = 0
        self._ready.clear()
        return frames


async def execution_events(
    task: asyncio.Task[ExecutionResult],
    queue: OutputQueue,
    *,
    keepalive: float = KEEPALIVE,
    extra: dict[str, Any] | None = None,
) -> AsyncIterator[bytes]:
    """The SSE body for an execution running as ``task`` and feeding ``queue``.

    ``extra``: fields the result event gets besides the result's own, filled
    in by the time ``task`` ends (``resumed``).
    """
    task.add_done_callback(lambda _: queue.wake())
    while True:
        for item in queue.take():
            yield item.encode("ascii")
        # No await since take(): if the task is done, its every output was taken.
        if task.done():
            break
        if not await queue.wait(keepalive):
            yield b": keep-alive\n\n"
    exc = None if task.cancelled() else task.exception()
    if task.cancelled():
        yield frame(
            "error",
            {
                "error": "cancelled",
                "message": "the execution was cancelled because the server is stopping",
            },
        ).encode("ascii")
    elif isinstance(exc, ApiError):
        yield frame("error", {"error": exc.code, "message": exc.message}).encode("ascii")
    elif exc is not None:
        yield frame(
            "error",
            {"error": "internal", "message": f"the execution failed: {type(exc).__name__}: {exc}"},
        ).encode("ascii")
    else:
        yield b"event: result\ndata: " + result_json(task.result(), extra) + b"\n\n"
