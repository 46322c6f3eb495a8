"""AsyncClient and AsyncRemoteSession: a kernelexec server, from asyncio.

The same methods as ``Client`` and ``RemoteSession``, as coroutines; the
requests and the reading of answers are shared (``_base``, ``_sse``).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, Awaitable, Callable, Generator, Mapping, Sequence
from types import TracebackType
from typing import Any, Literal, TypeVar, overload

import httpx

from .._execution._live import OutputListener
from .._execution._models import ExecutionResult, Limits
from .._remote_models import CheckpointInfo, FileInfo, SessionInfo
from .._state._fork import ForkMethod, ForkReport
from .._state._manifest import RestoreReport
from .._state._variables import Variable, VariableDetail
from ._base import (
    DEFAULT_URL,
    Call,
    Made,
    calls,
    error_for,
    http_options,
    session_options,
    unreachable,
)
from ._executions import AsyncRemoteExecution, execution_calls
from ._sse import StreamReader

__all__ = ["AsyncClient", "AsyncRemoteSession", "OpeningSession"]

T = TypeVar("T")


class AsyncClient:
    """A kernelexec server, used from asyncio; see ``Client`` for the arguments."""

    def __init__(
        self, url: str = DEFAULT_URL, *, token: str | None = None, timeout: float = 30.0
    ) -> None:
        self.url = url
        self.timeout = timeout
        self._http = httpx.AsyncClient(**http_options(url, token))

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Closes the connections; the server's sessions stay."""
        await self._http.aclose()

    async def health(self) -> dict[str, Any]:
        return await self._send(calls.health())

    def session(
        self,
        *,
        kernel_name: str = "python3",
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
        python: str | None = None,
        venv: str | None = None,
        packages: Sequence[str] | None = None,
        python_version: str | None = None,
        preload: str | None = None,
        limits: Limits | Mapping[str, int] | None = None,
        docker: Mapping[str, Any] | None = None,
        gateway: str | None = None,
        sandbox: Mapping[str, Any] | None = None,
        ray: Mapping[str, Any] | None = None,
        checkpoint_every: float | None = None,
        checkpoint: str | CheckpointInfo | None = None,
    ) -> OpeningSession:
        """Creates a session on the server; see ``Client.session``.

        ``await client.session()`` gives the session; ``async with
        client.session() as s`` also deletes it on exit, as ``with`` does
        for ``Client.session()``.
        """

        options = session_options(
            python=python,
            venv=venv,
            packages=packages,
            python_version=python_version,
            preload=preload,
            limits=limits,
            docker=docker,
            gateway=gateway,
            sandbox=sandbox,
            ray=ray,
            checkpoint_every=checkpoint_every,
        )

        checkpoint_id = checkpoint.id if isinstance(checkpoint, CheckpointInfo) else checkpoint

        async def create() -> AsyncRemoteSession:
            call = calls.create_made(kernel_name, env, timeout, options, checkpoint_id)
            made = await self._send(call)
            return AsyncRemoteSession(self, made)

        return OpeningSession(create)

    def restore(self, checkpoint: str | CheckpointInfo, **options: Any) -> OpeningSession:
        """A new session holding a checkpoint's state: ``session(checkpoint=...)``."""
        return self.session(checkpoint=checkpoint, **options)

    async def checkpoints(self) -> list[CheckpointInfo]:
        return await self._send(calls.checkpoints())

    async def checkpoint(self, checkpoint_id: str) -> CheckpointInfo:
        return await self._send(calls.checkpoint_info(checkpoint_id))

    async def delete_checkpoint(self, checkpoint_id: str) -> None:
        await self._send(calls.delete_checkpoint(checkpoint_id))

    def attach(self, session_id: str) -> OpeningSession:
        """An existing session, by id: awaited, or used with ``async with`` (deleted on exit)."""

        async def find() -> AsyncRemoteSession:
            info = await self._send(calls.info(session_id))
            return AsyncRemoteSession(self, info)

        return OpeningSession(find)

    async def sessions(self) -> list[SessionInfo]:
        return await self._send(calls.sessions())

    async def _send(self, call: Call[T]) -> T:
        try:
            response = await self._http.request(
                call.method, call.path, **call.options(self.timeout)
            )
        except httpx.TransportError as exc:
            raise unreachable(self.url, exc) from exc
        if call.raises(response):
            raise error_for(response)
        return call.read(response)

    async def _read_head(self, call: Call[Any], limit: int, whole: bool) -> tuple[bytes, int]:
        """At most ``limit`` bytes of a download, and its whole size; with ``whole``,
        nothing of a body over ``limit`` is read (its bytes come back empty)."""
        try:
            async with self._http.stream(
                call.method, call.path, **call.options(self.timeout)
            ) as response:
                if response.is_error:
                    await response.aread()
                    raise error_for(response)
                declared = response.headers.get("content-length", "")
                size = int(declared) if declared.isdigit() else -1
                if whole and size > limit:
                    return b"", size
                chunks, got = [], 0
                async for chunk in response.aiter_bytes():
                    chunks.append(chunk)
                    got += len(chunk)
                    if got > limit:
                        break  # never more of a file in memory than asked for
        except httpx.TransportError as exc:
            raise unreachable(self.url, exc) from exc
        return b"".join(chunks)[:limit], size if size >= 0 else got

    async def _send_stream(
        self, call: Call[ExecutionResult], on_output: OutputListener
    ) -> ExecutionResult:
        reader = StreamReader(on_output)
        async with contextlib.aclosing(self._lines(call)) as lines:
            async for line in lines:
                reader.feed(line)
        return reader.result()

    async def _lines(self, call: Call[Any]) -> AsyncGenerator[str, None]:
        """The lines of a streamed answer, as they come; closed when the iterator is."""
        try:
            async with self._http.stream(
                call.method, call.path, **call.options(self.timeout)
            ) as response:
                if response.is_error:
                    await response.aread()
                    raise error_for(response)
                async for line in response.aiter_lines():
                    yield line
        except httpx.TransportError as exc:
            raise unreachable(self.url, exc) from exc


