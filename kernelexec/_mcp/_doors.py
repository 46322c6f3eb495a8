"""Where the MCP tools' sessions live: in this process, or on a ``kernelexec serve``.

The tools are written once against ``Door``. ``LocalDoor`` holds its own
sessions (``kernelexec mcp``); ``RemoteDoor`` speaks to a running server with
kernelexec's own HTTP client (``kernelexec mcp --server URL``), so an MCP
client and an HTTP client see, and use, the same sessions. Both refuse the
same things with the same two exceptions: ``SessionError`` (no such session,
an option refused) and ``FileRefused`` (a path that is no file of the work dir).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any, Protocol, TypeVar
from urllib.parse import quote

from .._client import AsyncClient, AsyncRemoteExecution
from .._client._base import Call, Made, calls
from .._client._executions import execution_calls
from .._exceptions import (
    CheckpointError,
    ConfigurationError,
    KernelexecError,
    KernelStartError,
    ServerError,
)
from .._execution._background import Execution, start_execution
from .._execution._live import OutputListener
from .._execution._models import ExecutionResult
from .._remote_models import CheckpointInfo, SessionInfo
from .._server._checkpoints import CheckpointStore, UnknownCheckpoint
from .._server._options import OptionError, SessionOptions, parse_options
from .._session._async import AsyncSession
from .._state._fork import ForkMethod
from .._state._manifest import RestoreReport
from ._executions import ExecutionView
from ._files import FileRefused, confined, files_in, read_head, read_notebook
from ._making import Making
from ._sessions import McpConfig, SessionError, Sessions, check_name

__all__ = ["Door", "LocalDoor", "RemoteDoor"]

_SERVER_ID = re.compile(r"[0-9a-f]{32}")
CANCEL_WAIT = 60.0  # seconds cancel_execution waits for the execution to end
T = TypeVar("T")


class Door(Protocol):
    """What the MCP tools need of the sessions, wherever they run."""

    async def create(
        self, name: str, options: dict[str, Any], timeout: float | None
    ) -> dict[str, Any]:
        """Makes a session with these options (JSON, as ``POST /sessions`` takes them)."""
        ...

    async def execute(
        self, name: str, code: str, language: str, timeout: float | None
    ) -> ExecutionResult:
        """Runs code in the session, made first (with no options) if it does not exist."""
        ...

    async def start(
        self, name: str, code: str, language: str, timeout: float | None
    ) -> dict[str, Any]:
        """Starts code in the background (the session made first if need be); its description."""
        ...

    async def execution(
        self, name: str, execution_id: str, wait: float, offset: int
    ) -> ExecutionView:
        """A background execution: its events from ``offset``, after waiting up to ``wait`` s
        for its end."""
        ...

    async def cancel(self, name: str, execution_id: str) -> ExecutionView:
        """Cancels a background execution; answered once it has ended (or was already done)."""
        ...

    async def infos(self) -> list[dict[str, Any]]: ...

    async def restart(self, name: str) -> None: ...

    async def interrupt(self, name: str) -> None: ...

    async def files(self, name: str) -> dict[str, Any]:
        """The work dir's files as the HTTP API lists them."""
        ...

    async def read(
        self, name: str, path: str, limit: int, *, whole: bool = False
    ) -> tuple[bytes, int]:
        """At most ``limit`` bytes of a file and its size (``whole``: nothing if larger)."""
        ...

    async def notebook(self, name: str) -> tuple[bytes | None, str]:
        """The transcript's bytes (None before anything ran) and its path in the work dir."""
        ...

    async def where(self, name: str, path: str) -> str:
        """Where a person finds the whole file, for messages."""
        ...

    async def variables(self, name: str) -> list[dict[str, Any]]:
        """The session's variables, as ``GET /sessions/{id}/variables`` lists them."""
        ...

    async def inspect(self, name: str, variable: str) -> dict[str, Any] | None:
        """One variable in detail; None if the namespace has none such."""
        ...

    async def fork(
        self, name: str, new_name: str | None, method: ForkMethod = "auto"
    ) -> dict[str, Any]:
        """A new session with a copy of the session's live state and files; it and its report."""
        ...

    async def checkpoint(self, name: str) -> dict[str, Any]:
        """Checkpoints the session's state and files; the checkpoint as the HTTP API lists it."""
        ...

    async def restore(self, checkpoint: str, name: str | None) -> dict[str, Any]:
        """A new session from a checkpoint (by id); it and what came back."""
        ...

    async def close(self) -> None: ...


