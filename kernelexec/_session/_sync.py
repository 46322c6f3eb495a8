"""Session: the synchronous face of AsyncSession.

Every call runs the async method on one event loop in a daemon thread shared by
all sync sessions, so a Session also works where an event loop is already
running in the caller's thread (a Jupyter notebook, an async framework).
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import threading
from collections.abc import Coroutine, Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, TypeVar, overload

from .._containment._sandbox import Sandbox
from .._execution._background import Execution, ExecutionEvent, ExecutionState
from .._execution._live import OutputListener
from .._execution._models import ExecutionResult
from .._markdown._blocks import BlockResult
from .._remote_models import FileInfo
from .._state._fork import ForkMethod, ForkReport
from .._state._manifest import Checkpoint, RestoreReport
from .._state._variables import Variable, VariableDetail
from ._async import AsyncSession
from ._replay import ReplayReport

__all__ = ["Session", "SyncExecution"]

T = TypeVar("T")

_loop: asyncio.AbstractEventLoop | None = None
_loop_lock = threading.Lock()
_open: set[AsyncSession] = set()


def _portal_loop() -> asyncio.AbstractEventLoop:
    global _loop
    with _loop_lock:
        if _loop is None:
            _loop = asyncio.new_event_loop()
            threading.Thread(target=_loop.run_forever, name="kernelexec", daemon=True).start()
        return _loop


def _call(coro: Coroutine[Any, Any, T]) -> T:
    future = asyncio.run_coroutine_threadsafe(coro, _portal_loop())
    try:
        return future.result()
    except KeyboardInterrupt:
        # Ctrl-C in the caller interrupts the kernel too, then propagates.
        future.cancel()
        try:
            future.result(timeout=10)
        except (concurrent.futures.CancelledError, concurrent.futures.TimeoutError, Exception):
            pass
        raise


async def _cancel(execution: Execution) -> bool:
    return execution.cancel()  # on the loop's thread: a task is cancelled from its own loop


class SyncExecution:
    """``Session.execute(background=True)``: an ``Execution``, synchronously.

    The execution runs on the sessions' event loop thread whatever the
    caller's thread does; these methods only look at it, wait for it or
    cancel it. ``async_execution`` is the ``Execution`` underneath.
    """

    def __init__(self, execution: Execution) -> None:
        self.async_execution = execution

    def __repr__(self) -> str:
        return f"<SyncExecution {self.id} {self.state}>"

    @property
    def id(self) -> str:
        """Its id, unique in its session (what ``Session.execution`` takes)."""
        return self.async_execution.id

    @property
    def state(self) -> ExecutionState:
        """The state: "queued", "running", "done" or "failed"; see ``Execution``."""
        return self.async_execution.state

    @property
    def status(self) -> str | None:
        """The result's status once done ("cancelled" when cancelled)."""
        return self.async_execution.status

    @property
    def code(self) -> str:
        """The first 200 characters of the code."""
        return self.async_execution.code

    @property
    def language(self) -> str:
        """The language it runs as: "python" or "bash"."""
        return self.async_execution.language

    @property
    def created(self) -> str:
        """When it was asked for (ISO 8601, UTC)."""
        return self.async_execution.created

    @property
    def started(self) -> str | None:
        """When it began to run (ISO 8601, UTC), or None."""
        return self.async_execution.started

    @property
    def finished(self) -> str | None:
        """When it ended (ISO 8601, UTC), or None."""
        return self.async_execution.finished

    @property
    def events_end(self) -> int:
        """The offset the next event gets."""
        return self.async_execution.events_end

    @property
    def result(self) -> ExecutionResult | None:
        """The result once done (status "cancelled" when cancelled)."""
        return self.async_execution.result

    @property
    def error(self) -> BaseException | None:
        """Why it could not run (state "failed")."""
        return self.async_execution.error

    def done(self) -> bool:
        """Whether it has ended (done, cancelled or failed)."""
        return self.async_execution.done()

    def wait(self, timeout: float | None = None) -> ExecutionResult | None:
        """The result, once ended; None if ``timeout`` s pass first. See ``Execution.wait``."""
        return _call(self.async_execution.wait(timeout))

    def read(self, offset: int = 0, timeout: float | None = None) -> list[ExecutionEvent]:
        """The events from ``offset`` on, waiting up to ``timeout`` s for one (Execution.read)."""
        return _call(self.async_execution.read(offset, timeout))

    def events(self, offset: int = 0) -> Iterator[ExecutionEvent]:
        """The events from ``offset``: those recorded, then the rest as they come; ends with it."""
        while True:
            found = self.read(offset)
            yield from found
            if found:
                offset = found[-1].offset + 1
            elif self.done():
                return

    def cancel(self) -> bool:
        """Stops it (out of the queue, or the kernel interrupted); False if it had ended."""
        return _call(_cancel(self.async_execution))


