"""Background executions: an execution that returns a handle at once and runs on.

``AsyncSession.execute(code, background=True)`` (and the server's
``POST /sessions/{id}/executions``) starts an execution as a task of its own
and hands back an ``Execution``: poll it (``state``, ``done()``), wait for it
(``await wait(timeout)``), read its live outputs from any offset
(``events(offset)``: what was recorded so far, then what comes), and cancel it.
The task does not depend on whoever started it: a caller that goes away (an
HTTP client that disconnects) can come back with the id.

Events are numbered from 0 in the order they happened. The log keeps the
newest events up to ``max_chars`` characters (an output's text or JSON, plus
a small overhead each), so a cell whose thread prints forever costs bounded
memory; a reader asking for events that were let go gets one ``dropped``
event (``{"outputs": n, "chars": about}``) in their place, then the rest. An
output alone bigger than ``max_chars`` (or not strict JSON) is a ``dropped``
event where it happened. The result still holds every output, capped as
every result is.

Cancelling: an execution still queued behind another one is taken out of
the queue (it never runs; its result says so); a running one is stopped as a
timeout is (the kernel is interrupted, and restarted if it does not stop
within the session's ``interrupt_grace``). Either way the result has status
``"cancelled"``.

A session's queue is bounded (``ExecutionStore``): at most ``max_queued``
executions not yet ended, holding at most ``max_queued_code`` of code
together (characters in the library, bytes of request bodies in the server).
One more raises ``QueueFullError`` before anything is queued, so a caller
that queues without end costs bounded memory.
"""

from __future__ import annotations

import asyncio
import contextvars
import secrets
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from .._exceptions import QueueFullError
from .._times import now
from ._live import LiveOutput, OutputListener, json_size
from ._models import ExecutionResult

__all__ = [
    "DEFAULT_MAX_CHARS",
    "MAX_QUEUED",
    "MAX_QUEUED_CODE",
    "Execution",
    "ExecutionCancelled",
    "ExecutionEvent",
    "ExecutionState",
    "ExecutionStore",
    "Reservation",
    "mark_started",
    "run_in_background",
    "start_execution",
]

ExecutionState = Literal["queued", "running", "done", "failed"]
DEFAULT_MAX_CHARS = 1_000_000
MAX_QUEUED = 32  # executions not yet ended that a session may hold
MAX_QUEUED_CODE = 64 * 1024 * 1024  # their code together (characters, or body bytes)
RETRY_AFTER = 2.0  # seconds a refused caller is told to wait
_OVERHEAD = 100  # characters an event is counted for besides its content (the dict, the entry)
_RUNNING: set[asyncio.Task[ExecutionResult]] = set()
_CURRENT: contextvars.ContextVar[Execution | None] = contextvars.ContextVar(
    "kernelexec_background", default=None
)


class ExecutionCancelled(asyncio.CancelledError):
    """The cancellation of a running execution, carrying the result recorded for it."""

    def __init__(self, result: ExecutionResult) -> None:
        super().__init__("the execution was cancelled")
        self.result = result


def mark_started() -> None:
    """Called by ``AsyncSession.execute`` once it holds the session: "queued" becomes "running"."""
    execution = _CURRENT.get()
    if execution is not None and execution.state == "queued":
        execution.state = "running"
        execution.started = now()


@dataclass(frozen=True)
class ExecutionEvent:
    """One event of an execution's log.

    Attributes:
        offset: its number; ``events(offset=event.offset + 1)`` resumes after it.
        kind: "output" (``data`` is the live output, as ``on_output`` sees it)
            or "dropped" (``data`` is ``{"outputs": n, "chars": about}``).
    """

    offset: int
    kind: Literal["output", "dropped"]
    data: dict[str, Any]

    @property
    def output(self) -> LiveOutput | None:
        """The output as a ``LiveOutput``; None for a "dropped" event."""
        return LiveOutput(self.data) if self.kind == "output" else None