def _made(info: dict[str, Any], name: str, made: Made) -> dict[str, Any]:
    if made.fork_report is not None:
        info["fork_report"] = made.fork_report.to_dict()
    if made.restore_report is not None:
        info["restore_report"] = made.restore_report.to_dict()
        info["restored"] = made.restore_report.text
    return info | {"name": name}


def _described(info: CheckpointInfo) -> dict[str, Any]:
    return info.to_dict() | {"text": info.text}


class LocalDoor:
    """The MCP server's own sessions, in this process."""

    def __init__(self, config: McpConfig) -> None:
        self.config = config
        self.sessions = Sessions(config)
        # Beside the sessions' work dirs (a name never starts with "."), as the server's.
        self.store = CheckpointStore(config.work_root)

    async def create(
        self, name: str, options: dict[str, Any], timeout: float | None
    ) -> dict[str, Any]:
        try:
            parsed = parse_options(options, self.config.policy)
        except OptionError as exc:
            raise SessionError(f"{exc.message} (HTTP {exc.status} {exc.code})") from None
        if timeout is not None and not 0 < timeout <= self.config.max_timeout:
            raise SessionError(
                f"timeout must be more than 0 and at most {self.config.max_timeout:g} s "
                "(kernelexec mcp --max-timeout)"
            )
        await self.sessions.create(name, parsed, timeout)
        return next(i for i in self.sessions.infos() if i["id"] == name)

    def _seconds(self, timeout: float | None) -> float:
        seconds = min(timeout or self.config.timeout, self.config.max_timeout)
        if not seconds > 0:
            raise SessionError("timeout must be a positive number of seconds")
        return seconds

    async def execute(
        self, name: str, code: str, language: str, timeout: float | None
    ) -> ExecutionResult:
        seconds = self._seconds(timeout)
        async with self.sessions.executing(name) as session:
            return await session.execute(code, language=language, timeout=seconds)

    async def start(
        self, name: str, code: str, language: str, timeout: float | None
    ) -> dict[str, Any]:
        seconds = self._seconds(timeout)
        await self.sessions.ready(name, create=True)

        async def run(listener: OutputListener) -> ExecutionResult:
            # Busy while it runs (list_sessions says so), as a call's execution is.
            async with self.sessions.executing(name) as session:
                return await session.execute(
                    code, language=language, timeout=seconds, on_output=listener
                )

        execution = start_execution(run, code=code, language=language)
        return self.sessions.background(name).add(execution).to_dict()

    def _execution(self, name: str, execution_id: str) -> Execution:
        store = self.sessions.background(name)
        found = store.get(execution_id)
        if found is None:
            raise SessionError(
                f"no execution {execution_id[:64]!r} in session {name!r}; it may have ended "
                f"long ago (a session keeps its last {store.keep} finished ones)"
            )
        return found

    async def execution(
        self, name: str, execution_id: str, wait: float, offset: int
    ) -> ExecutionView:
        execution = self._execution(name, execution_id)
        if wait > 0:
            await asyncio.wait({execution.task}, timeout=wait)
        return await _local_view(execution, offset)

    async def cancel(self, name: str, execution_id: str) -> ExecutionView:
        execution = self._execution(name, execution_id)
        if execution.cancel():
            await asyncio.wait({execution.task}, timeout=CANCEL_WAIT)
        return await _local_view(execution, 0)

    async def infos(self) -> list[dict[str, Any]]:
        return self.sessions.infos()

    async def restart(self, name: str) -> None:
        await self.sessions.get(name).restart()

    async def interrupt(self, name: str) -> None:
        await self.sessions.get(name).interrupt()

    async def files(self, name: str) -> dict[str, Any]:
        work_dir = self.sessions.get(name).work_dir
        found, cut, skipped = await files_in(work_dir)
        listed = [f.to_dict() for f in found]
        return {"work_dir": str(work_dir), "files": listed, "truncated": cut, "skipped": skipped}

    async def read(
        self, name: str, path: str, limit: int, *, whole: bool = False
    ) -> tuple[bytes, int]:
        return read_head(self.sessions.get(name).work_dir, path, limit, whole=whole)

    async def notebook(self, name: str) -> tuple[bytes | None, str]:
        session = self.sessions.get(name)
        await session.flush()
        relative = session.notebook_path.relative_to(session.work_dir).as_posix()
        # Read whole, through a handle: never what a link at its name points to.
        return read_notebook(session.work_dir, session.notebook_path), relative

    async def where(self, name: str, path: str) -> str:
        target = confined(self.sessions.get(name).work_dir, path)
        return f"open {target} on the MCP server's machine"

    async def variables(self, name: str) -> list[dict[str, Any]]:
        session = self.sessions.get(name)
        try:
            return [v.to_dict() for v in await session.variables()]
        except KernelexecError as exc:
            raise SessionError(f"cannot list {name!r}'s variables: {exc}") from None

    async def inspect(self, name: str, variable: str) -> dict[str, Any] | None:
        session = self.sessions.get(name)
        try:
            found = await session.inspect(variable)
        except KernelexecError as exc:
            raise SessionError(f"cannot inspect {variable!r} in {name!r}: {exc}") from None
        return None if found is None else found.to_dict()

    async def fork(
        self, name: str, new_name: str | None, method: ForkMethod = "auto"
    ) -> dict[str, Any]:
        parent = await self.sessions.ready(name)
        options = self.sessions.options(name)

        async def forked(work_dir: Path) -> AsyncSession:
            try:
                return await parent.fork(work_dir, method=method)
            except (ConfigurationError, KernelStartError) as exc:
                raise SessionError(f"cannot fork {name!r}: {exc}") from None

        child_name, child = await self.sessions.make(new_name, f"{name}-fork", forked, options)
        info = next(i for i in self.sessions.infos() if i["id"] == child_name)
        return _made(info, child_name, Made(_info(info), fork_report=child.fork_report))

    async def checkpoint(self, name: str) -> dict[str, Any]:
        session = self.sessions.get(name)
        try:
            checkpoint_id, path = await asyncio.to_thread(self.store.new)
        except CheckpointError as exc:
            raise SessionError(str(exc)) from None
        try:
            await session.checkpoint(path)
            self.store.done(checkpoint_id)
            saved = await asyncio.to_thread(self.store.open, checkpoint_id)
        except BaseException as exc:
            self.store.done(checkpoint_id)
            await asyncio.to_thread(self.store.remove, checkpoint_id)
            if isinstance(exc, (ConfigurationError, UnknownCheckpoint)):
                raise SessionError(f"cannot checkpoint {name!r}: {exc}") from None
            raise
        return _described(self.store.describe(checkpoint_id, saved))

    async def restore(self, checkpoint: str, name: str | None) -> dict[str, Any]:
        try:
            saved = await asyncio.to_thread(self.store.open, checkpoint)
        except UnknownCheckpoint:
            raise SessionError(
                f"no checkpoint {checkpoint[:64]!r} (checkpoint_session gives ids)"
            ) from None
        except CheckpointError as exc:
            raise SessionError(str(exc)) from None

        async def restored(work_dir: Path) -> AsyncSession:
            try:
                return await AsyncSession.restore(
                    saved,
                    work_dir,
                    kernel_name=self.config.kernel_name,
                    timeout=self.config.timeout,
                )
            except (ConfigurationError, KernelStartError) as exc:
                raise SessionError(f"cannot restore checkpoint {checkpoint}: {exc}") from None

        stem = f"restored-{checkpoint[:8]}"
        new_name, session = await self.sessions.make(name, stem, restored, SessionOptions())
        report = session.restore_report
        assert report is not None
        report = RestoreReport(
            checkpoint,
            report.restored,
            report.modules,
            report.skipped,
            report.files,
            report.message,
        )
        info = next(i for i in self.sessions.infos() if i["id"] == new_name)
        return _made(info, new_name, Made(_info(info), restore_report=report))

    async def close(self) -> None:
        await self.sessions.close()