class Session:
    """A synchronous AsyncSession; takes the same arguments."""

    def __init__(
        self,
        work_dir: str | Path | None = None,
        *,
        packages: Sequence[str] | None = None,
        python_version: str | None = None,
        venv: str | Path | None = None,
        **options: Any,
    ) -> None:
        self._async = AsyncSession(
            work_dir, packages=packages, python_version=python_version, venv=venv, **options
        )

    @classmethod
    def from_transcript(
        cls,
        path: str | Path,
        work_dir: str | Path | None = None,
        *,
        until: int | None = None,
        include_failed: bool = False,
        **options: Any,
    ) -> Session:
        """AsyncSession.from_transcript, synchronously."""
        session = cls.__new__(cls)
        session._async = _call(
            AsyncSession.from_transcript(
                path, work_dir, until=until, include_failed=include_failed, **options
            )
        )
        _open.add(session._async)
        return session

    @classmethod
    def restore(
        cls,
        checkpoint: Checkpoint | str | Path,
        work_dir: str | Path | None = None,
        *,
        load_timeout: float = 300.0,
        variable_timeout: float = 30.0,
        **options: Any,
    ) -> Session:
        """AsyncSession.restore, synchronously."""
        session = cls.__new__(cls)
        session._async = _call(
            AsyncSession.restore(
                checkpoint,
                work_dir,
                load_timeout=load_timeout,
                variable_timeout=variable_timeout,
                **options,
            )
        )
        _open.add(session._async)
        return session

    @property
    def replay_report(self) -> ReplayReport | None:
        """What ``from_transcript`` replayed, for a session it made; else None."""
        return self._async.replay_report

    @property
    def restore_report(self) -> RestoreReport | None:
        """What ``restore`` brought back, for a session it made; else None."""
        return self._async.restore_report

    @property
    def fork_report(self) -> ForkReport | None:
        """How ``fork`` made this session (a process or a checkpoint, and why); else None."""
        return self._async.fork_report

    def __repr__(self) -> str:
        return repr(self._async).replace("AsyncSession", "Session", 1)

    def __enter__(self) -> Session:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def work_dir(self) -> Path:
        """The session's work dir: the kernel's cwd, where its outputs and transcript go."""
        return self._async.work_dir

    @property
    def notebook_path(self) -> Path:
        """The session's transcript (``transcript.ipynb`` in the work dir)."""
        return self._async.notebook_path

    @property
    def closed(self) -> bool:
        """Whether ``close()`` was called; a closed session runs nothing more."""
        return self._async.closed

    @property
    def sandbox(self) -> Sandbox | None:
        """See ``AsyncSession.sandbox``."""
        return self._async.sandbox

    @property
    def connection_info(self) -> dict[str, Any] | None:
        """See ``AsyncSession.connection_info``."""
        return self._async.connection_info

    def start(self) -> Session:
        """Starts the kernel now rather than on the first execution."""
        _call(self._async.start())
        _open.add(self._async)
        return self

    @overload
    def execute(
        self,
        code: str | bytes,
        *,
        language: str | None = ...,
        timeout: float | None = ...,
        stdin: Sequence[str] | None = ...,
        on_output: OutputListener | None = ...,
        background: Literal[False] = ...,
    ) -> ExecutionResult: ...

    @overload
    def execute(
        self,
        code: str | bytes,
        *,
        language: str | None = ...,
        timeout: float | None = ...,
        stdin: Sequence[str] | None = ...,
        on_output: OutputListener | None = ...,
        background: Literal[True],
    ) -> SyncExecution: ...

    def execute(
        self,
        code: str | bytes,
        *,
        language: str | None = "python",
        timeout: float | None = None,
        stdin: Sequence[str] | None = None,
        on_output: OutputListener | None = None,
        background: bool = False,
    ) -> ExecutionResult | SyncExecution:
        """AsyncSession.execute, synchronously; ``background`` gives a ``SyncExecution`` at once.

        ``on_output`` is called on the sessions' event loop thread, not the caller's.
        """
        _open.add(self._async)
        if background:
            execution = _call(
                self._async.execute(
                    code,
                    language=language,
                    timeout=timeout,
                    stdin=stdin,
                    on_output=on_output,
                    background=True,
                )
            )
            return SyncExecution(execution)
        return _call(
            self._async.execute(
                code, language=language, timeout=timeout, stdin=stdin, on_output=on_output
            )
        )

    def run_markdown(
        self,
        text: str,
        *,
        timeout: float | None = None,
        on_output: OutputListener | None = None,
        strict: bool = False,
    ) -> list[BlockResult]:
        """AsyncSession.run_markdown, synchronously: one ``BlockResult`` per fenced block."""
        _open.add(self._async)
        return _call(
            self._async.run_markdown(text, timeout=timeout, on_output=on_output, strict=strict)
        )

    def interrupt(self) -> None:
        """Interrupts what the kernel runs now, as Ctrl-C would; its state is kept."""
        _call(self._async.interrupt())

    def restart(self, *, keep_state: bool = False) -> RestoreReport | None:
        """Replaces the kernel with a fresh one; see ``AsyncSession.restart``.

        Args:
            keep_state: carry the variables and imports over (checkpoint,
                restart, restore); the report says what came back and what did not.
        """
        return _call(self._async.restart(keep_state=keep_state))

    def checkpoint(
        self,
        path: str | Path | None = None,
        *,
        files: bool = True,
        timeout: float = 300.0,
        variable_timeout: float = 30.0,
    ) -> Checkpoint:
        """AsyncSession.checkpoint, synchronously."""
        _open.add(self._async)
        return _call(
            self._async.checkpoint(
                path, files=files, timeout=timeout, variable_timeout=variable_timeout
            )
        )

    def fork(
        self,
        work_dir: str | Path | None = None,
        *,
        wait: bool = True,
        method: ForkMethod = "auto",
        max_bytes: int | None = None,
    ) -> Session:
        """AsyncSession.fork, synchronously: a new Session."""
        _open.add(self._async)
        child = Session.__new__(Session)
        made = self._async.fork(work_dir, wait=wait, method=method, max_bytes=max_bytes)
        child._async = _call(made)
        _open.add(child._async)
        return child

    def files(self) -> list[FileInfo]:
        """AsyncSession.files, synchronously: the session's files."""
        return _call(self._async.files())

    def download(self, path: str) -> bytes:
        """AsyncSession.download, synchronously: a file of the session's, whole."""
        return _call(self._async.download(path))

    def upload(self, path: str, data: bytes | str) -> FileInfo:
        """AsyncSession.upload, synchronously: a file where the kernel reads it."""
        return _call(self._async.upload(path, data))

    def variables(self) -> list[Variable]:
        """AsyncSession.variables, synchronously; from another thread while a cell runs."""
        return _call(self._async.variables())

    def inspect(self, name: str) -> VariableDetail | None:
        """AsyncSession.inspect, synchronously; None for an unknown name."""
        return _call(self._async.inspect(name))

    def flush(self) -> None:
        """Returns once the transcript file holds every execution so far."""
        _call(self._async.flush())

    def close(self) -> None:
        """Shuts the kernel (and its children) down; files and transcript stay."""
        _open.discard(self._async)
        _call(self._async.close())


@atexit.register
def _close_open_sessions() -> None:
    # Flushes transcripts and stops kernels of sessions nobody closed.
    if _loop is None or not _open:
        return
    for session in list(_open):
        try:
            asyncio.run_coroutine_threadsafe(session.close(), _loop).result(timeout=10)
        except Exception:
            pass