class OpeningSession:
    """What ``AsyncClient.session()`` and ``attach()`` return: await it, or enter it.

    A coroutine cannot be used with ``async with``, yet that is how the sync
    ``with client.session()`` reads in async code; so the request is made
    only when this is awaited or entered, and leaving the ``async with``
    block deletes the session (its files stay on the server).
    """

    def __init__(self, open_session: Callable[[], Awaitable[AsyncRemoteSession]]) -> None:
        self._open = open_session
        self._session: AsyncRemoteSession | None = None

    def __await__(self) -> Generator[Any, None, AsyncRemoteSession]:
        return self._open().__await__()

    async def __aenter__(self) -> AsyncRemoteSession:
        self._session = await self._open()
        return self._session

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.__aexit__(exc_type, exc, tb)


class AsyncRemoteSession:
    """A session on a server, from asyncio; see ``RemoteSession``."""

    def __init__(self, client: AsyncClient, info: SessionInfo | Made) -> None:
        made = info if isinstance(info, Made) else Made(info)
        self.client = client
        self.id = made.info.id
        self.last_info = made.info
        self.fork_report: ForkReport | None = made.fork_report
        self.restore_report: RestoreReport | None = made.restore_report

    def __repr__(self) -> str:
        return f"<AsyncRemoteSession {self.id} at {self.client.url}>"

    async def __aenter__(self) -> AsyncRemoteSession:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def info(self) -> SessionInfo:
        self.last_info = await self.client._send(calls.info(self.id))
        return self.last_info

    @overload
    async def execute(
        self,
        code: str,
        *,
        language: str | None = ...,
        timeout: float | None = ...,
        stdin: Sequence[str] | None = ...,
        on_output: OutputListener | None = ...,
        background: Literal[False] = ...,
    ) -> ExecutionResult: ...

    @overload
    async def execute(
        self,
        code: str,
        *,
        language: str | None = ...,
        timeout: float | None = ...,
        stdin: Sequence[str] | None = ...,
        on_output: None = ...,
        background: Literal[True],
    ) -> AsyncRemoteExecution: ...

    async def execute(
        self,
        code: str,
        *,
        language: str | None = "python",
        timeout: float | None = None,
        stdin: Sequence[str] | None = None,
        on_output: OutputListener | None = None,
        background: bool = False,
    ) -> ExecutionResult | AsyncRemoteExecution:
        """See ``RemoteSession.execute``."""
        if background:
            if on_output is not None:
                raise TypeError("on_output= with background=True: iterate execution.events()")
            start = execution_calls.start(self.id, code, language, timeout, stdin)
            return AsyncRemoteExecution(self.client, self.id, await self.client._send(start))
        call = calls.execute(self.id, code, language, timeout, stdin, stream=bool(on_output))
        if on_output is None:
            return await self.client._send(call)
        return await self.client._send_stream(call, on_output)

    async def execution(self, execution_id: str) -> AsyncRemoteExecution:
        """See ``RemoteSession.execution``."""
        data = await self.client._send(execution_calls.get(self.id, execution_id))
        return AsyncRemoteExecution(self.client, self.id, data)

    async def executions(self) -> list[AsyncRemoteExecution]:
        """See ``RemoteSession.executions``."""
        listed = await self.client._send(execution_calls.list(self.id))
        return [AsyncRemoteExecution(self.client, self.id, data) for data in listed]

    async def interrupt(self) -> None:
        await self.client._send(calls.interrupt(self.id))

    async def restart(self) -> None:
        await self.client._send(calls.restart(self.id))

    async def fork(self, *, wait: bool = True, method: ForkMethod = "auto") -> AsyncRemoteSession:
        """See ``RemoteSession.fork``."""
        made = await self.client._send(calls.fork(self.id, wait, method))
        return AsyncRemoteSession(self.client, made)

    async def checkpoint(self, *, files: bool = True) -> CheckpointInfo:
        """See ``RemoteSession.checkpoint``."""
        return await self.client._send(calls.checkpoint(self.id, files))

    async def variables(self) -> list[Variable]:
        """The kernel's variables, without running a cell (as ``AsyncSession.variables``)."""
        return await self.client._send(calls.variables(self.id))

    async def inspect(self, name: str) -> VariableDetail | None:
        """One variable in detail, or None if the kernel has no such name."""
        return await self.client._send(calls.inspect(self.id, name))

    async def files(self) -> list[FileInfo]:
        return await self.client._send(calls.files(self.id))

    async def download(self, path: str) -> bytes:
        return await self.client._send(calls.download(self.id, path))

    async def upload(self, path: str, data: bytes | str) -> FileInfo:
        return await self.client._send(calls.upload(self.id, path, data))

    async def notebook(self) -> dict[str, Any]:
        return await self.client._send(calls.notebook(self.id))

    async def close(self, *, purge: bool = False) -> None:
        await self.client._send(calls.delete(self.id, purge))
