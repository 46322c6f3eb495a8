"""Background executions on a server, from a client: start one, find it again by id.

``RemoteSession.execute(code, background=True)`` posts to
``POST /sessions/{id}/executions`` and returns a ``RemoteExecution`` at once;
``session.execution(eid)`` finds one again (from any client: the execution
lives on the server, not in the client that started it) and
``session.executions()`` lists them. A handle knows what the server said
last (``state``, ``result``); ``wait``, ``read``, ``events`` and ``cancel``
ask again. ``AsyncRemoteExecution`` is the same for ``AsyncRemoteSession``.

The requests and the reading of answers are here once; the two handles
differ only in how they send them.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import httpx

from .._exceptions import ServerError
from .._execution._background import ExecutionEvent, ExecutionState
from .._execution._models import ExecutionResult
from ._base import Call
from ._sse import EventReader, error_event

if TYPE_CHECKING:
    from ._async import AsyncClient
    from ._sync import Client

__all__ = ["AsyncRemoteExecution", "RemoteExecution", "execution_calls"]

# Seconds one ``GET ...?wait=`` holds, longest first: a server whose
# --max-timeout is shorter refuses a longer wait (400), and the next is tried.
_WAITS = (10.0, 1.0, 0.0)
_POLL = 0.25  # seconds between polls when the server allows no wait at all
_RETRIES = 3  # reconnections in a row that bring no event before ``events`` gives up


def _json(response: httpx.Response) -> Any:
    return response.json()


def _nothing(response: httpx.Response) -> None:
    return None


class execution_calls:  # a namespace of Call builders, lower case like a module
    """The executions' routes, one Call builder each."""

    @staticmethod
    def path(session_id: str, execution_id: str | None = None) -> str:
        base = f"/sessions/{quote(session_id, safe='')}/executions"
        return base if execution_id is None else f"{base}/{quote(execution_id, safe='')}"

    @staticmethod
    def start(
        session_id: str,
        code: str,
        language: str | None,
        timeout: float | None,
        stdin: Any,
    ) -> Call[dict[str, Any]]:
        body: dict[str, Any] = {"code": code, "language": language or "python"}
        if timeout is not None:
            body["timeout"] = timeout
        if stdin is not None:
            body["stdin"] = list(stdin)
        return Call("POST", execution_calls.path(session_id), _json, json=body)

    @staticmethod
    def get(session_id: str, execution_id: str, wait: float = 0.0) -> Call[dict[str, Any]]:
        params = {"wait": f"{wait:g}"} if wait > 0 else None
        path = execution_calls.path(session_id, execution_id)
        return Call("GET", path, _json, params=params, long=wait > 0)

    @staticmethod
    def list(session_id: str) -> Call[list[dict[str, Any]]]:
        path = execution_calls.path(session_id)
        return Call("GET", path, lambda r: list(r.json()["executions"]))

    @staticmethod
    def cancel(session_id: str, execution_id: str) -> Call[dict[str, Any]]:
        # Answered once the execution has ended (an interrupt, or a restart): a long call.
        path = f"{execution_calls.path(session_id, execution_id)}/cancel"
        return Call("POST", path, _json, long=True)

    @staticmethod
    def events(session_id: str, execution_id: str, offset: int) -> Call[None]:
        path = f"{execution_calls.path(session_id, execution_id)}/events"
        return Call("GET", path, _nothing, params={"offset": str(offset)}, long=True)


def _finished(exc: ServerError) -> bool:
    return exc.status == 409 and exc.code == "execution_finished"


class _Waiting:
    """The steps of a ``wait(timeout)``: how long each ``GET ...?wait=`` holds."""

    def __init__(self, timeout: float | None) -> None:
        self.deadline = None if timeout is None else time.monotonic() + timeout
        self._waits = list(_WAITS)

    def next(self) -> float | None:
        """Seconds the next request waits; None once the deadline has passed."""
        left = None if self.deadline is None else self.deadline - time.monotonic()
        if left is not None and left <= 0:
            return None
        return self._waits[0] if left is None else min(self._waits[0], left)

    def refused(self, exc: ServerError) -> None:
        """A request was refused: re-raised, unless for too long a wait (a shorter one next)."""
        if not (exc.status == 400 and exc.code == "invalid_request" and len(self._waits) > 1):
            raise exc
        self._waits.pop(0)