class RemoteDoor:
    """The sessions of a ``kernelexec serve``, through its HTTP API.

    A session is named by its server id (32 hex digits, as ``GET /sessions``
    lists them) or by a name this MCP server gave one it made (``default`` is
    made on the first ``execute_code``). Closing the MCP server leaves the
    server's sessions running: they are shared.
    """

    def __init__(self, client: AsyncClient) -> None:
        self.client = client
        self._names: dict[str, str] = {}  # a name this MCP server gave -> server id
        self._making = Making()  # names of sessions the server is making for a call

    def _id(self, name: str) -> str | None:
        if name in self._names:
            return self._names[name]
        return name if _SERVER_ID.fullmatch(name) else None

    def _known(self, name: str) -> str:
        session_id = self._id(check_name(name))
        if session_id is None:
            if name in self._making:
                raise SessionError(
                    f"session {name!r} is being made by another call; use it once that "
                    "call has answered"
                )
            raise SessionError(
                f"no session {name!r}: name one by its id (list_sessions), or make it "
                "with create_session"
            )
        return session_id

    async def _make(self, name: str | None, call: Call[T], session_id: Callable[[T], str]) -> T:
        """The server's answer to ``call``, which makes a session; named ``name`` here.

        The name is reserved until the answer comes; a session made for a
        call that went away meanwhile is deleted (see ``Making``).
        """
        if name is not None:
            if self._id(check_name(name)) is not None or name in self._making:
                raise SessionError(f"a session {name!r} exists; pick another name, or use it")
            self._making.reserve(name)

        def adopt(made: T) -> T:
            if name is not None:
                self._names[name] = session_id(made)
            return made

        async def delete(made: T) -> None:
            # Made for nobody (the call went away): its files too, which no one has seen.
            with contextlib.suppress(KernelexecError):
                await self.client._send(calls.delete(session_id(made), True))

        try:
            return await self._making.make(name, self.client._send(call), adopt, delete)
        except ServerError as exc:
            raise SessionError(str(exc)) from None

    async def _for_code(self, name: str) -> str:
        """The id of the session ``name``, made (with no options) if there is none.

        Concurrent first uses of one name make one session: the first call
        makes it, the others wait for it.
        """
        if not await self._making.wait(check_name(name)):
            raise SessionError(
                f"session {name!r} could not be made (the call making it said why); make it again"
            )
        session_id = self._id(name)
        if session_id is None:
            made = await self._make(name, calls.create("python3", None, None), _session_id)
            session_id = made.id
        return session_id

    async def create(
        self, name: str, options: dict[str, Any], timeout: float | None
    ) -> dict[str, Any]:
        # The server holds the options to its operator's flags; its refusal says which.
        info = await self._make(name, calls.create("python3", None, timeout, options), _session_id)
        return info.to_dict() | {"name": name}

    async def execute(
        self, name: str, code: str, language: str, timeout: float | None
    ) -> ExecutionResult:
        session_id = await self._for_code(name)
        return await self._call(calls.execute(session_id, code, language, timeout, None))

    async def start(
        self, name: str, code: str, language: str, timeout: float | None
    ) -> dict[str, Any]:
        call = execution_calls.start(await self._for_code(name), code, language, timeout, None)
        started: dict[str, Any] = await self._call(call)
        return started

    async def _handle(self, name: str, execution_id: str) -> AsyncRemoteExecution:
        session_id = self._known(name)
        data = await self._call(execution_calls.get(session_id, execution_id))
        return AsyncRemoteExecution(self.client, session_id, data)

    async def execution(
        self, name: str, execution_id: str, wait: float, offset: int
    ) -> ExecutionView:
        handle = await self._handle(name, execution_id)
        try:
            if wait > 0:
                await handle.wait(wait)
            events = await handle.read(offset)
        except ServerError as exc:
            if handle.error is None:
                raise SessionError(str(exc)) from None
            events = []  # it could not run: the error says why
        return _remote_view(handle, events)

    async def cancel(self, name: str, execution_id: str) -> ExecutionView:
        handle = await self._handle(name, execution_id)
        try:
            await handle.cancel()
        except ServerError as exc:
            raise SessionError(str(exc)) from None
        return _remote_view(handle, [])

    async def infos(self) -> list[dict[str, Any]]:
        names = {session_id: name for name, session_id in self._names.items()}
        listed = await self._call(calls.raw("GET", "/sessions", lambda r: r.json()["sessions"]))
        return [s | ({"name": names[s["id"]]} if s["id"] in names else {}) for s in listed]

    async def restart(self, name: str) -> None:
        await self._call(calls.restart(self._known(name)))

    async def interrupt(self, name: str) -> None:
        await self._call(calls.interrupt(self._known(name)))

    async def files(self, name: str) -> dict[str, Any]:
        session_id = self._known(name)
        listed = await self._call(calls.raw("GET", f"/sessions/{session_id}/files", _json))
        return {"server": self.client.url, "session": session_id, **listed}

    async def read(
        self, name: str, path: str, limit: int, *, whole: bool = False
    ) -> tuple[bytes, int]:
        if not path or path.startswith("/") or "\\" in path or "\0" in path:
            raise FileRefused(f"{path[:200]!r} is not a path relative to the work dir")
        session_id = self._known(name)
        try:
            return await self.client._read_head(calls.download(session_id, path), limit, whole)
        except ServerError as exc:
            if exc.status == 404 and exc.code == "session_not_found":
                raise SessionError(str(exc)) from None
            if exc.status in (400, 403, 404, 409):
                raise FileRefused(f"no file {path[:200]!r} in the work dir: {exc}") from None
            raise SessionError(str(exc)) from None

    async def notebook(self, name: str) -> tuple[bytes | None, str]:
        notebook = await self._call(calls.notebook(self._known(name)))
        body = json.dumps(notebook, indent=1).encode() if notebook.get("cells") else None
        return body, "transcript.ipynb"

    async def where(self, name: str, path: str) -> str:
        session_id = self._known(name)
        clean = str(PurePosixPath(path))
        return f"download {self.client.url}/sessions/{session_id}/files/{clean}"

    async def variables(self, name: str) -> list[dict[str, Any]]:
        path = f"/sessions/{self._known(name)}/variables"
        listed = await self._call(calls.raw("GET", path, _json))
        return list(listed["variables"])

    async def inspect(self, name: str, variable: str) -> dict[str, Any] | None:
        path = f"/sessions/{self._known(name)}/variables/{quote(variable, safe='')}"
        try:
            found: dict[str, Any] = await self.client._send(calls.raw("GET", path, _json))
        except ServerError as exc:
            if exc.status == 404 and exc.code == "variable_not_found":
                return None
            raise SessionError(str(exc)) from None
        return found

    async def fork(
        self, name: str, new_name: str | None, method: ForkMethod = "auto"
    ) -> dict[str, Any]:
        made = await self._make(new_name, calls.fork(self._known(name), True, method), _made_id)
        return _made(made.info.to_dict(), new_name or made.info.id, made)

    async def checkpoint(self, name: str) -> dict[str, Any]:
        return _described(await self._call(calls.checkpoint(self._known(name), True)))

    async def restore(self, checkpoint: str, name: str | None) -> dict[str, Any]:
        call = calls.create_made("python3", None, None, None, checkpoint)
        made = await self._make(name, call, _made_id)
        return _made(made.info.to_dict(), name or made.info.id, made)

    async def close(self) -> None:
        try:
            await self._making.close()  # a session made for a call gone meanwhile is deleted
        finally:
            await self.client.close()

    async def _call(self, call: Call[T]) -> T:
        try:
            return await self.client._send(call)
        except ServerError as exc:
            raise SessionError(str(exc)) from None


def _json(response: Any) -> Any:
    return response.json()


def _session_id(info: SessionInfo) -> str:
    return info.id


def _made_id(made: Made) -> str:
    return made.info.id


async def _local_view(execution: Execution, offset: int) -> ExecutionView:
    events = await execution.read(offset, 0)  # what there is: no waiting for more
    error = execution.error
    return ExecutionView(
        execution.to_dict(),
        events,
        execution.result,
        None if error is None else f"{type(error).__name__}: {error}",
    )


def _remote_view(handle: AsyncRemoteExecution, events: list[Any]) -> ExecutionView:
    info = {
        "id": handle.id,
        "state": handle.state,
        "status": handle.status,
        "code": handle.code,
        "events": handle.events_end,
    }
    error = None if handle.error is None else str(handle.error)
    return ExecutionView(info, events, handle.result, error)


def _info(data: dict[str, Any]) -> SessionInfo:
    return SessionInfo.from_dict(data)
