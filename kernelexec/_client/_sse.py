"""Reading the server's execution stream (server-sent events), with no I/O.

Both clients feed the response's lines to a ``StreamReader`` and ask it for
the result at the end; the event format is described in ``_server/_sse.py``.
"""

from __future__ import annotations

import json
from typing import Any

from .._exceptions import ServerError
from .._execution._background import ExecutionEvent
from .._execution._live import LiveOutput, OutputListener
from .._execution._models import ExecutionResult

__all__ = ["EventReader", "StreamReader", "error_event"]


def error_event(data: dict[str, Any]) -> ServerError:
    """The exception for an ``error`` event (or an execution's ``error`` field)."""
    return ServerError(f"{data.get('message')} ({data.get('error')})", code=str(data.get("error")))


class StreamReader:
    """Turns SSE lines into ``on_output`` calls and, at the end, the result.

    Args:
        on_output: called with each live output, as ``AsyncSession.execute``
            would; if it raises, it is not called again (the result is unharmed).
    """

    def __init__(self, on_output: OutputListener | None) -> None:
        self._on_output = on_output
        self._event = "message"
        self._data: list[str] = []
        self._result: ExecutionResult | None = None
        self._error: ServerError | None = None

    def feed(self, line: str) -> None:
        """One line of the body, without its line ending."""
        if not line:
            self._dispatch()
        elif line.startswith(":"):
            pass  # a keep-alive comment
        else:
            name, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if name == "event":
                self._event = value
            elif name == "data":
                self._data.append(value)

    def result(self) -> ExecutionResult:
        """The execution's result, once the body has ended.

        Raises:
            ServerError: the server sent an error event, or the stream ended
                without a result.
        """
        self._dispatch()
        if self._error is not None:
            raise self._error
        if self._result is None:
            raise ServerError(
                "the execution stream ended without a result (the server "
                "stopped?); GET the session's notebook to see what ran",
                code="stream_incomplete",
            )
        return self._result

    def _dispatch(self) -> None:
        if not self._data:
            self._event = "message"
            return
        event, data = self._event, json.loads("\n".join(self._data))
        self._event, self._data = "message", []
        if event == "output" and self._on_output is not None and isinstance(data, dict):
            try:
                self._on_output(LiveOutput(data))
            except Exception:
                self._on_output = None  # a broken listener costs the live view only
        elif event == "result":
            self._result = ExecutionResult.from_dict(data)
        elif event == "error":
            self._error = error_event(data)


class EventReader:
    """Turns the SSE lines of ``GET .../executions/{eid}/events`` into ``ExecutionEvent`` s.

    ``feed`` returns the event a blank line completes (an output or a
    "dropped" one, numbered by its ``id:`` line); the ending ``result`` or
    ``error`` event is kept in ``result`` or ``error`` instead.
    """

    def __init__(self) -> None:
        self.result: ExecutionResult | None = None
        self.error: ServerError | None = None
        self._id: str | None = None
        self._event = "message"
        self._data: list[str] = []

    @property
    def ended(self) -> bool:
        """The stream has said how the execution ended."""
        return self.result is not None or self.error is not None

    def feed(self, line: str) -> ExecutionEvent | None:
        """One line of the body, without its line ending; the event it completes, if any."""
        if not line:
            return self._dispatch()
        if not line.startswith(":"):  # not a keep-alive comment
            name, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if name == "id":
                self._id = value
            elif name == "event":
                self._event = value
            elif name == "data":
                self._data.append(value)
        return None

    def _dispatch(self) -> ExecutionEvent | None:
        event, raw, event_id = self._event, self._data, self._id
        self._event, self._data, self._id = "message", [], None
        if not raw:
            return None
        data = json.loads("\n".join(raw))
        if event == "result":
            self.result = ExecutionResult.from_dict(data)
        elif event == "error":
            self.error = error_event(data)
        elif event in ("output", "dropped") and event_id is not None and event_id.isdigit():
            return ExecutionEvent(int(event_id), "output" if event == "output" else "dropped", data)
        return None