class _Following:
    """Where a reading of events is: the next offset, the reconnections that brought nothing."""

    def __init__(self, known: _Known, url: str, offset: int, stop: int | None) -> None:
        self.known, self.url, self.offset, self.stop = known, url, offset, stop
        self.reader = EventReader()
        self._failures = 0
        self._progressed = False

    def call(self) -> Call[None]:
        """The request for the events from where the reading is, with a fresh reader."""
        self.reader, self._progressed = EventReader(), False
        return execution_calls.events(self.known.session_id, self.known.id, self.offset)

    def feed(self, line: str) -> ExecutionEvent | None:
        event = self.reader.feed(line)
        if event is not None:
            self.offset, self._progressed = event.offset + 1, True
        return event

    def reached(self) -> bool:
        return self.stop is not None and self.offset >= self.stop

    def dropped(self, exc: ServerError) -> None:
        """The request failed: re-raised unless the connection went (then it is made again)."""
        if exc.code != "unreachable":
            raise exc

    def again(self) -> bool:
        """After a response ended: whether to ask again from ``offset``.

        Raises:
            ServerError: ``_RETRIES`` responses in a row ended with no event
                and no end of the execution.
        """
        self.known._ended(self.reader)
        if self.reader.ended:
            return False
        self._failures = 0 if self._progressed else self._failures + 1
        if self._failures >= _RETRIES:
            raise ServerError(
                f"the events of execution {self.known.id} stopped before it ended, "
                f"{_RETRIES} times in a row; is the server at {self.url} up?",
                code="stream_incomplete",
            )
        return True


class _Known:
    """What the server said last about one execution; no I/O.

    Attributes:
        id: the execution's id (32 hex digits).
        session_id: the session it runs in.
        state: "queued", "running", "done" or "failed", as last seen.
        status: the result's status once done ("cancelled" when cancelled).
        code: its first 200 characters.
        events_end: events so far, as last seen (the next event's offset).
        result: the result once done, the same ``ExecutionResult`` a
            synchronous execute returns.
        error: why it could not run (state "failed"), as a ``ServerError``.
    """

    def __init__(self, session_id: str, data: dict[str, Any]) -> None:
        self.session_id = session_id
        self.id = str(data["id"])
        self.result: ExecutionResult | None = None
        self.error: ServerError | None = None
        self._update(data)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.id} {self.state} in session {self.session_id}>"

    def _update(self, data: dict[str, Any]) -> None:
        self.state: ExecutionState = data["state"]
        self.status: str | None = data.get("status")
        self.language = str(data.get("language", "python"))
        self.code = str(data.get("code", ""))
        self.created = str(data.get("created") or "")
        self.started: str | None = data.get("started")
        self.finished: str | None = data.get("finished")
        self.events_end = int(data.get("events", 0))
        if data.get("result") is not None:
            self.result = ExecutionResult.from_dict(data["result"])
        if data.get("error") is not None:
            self.error = error_event(data["error"])

    def _ended(self, reader: EventReader) -> None:
        """What the end of an event stream said."""
        if reader.result is not None:
            self.result, self.state, self.status = reader.result, "done", reader.result.status
        elif reader.error is not None:
            self.error, self.state = reader.error, "failed"

    def _outcome(self) -> ExecutionResult | None:
        if self.error is not None:
            raise self.error
        return self.result if self.state == "done" else None

    def _known_done(self) -> bool:
        return self.state in ("done", "failed")


