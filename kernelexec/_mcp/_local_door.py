"""``LocalDoor``: the MCP tools' sessions held in this process (``kernelexec mcp``)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .._audit import AuditLog, execution_line
from .._client._base import Made
from .._exceptions import (
    CheckpointError,
    ConfigurationError,
    KernelexecError,
    KernelStartError,
    QueueFullError,
)
from .._execution._background import Execution, ExecutionCancelled, start_execution
from .._execution._live import OutputListener
from .._execution._models import ExecutionResult
from .._remote_models import SessionInfo
from .._server._auth import CALLER
from .._server._checkpoints import CheckpointStore, UnknownCheckpoint
from .._server._options import OptionError, SessionOptions, parse_options
from .._session._async import AsyncSession
from .._state._fork import ForkMethod
from .._state._manifest import RestoreReport
from ._doors import CANCEL_WAIT, describe_checkpoint, describe_made
from ._executions import ExecutionView
from ._files import files_in, read_head, read_notebook, where
from ._sessions import McpConfig, SessionError, Sessions

__all__ = ["LocalDoor"]


class LocalDoor:
    """The MCP server's own sessions, in this process."""

    def __init__(
        self,
        config: McpConfig,
        server_room: Callable[[], None] | None = None,
        audit: AuditLog | None = None,
    ) -> None:
        self.config = config
        self.sessions = Sessions(config, server_room)
        self.audit = audit
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
        result = None
        try:
            async with self.sessions.executing(name) as session:
                result = await session.execute(code, language=language, timeout=seconds)
        finally:
            self._audit(name, None, code, language, result)
        return result

    def _audit(
        self,
        name: str,
        execution_id: str | None,
        code: str,
        language: str,
        result: ExecutionResult | None,
    ) -> None:
        """The audit log's line for an execution of a tool, with the caller of the tool
        (an HTTP request's tenant; none over stdio)."""
        if self.audit is None:
            return
        identity = CALLER.get()
        who = None if identity is None else (identity.tenant.name, identity.token_id)
        line = execution_line(who, name, execution_id, code, language, result, door="mcp")
        self.audit.record(line)

    async def start(
        self, name: str, code: str, language: str, timeout: float | None
    ) -> dict[str, Any]:
        seconds = self._seconds(timeout)
        await self.sessions.ready(name, create=True)

        made: list[Execution] = []  # the execution, for its id in the audit log

        async def run(listener: OutputListener) -> ExecutionResult:
            # Busy while it runs (list_sessions says so), as a call's execution is.
            result = None
            try:
                async with self.sessions.executing(name) as session:
                    result = await session.execute(
                        code, language=language, timeout=seconds, on_output=listener
                    )
            except ExecutionCancelled as exc:
                result = exc.result
                raise
            finally:
                self._audit(name, made[0].id if made else None, code, language, result)
            return result

        # Bounded as the server's are: a client starting without end would hold all the memory.
        store = self.sessions.background(name)
        try:
            held = store.reserve(len(code))
        except QueueFullError as exc:
            raise SessionError(str(exc)) from None
        try:
            execution = start_execution(run, code=code, language=language)
        except BaseException:
            held.release()
            raise
        made.append(execution)
        return store.add(execution, held).to_dict()

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
        session = self.sessions.get(name)
        work_dir = session.work_dir
        found, cut, skipped = await files_in(session.file_access)
        listed = [f.to_dict() for f in found]
        return {"work_dir": str(work_dir), "files": listed, "truncated": cut, "skipped": skipped}

    async def read(
        self, name: str, path: str, limit: int, *, whole: bool = False
    ) -> tuple[bytes, int]:
        return await read_head(self.sessions.get(name).file_access, path, limit, whole=whole)

    async def notebook(self, name: str) -> tuple[bytes | None, str]:
        session = self.sessions.get(name)
        await session.flush()
        relative = session.notebook_path.relative_to(session.work_dir).as_posix()
        # Read whole, through a handle: never what a link at its name points to.
        return read_notebook(session.work_dir, session.notebook_path), relative

    async def where(self, name: str, path: str) -> str:
        target = await where(self.sessions.get(name).file_access, path)
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
        return describe_made(info, child_name, Made(_info(info), fork_report=child.fork_report))

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
        return describe_checkpoint(self.store.describe(checkpoint_id, saved))

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
        return describe_made(info, new_name, Made(_info(info), restore_report=report))

    async def close(self) -> None:
        await self.sessions.close()


async def _local_view(execution: Execution, offset: int) -> ExecutionView:
    events = await execution.read(offset, 0)  # what there is: no waiting for more
    error = execution.error
    return ExecutionView(
        execution.to_dict(),
        events,
        execution.result,
        None if error is None else f"{type(error).__name__}: {error}",
    )


def _info(data: dict[str, Any]) -> SessionInfo:
    return SessionInfo.from_dict(data)