class _Log:
    """The newest events, at most ``max_chars`` of them; older ones are let go and counted."""

    def __init__(self, max_chars: int) -> None:
        self.max_chars = max_chars
        self.first = 0  # the offset of the oldest event kept
        self.end = 0  # the offset the next event gets
        self._events: deque[tuple[ExecutionEvent, int]] = deque()
        self._chars = 0
        self._let_go_chars = 0
        self.changed = asyncio.Event()

    def add(self, output: dict[str, Any]) -> None:
        size = json_size(output)
        if size is None or size + _OVERHEAD > self.max_chars:
            event = ExecutionEvent(self.end, "dropped", {"outputs": 1, "chars": size or 0})
            size = 0
        else:
            event = ExecutionEvent(self.end, "output", output)
        self._events.append((event, size + _OVERHEAD))
        self._chars += size + _OVERHEAD
        self.end += 1
        while self._chars > self.max_chars and self._events:
            gone, cost = self._events.popleft()
            self._chars -= cost
            self._let_go_chars += cost - _OVERHEAD
            self.first = gone.offset + 1
        self.wake()

    def wake(self) -> None:
        self.changed.set()
        self.changed = asyncio.Event()

    def since(self, offset: int) -> list[ExecutionEvent]:
        """The events from ``offset`` on; a "dropped" one first for those let go."""
        found: list[ExecutionEvent] = []
        if offset < self.first:
            missed = self.first - offset
            about = self._let_go_chars * missed // max(self.first, 1)
            gap = {"outputs": missed, "chars": about}
            found.append(ExecutionEvent(self.first - 1, "dropped", gap))
            offset = self.first
        skip = offset - self.first
        found.extend(event for i, (event, _) in enumerate(self._events) if i >= skip)
        return found


Runner = Callable[[OutputListener], Awaitable[ExecutionResult]]