class RemoteExecution(_Known):
    """A background execution on a server; made by ``RemoteSession.execute(background=True)``,
    ``RemoteSession.execution(id)`` or ``RemoteSession.executions()``.

    The handle is only an id: a new client (another process, after a
    restart) finds the same execution with ``client.attach(sid).execution(eid)``.
    """

    def __init__(self, client: Client, session_id: str, data: dict[str, Any]) -> None:
        super().__init__(session_id, data)
        self.client = client

    def refresh(self) -> ExecutionState:
        """Asks the server for the execution's state now (and its result once done)."""
        self._update(self.client._send(execution_calls.get(self.session_id, self.id)))
        return self.state

    def done(self) -> bool:
        """Whether it has ended; asks the server unless already known."""
        return self._known_done() or self.refresh() in ("done", "failed")

    def wait(self, timeout: float | None = None) -> ExecutionResult | None:
        """The result, once the execution has ended; None if ``timeout`` s pass first.

        Raises:
            ServerError: the execution could not run (the server's error), or
                the server cannot be reached.
        """
        waiting = _Waiting(timeout)
        while not self._known_done():
            chunk = waiting.next()
            if chunk is None:
                return None
            try:
                data = self.client._send(execution_calls.get(self.session_id, self.id, chunk))
            except ServerError as exc:
                waiting.refused(exc)
                continue
            self._update(data)
            if not self._known_done() and chunk == 0:
                time.sleep(_POLL)
        return self._outcome()

    def read(self, offset: int = 0) -> list[ExecutionEvent]:
        """The events from ``offset`` on that have happened so far, without waiting for more."""
        self.refresh()
        end = self.events_end
        return [] if offset >= end else list(self._stream(offset, end))

    def events(self, offset: int = 0) -> Iterator[ExecutionEvent]:
        """The events from ``offset``: those recorded, then the rest as they come.

        Ends when the execution ends (then ``result`` or ``error`` is set). A
        dropped connection is taken up again from the last event received.
        """
        return self._stream(offset, None)

    def _stream(self, offset: int, stop: int | None) -> Iterator[ExecutionEvent]:
        following = _Following(self, self.client.url, offset, stop)
        while True:
            try:
                for line in self.client._lines(following.call()):
                    event = following.feed(line)
                    if event is not None:
                        yield event
                        if following.reached():
                            return
            except ServerError as exc:
                following.dropped(exc)
            if not following.again():
                return

    def cancel(self) -> bool:
        """Stops it: out of the queue, or its kernel interrupted; answered once it has ended.

        Returns False if it had already ended (nothing to cancel); ``result``
        is then set either way.
        """
        try:
            self._update(self.client._send(execution_calls.cancel(self.session_id, self.id)))
        except ServerError as exc:
            if not _finished(exc):
                raise
            self.refresh()
            return False
        return True


class AsyncRemoteExecution(_Known):
    """A background execution on a server, from asyncio; see ``RemoteExecution``."""

    def __init__(self, client: AsyncClient, session_id: str, data: dict[str, Any]) -> None:
        super().__init__(session_id, data)
        self.client = client

    async def refresh(self) -> ExecutionState:
        """See ``RemoteExecution.refresh``."""
        self._update(await self.client._send(execution_calls.get(self.session_id, self.id)))
        return self.state

    async def done(self) -> bool:
        """See ``RemoteExecution.done``."""
        return self._known_done() or await self.refresh() in ("done", "failed")

    async def wait(self, timeout: float | None = None) -> ExecutionResult | None:
        """See ``RemoteExecution.wait``."""
        waiting = _Waiting(timeout)
        while not self._known_done():
            chunk = waiting.next()
            if chunk is None:
                return None
            call = execution_calls.get(self.session_id, self.id, chunk)
            try:
                data = await self.client._send(call)
            except ServerError as exc:
                waiting.refused(exc)
                continue
            self._update(data)
            if not self._known_done() and chunk == 0:
                await asyncio.sleep(_POLL)
        return self._outcome()

    async def read(self, offset: int = 0) -> list[ExecutionEvent]:
        """See ``RemoteExecution.read``."""
        await self.refresh()
        end = self.events_end
        return [] if offset >= end else [e async for e in self._stream(offset, end)]

    def events(self, offset: int = 0) -> AsyncIterator[ExecutionEvent]:
        """See ``RemoteExecution.events``."""
        return self._stream(offset, None)

    async def _stream(self, offset: int, stop: int | None) -> AsyncIterator[ExecutionEvent]:
        following = _Following(self, self.client.url, offset, stop)
        while True:
            try:
                async with contextlib.aclosing(self.client._lines(following.call())) as lines:
                    async for line in lines:
                        event = following.feed(line)
                        if event is not None:
                            yield event
                            if following.reached():
                                return
            except ServerError as exc:
                following.dropped(exc)
            if not following.again():
                return

    async def cancel(self) -> bool:
        """See ``RemoteExecution.cancel``."""
        try:
            data = await self.client._send(execution_calls.cancel(self.session_id, self.id))
        except ServerError as exc:
            if not _finished(exc):
                raise
            await self.refresh()
            return False
        self._update(data)
        return True
