"""Client and RemoteSession: a kernelexec server, synchronously."""

from __future__ import annotations

import contextlib
from collections.abc import Generator, Mapping, Sequence
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
from ._executions import RemoteExecution, execution_calls
from ._sse import StreamReader

__all__ = ["Client", "RemoteSession"]

T = TypeVar("T")


class Client:
    """A kernelexec server (``kernelexec serve``), used synchronously.

    Args:
        url: the server's address.
        token: the server's token; default ``$KERNELEXEC_TOKEN``.
        timeout: seconds for requests that do not wait on a kernel; those that
            do (creating a session, executing, restarting) wait as long as the
            server's own timeouts let them.

    Every method raises ``ServerError`` when the server refuses or cannot be
    reached; ``AuthenticationError``, ``SessionNotFoundError`` and
    ``SessionCulledError`` are the cases worth telling apart. A user's code
    failing is not one: it comes back as an ExecutionResult.
    """

    def __init__(
        self, url: str = DEFAULT_URL, *, token: str | None = None, timeout: float = 30.0
    ) -> None:
        self.url = url
        self.timeout = timeout
        self._http = httpx.Client(**http_options(url, token))

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Closes the connections; the server's sessions stay."""
        self._http.close()

    def health(self) -> dict[str, Any]:
        return self._send(calls.health())

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
    ) -> RemoteSession:
        """Creates a session (a new kernel and work dir) on the server.

        Args:
            kernel_name: a kernelspec installed on the server.
            env: variables for the kernel.
            timeout: default seconds per execution; default the server's.
            python: an interpreter for the kernel, one the server allows
                (``--allow-python``).
            venv: a venv's name, made or reused in the server's venv root
                (``--allow-packages``).
            packages: requirements installed in the session's venv (``--allow-packages``).
            python_version: the venv's Python version (``--allow-packages``).
            preload: code each kernel runs first; replaces the server's ``--preload``.
            limits: output caps (``Limits`` or a dict of some), at most the server's.
            docker: run the kernel in a container (``--allow-docker``), e.g.
                ``{"memory": "512m", "cpus": 1, "pids_limit": 128}``.
            gateway: a gateway's URL to run the kernel on (``--allow-gateway``).
            sandbox: the local kernel's containment, within the operator's:
                ``{"network": True}`` (``--allow-network``), lower ``memory``
                (bytes), ``processes``, ``open_files``.
            ray: what the session holds on the server's Ray cluster (``--ray``):
                ``{"num_cpus": 1, "memory": ..., "num_gpus": 1, "resources":
                {...}, "labels": {...}}``, within the operator's caps.
            checkpoint_every: seconds between recovery checkpoints: a kernel
                that dies is replaced at the next execution by one holding the
                variables of the last (``AsyncSession(checkpoint_every=...)``).
            checkpoint: a checkpoint of the server's (or its id) to start
                from: its variables, imports and files; ``restore_report``
                on the session says what came back.

        Raises:
            ServerError: status 403 for an option the server does not allow
                (the message names the flag), 422 for a value it cannot use
                (or a damaged checkpoint), 404 for an unknown checkpoint, 409
                for one made by another Python or package versions.
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
        made = self._send(calls.create_made(kernel_name, env, timeout, options, checkpoint_id))
        return RemoteSession(self, made)

    def restore(self, checkpoint: str | CheckpointInfo, **options: Any) -> RemoteSession:
        """A new session holding a checkpoint's state: ``session(checkpoint=...)``."""
        return self.session(checkpoint=checkpoint, **options)

    def checkpoints(self) -> list[CheckpointInfo]:
        """The server's checkpoints, oldest first."""
        return self._send(calls.checkpoints())

    def checkpoint(self, checkpoint_id: str) -> CheckpointInfo:
        """One checkpoint of the server's, by id."""
        return self._send(calls.checkpoint_info(checkpoint_id))

    def delete_checkpoint(self, checkpoint_id: str) -> None:
        """Removes a checkpoint from the server."""
        self._send(calls.delete_checkpoint(checkpoint_id))

    def attach(self, session_id: str) -> RemoteSession:
        """An existing session, by id."""
        return RemoteSession(self, self._send(calls.info(session_id)))

    def sessions(self) -> list[SessionInfo]:
        return self._send(calls.sessions())

    def _send(self, call: Call[T]) -> T:
        """Sends one request and reads its answer."""
        try:
            response = self._http.request(call.method, call.path, **call.options(self.timeout))
        except httpx.TransportError as exc:
            raise unreachable(self.url, exc) from exc
        if call.raises(response):
            raise error_for(response)
        return call.read(response)

    def _send_stream(
        self, call: Call[ExecutionResult], on_output: OutputListener
    ) -> ExecutionResult:
        """Sends an execution to the streaming route, calling ``on_output`` as outputs come."""
        reader = StreamReader(on_output)
        with contextlib.closing(self._lines(call)) as lines:
            for line in lines:
                reader.feed(line)
        return reader.result()

    def _lines(self, call: Call[Any]) -> Generator[str, None, None]:
        """The lines of a streamed answer, as they come; closed when the iterator is."""
        try:
            with self._http.stream(
                call.method, call.path, **call.options(self.timeout)
            ) as response:
                if response.is_error:
                    response.read()
                    raise error_for(response)
                yield from response.iter_lines()
        except httpx.TransportError as exc:
            raise unreachable(self.url, exc) from exc