@dataclass(eq=False)
class Execution:
    """A handle on an execution running in the background.

    Attributes:
        id: 32 hex digits, unique.
        state: "queued" (waiting for the session), "running", "done" (``result``
            is set; its ``status`` says how it ended: "cancelled" when
            cancelled) or "failed" (it could not run: ``error`` says why).
        code: the first 200 characters of the code, to tell executions apart.
        created, started, finished: ISO 8601 times in UTC (None until then).
    """

    id: str
    code: str
    language: str
    max_chars: int = DEFAULT_MAX_CHARS
    state: ExecutionState = "queued"
    created: str = field(default_factory=now)
    started: str | None = None
    finished: str | None = None
    result: ExecutionResult | None = None
    error: BaseException | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # fields the server adds to the result
    _task: asyncio.Task[ExecutionResult] | None = field(default=None, repr=False)
    _log: _Log = field(init=False, repr=False)
    _cancelling: bool = field(default=False, repr=False)
    _began: bool = field(default=False, repr=False)  # its task has taken its first step

    def __post_init__(self) -> None:
        self._log = _Log(self.max_chars)

    @property
    def task(self) -> asyncio.Task[ExecutionResult]:
        assert self._task is not None
        return self._task

    @property
    def events_end(self) -> int:
        """The offset the next event gets: how many events there have been."""
        return self._log.end

    @property
    def status(self) -> str | None:
        """The result's status once done ("cancelled" when cancelled), as a remote one says."""
        return self.result.status if self.result is not None else None

    def done(self) -> bool:
        return self.state in ("done", "failed")

    async def wait(self, timeout: float | None = None) -> ExecutionResult | None:
        """The result, once the execution has ended; None if ``timeout`` s pass first.

        Raises:
            KernelexecError: the execution could not run (say, no kernel
                could be started); the same exception ``execute`` raises.
        """
        await asyncio.wait({self.task}, timeout=timeout)
        if self.error is not None:
            raise self.error
        return self.result if self.done() else None

    async def read(self, offset: int, timeout: float | None = None) -> list[ExecutionEvent]:
        """The events from ``offset`` on, waiting up to ``timeout`` s if there are none yet.

        An empty list: none came in time, or the execution has ended and
        there are no more.
        """
        offset = max(offset, 0)
        changed = self._log.changed
        found = self._log.since(offset)
        if found or self.done():
            return found
        waiter = asyncio.ensure_future(changed.wait())
        try:
            await asyncio.wait({waiter}, timeout=timeout)
        finally:
            waiter.cancel()
        return self._log.since(offset)

    async def events(self, offset: int = 0) -> AsyncIterator[ExecutionEvent]:
        """The execution's events from ``offset``: those recorded, then the rest as they come.

        Ends when the execution ends (then ``result`` or ``error`` is set).
        """
        while True:
            found = await self.read(offset)
            for event in found:
                yield event
                offset = event.offset + 1
            if not found and self.done():
                return

    def cancel(self) -> bool:
        """Stops the execution: takes it out of the queue, or interrupts the kernel running it.

        Returns False if it had already ended (nothing to cancel). ``await
        wait()`` then gives the result, with status "cancelled".
        """
        if self.done():
            return False
        if not self._cancelling:
            self._cancelling = True
            if not self._began:
                # A task cancelled before its first step ends without running ``_run``
                # at all: nothing else would say what became of it.
                self.result, self.state, self.finished = self._unrun(), "done", now()
            self.task.cancel()
        return True

    def to_dict(self) -> dict[str, Any]:
        """What the server says about it: its state, and its result or error once ended."""
        data: dict[str, Any] = {
            "id": self.id,
            "state": self.state,
            "status": self.status,
            "language": self.language,
            "code": self.code,
            "created": self.created,
            "started": self.started,
            "finished": self.finished,
            "events": self._log.end,
        }
        return data

    async def _run(self, run: Runner, on_output: OutputListener | None) -> ExecutionResult:
        """The task: its result is the execution's; it raises what stopped it from running."""
        self._began = True
        _CURRENT.set(self)

        def listen(live: LiveOutput) -> None:
            self._log.add(live.output)
            if on_output is not None:
                on_output(live)

        try:
            result = await run(listen)
            self.result, self.state = result, "done"
        except asyncio.CancelledError as exc:
            if not self._cancelling:
                self.state, self.error = "failed", exc
                raise  # cancelled from outside (the loop is stopping): not ours to swallow
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            result = exc.result if isinstance(exc, ExecutionCancelled) else self._unrun()
            self.result, self.state = result, "done"
        except Exception as exc:
            self.state, self.error = "failed", exc
            raise
        finally:
            self.finished = now()
            self._log.wake()
        return result

    def _unrun(self) -> ExecutionResult:
        ran = self.started is not None
        message = (
            "Cancelled while the session was finishing this execution."
            if ran
            else "Cancelled before it ran (it was waiting for the session); nothing ran."
        )
        return ExecutionResult(
            status="cancelled",
            text=f"[kernelexec] {message}\n",
            message=message,
            language=self.language,
        )


def start_execution(
    run: Runner,
    *,
    code: str | bytes,
    language: str | None,
    on_output: OutputListener | None = None,
    max_chars: int = DEFAULT_MAX_CHARS,
) -> Execution:
    """Starts ``run(listener)`` as a task and returns its handle at once.

    Args:
        run: runs the execution, passing every live output to the listener
            it is given (``AsyncSession.execute(on_output=listener)``).
        code, language: what runs, for ``to_dict``.
        on_output: also called with each live output.
        max_chars: characters of events the log keeps.
    """
    shown = code if isinstance(code, str) else code.decode("utf-8", "replace")
    execution = Execution(
        secrets.token_hex(16), shown[:200], language or "python", max_chars=max_chars
    )
    # The task has its own copy of the context: the "started" mark reaches this execution only.
    task = asyncio.get_running_loop().create_task(execution._run(run, on_output))
    execution._task = task
    # The loop keeps only weak references to tasks: one nobody awaits must not be collected.
    _RUNNING.add(task)
    task.add_done_callback(_retrieved)
    return execution


def _retrieved(task: asyncio.Task[ExecutionResult]) -> None:
    _RUNNING.discard(task)
    if not task.cancelled():
        task.exception()  # kept in Execution.error; wait() raises it to whoever asks


def run_in_background(
    execute: Callable[..., Awaitable[ExecutionResult]],
    code: str | bytes,
    *,
    language: str | None,
    on_output: OutputListener | None,
    **options: Any,
) -> Execution:
    """``AsyncSession.execute(background=True)``: ``execute`` (the same method) as a task."""

    def run(listener: OutputListener) -> Awaitable[ExecutionResult]:
        return execute(code, language=language, on_output=listener, **options)

    return start_execution(run, code=code, language=language, on_output=on_output)


class Reservation:
    """Room held in a session's queue for one execution, from before its code is read.

    Released when the execution ends (``ExecutionStore.add`` sees to it), or
    by ``release`` if it never starts. Releasing twice is harmless.
    """

    def __init__(self, store: ExecutionStore, size: int) -> None:
        self._store: ExecutionStore | None = store
        self.size = size

    def grow(self, size: int) -> None:
        """Holds ``size`` more (a body longer than it said); QueueFullError if it does not fit."""
        if self._store is not None:
            self._store._check(size, counting=False)
            self._store._held += size
            self.size += size

    def release(self) -> None:
        if self._store is not None:
            self._store._held -= self.size
            self._store._reserved -= 1
            self._store = None


class ExecutionStore:
    """A session's executions by id: every one not finished, and the newest finished ones.

    It also bounds the session's queue: ``reserve`` refuses, with
    ``QueueFullError``, a new execution past ``max_queued`` not yet ended or
    past ``max_queued_code`` of their code together.

    Args:
        keep: finished executions kept (older ones are forgotten, oldest first).
        max_queued: executions not yet ended (queued or running) at once.
        max_queued_code: their code together, in ``unit``.
        named: what sets the caps, for the refusal's message.
        unit: what ``reserve`` counts ("characters" of code, or "bytes" of requests).
    """

    def __init__(
        self,
        keep: int = 16,
        *,
        max_queued: int = MAX_QUEUED,
        max_queued_code: int = MAX_QUEUED_CODE,
        named: str = "",
        unit: str = "characters",
    ) -> None:
        self.keep = keep
        self.max_queued = max_queued
        self.max_queued_code = max_queued_code
        self._named = f" ({named})" if named else ""
        self._unit = unit
        self._executions: dict[str, Execution] = {}
        self._reserved = 0  # reservations not yet released: executions not yet ended
        self._held = 0  # the code they hold

    @property
    def queued_code(self) -> int:
        """Code held by executions not yet ended (and those being received)."""
        return self._held

    def reserve(self, size: int) -> Reservation:
        """Room for one more execution of ``size``; QueueFullError when there is none."""
        self._check(size, counting=True)
        self._reserved += 1
        self._held += size
        return Reservation(self, size)

    def _check(self, size: int, *, counting: bool) -> None:
        if counting and self._reserved >= self.max_queued:
            raise QueueFullError(
                f"the session already holds {self._reserved} executions not yet ended, "
                f"its most{self._named}; wait for one to end, or cancel one",
                retry_after=RETRY_AFTER,
            )
        if self._held + size > self.max_queued_code:
            raise QueueFullError(
                f"the session's executions not yet ended hold {self._held:,} {self._unit} of "
                f"code, and {size:,} more would pass its most, {self.max_queued_code:,}"
                f"{self._named}; wait for one to end, or cancel one",
                retry_after=RETRY_AFTER,
            )

    def add(self, execution: Execution, reservation: Reservation | None = None) -> Execution:
        self._executions[execution.id] = execution

        def ended(_: object) -> None:
            if reservation is not None:
                reservation.release()
            self._trim()

        execution.task.add_done_callback(ended)
        self._trim()
        return execution

    def get(self, execution_id: str) -> Execution | None:
        return self._executions.get(execution_id)

    def all(self) -> list[Execution]:
        """Oldest first."""
        return sorted(self._executions.values(), key=lambda e: e.created)

    def running(self) -> list[Execution]:
        return [e for e in self._executions.values() if not e.done()]

    def _trim(self) -> None:
        finished = sorted(
            (e for e in self._executions.values() if e.done()), key=lambda e: e.finished or ""
        )
        for old in finished[: max(len(finished) - self.keep, 0)]:
            del self._executions[old.id]