class RemoteSession:
    """A session on a server; the counterpart of a local ``Session``.

    Made by ``Client.session()`` or ``Client.attach()``. Closing it (or leaving
    its ``with`` block) deletes it from the server; its files stay there.
    """

    def __init__(self, client: Client, info: SessionInfo | Made) -> None:
        made = info if isinstance(info, Made) else Made(info)
        self.client = client
        self.id = made.info.id
        self.last_info = made.info
        self.fork_report: ForkReport | None = made.fork_report  # set when made by fork()
        self.restore_report: RestoreReport | None = made.restore_report  # from a checkpoint

    def __repr__(self) -> str:
        return f"<RemoteSession {self.id} at {self.client.url}>"

    def __enter__(self) -> RemoteSession:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def info(self) -> SessionInfo:
        """The session's state now ("idle", "busy", "culled", ...)."""
        self.last_info = self.client._send(calls.info(self.id))
        return self.last_info

    @overload
    def execute(
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
    def execute(
        self,
        code: str,
        *,
        language: str | None = ...,
        timeout: float | None = ...,
        stdin: Sequence[str] | None = ...,
        on_output: None = ...,
        background: Literal[True],
    ) -> RemoteExecution: ...

    def execute(
        self,
        code: str,
        *,
        language: str | None = "python",
        timeout: float | None = None,
        stdin: Sequence[str] | None = None,
        on_output: OutputListener | None = None,
        background: bool = False,
    ) -> ExecutionResult | RemoteExecution:
        """Runs code as ``Session.execute`` does; ``on_output`` streams the outputs live.

        Args:
            background: start it and return a ``RemoteExecution`` at once
                (``POST /sessions/{id}/executions``); it runs on the server
                whatever becomes of this client: wait for it, read its
                outputs from any offset, cancel it, or find it again by id
                with ``execution(id)``.

        Raises:
            TypeError: ``on_output`` with ``background``: read ``events()`` instead.
        """
        if background:
            if on_output is not None:
                raise TypeError("on_output= with background=True: iterate execution.events()")
            data = self.client._send(execution_calls.start(self.id, code, language, timeout, stdin))
            return RemoteExecution(self.client, self.id, data)
        call = calls.execute(self.id, code, language, timeout, stdin, stream=bool(on_output))
        if on_output is None:
            return self.client._send(call)
        return self.client._send_stream(call, on_output)

    def execution(self, execution_id: str) -> RemoteExecution:
        """A background execution of this session, by id, from whichever client started it.

        Raises:
            ServerError: 404 ``execution_not_found`` for an unknown id (or one
                finished long ago: a session keeps its last finished ones).
        """
        data = self.client._send(execution_calls.get(self.id, execution_id))
        return RemoteExecution(self.client, self.id, data)

    def executions(self) -> list[RemoteExecution]:
        """The session's executions, oldest first: running, queued, and the last finished."""
        listed = self.client._send(execution_calls.list(self.id))
        return [RemoteExecution(self.client, self.id, data) for data in listed]

    def interrupt(self) -> None:
        self.client._send(calls.interrupt(self.id))

    def restart(self) -> None:
        self.client._send(calls.restart(self.id))

    def fork(self, *, wait: bool = True, method: ForkMethod = "auto") -> RemoteSession:
        """A new session on the server holding a copy of this one's live state and files.

        Args:
            wait: wait for a running execution to end; False raises
                ``ServerError`` (409 ``session_busy``) instead.
            method: as ``AsyncSession.fork``'s: "auto", "process" or "checkpoint".
        """
        made = self.client._send(calls.fork(self.id, wait, method))
        return RemoteSession(self.client, made)

    def checkpoint(self, *, files: bool = True) -> CheckpointInfo:
        """Checkpoints the session's variables and imports (and files) in the server's store.

        ``client.restore(checkpoint)`` makes a session from it.
        """
        return self.client._send(calls.checkpoint(self.id, files))

    def variables(self) -> list[Variable]:
        """The kernel's variables, without running a cell (as ``Session.variables``)."""
        return self.client._send(calls.variables(self.id))

    def inspect(self, name: str) -> VariableDetail | None:
        """One variable in detail, or None if the kernel has no such name."""
        return self.client._send(calls.inspect(self.id, name))

    def files(self) -> list[FileInfo]:
        """Every file in the session's work dir."""
        return self.client._send(calls.files(self.id))

    def download(self, path: str) -> bytes:
        """A file's bytes; ``path`` is relative to the work dir."""
        return self.client._send(calls.download(self.id, path))

    def upload(self, path: str, data: bytes | str) -> FileInfo:
        """Writes a file (str as UTF-8) into the work dir, folders created."""
        return self.client._send(calls.upload(self.id, path, data))

    def notebook(self) -> dict[str, Any]:
        """The transcript, an nbformat 4 notebook as a dict."""
        return self.client._send(calls.notebook(self.id))

    def close(self, *, purge: bool = False) -> None:
        """Deletes the session: its kernel shuts down; its files stay unless ``purge``."""
        self.client._send(calls.delete(self.id, purge))
