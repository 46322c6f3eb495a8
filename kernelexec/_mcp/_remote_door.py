"""``RemoteDoor``: the MCP tools' sessions on a running ``kernelexec serve`` (``--server URL``).

It speaks to the server with kernelexec's own HTTP client, so an MCP client
and an HTTP client see, and use, the same sessions; a tool's name for a
session maps to the server's id.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable
from pathlib import PurePosixPath
from typing import Any, TypeVar
from urllib.parse import quote

from .._client import AsyncClient, AsyncRemoteExecution
from .._client._base import Call, Made, calls
from .._client._executions import execution_calls
from .._exceptions import (
    KernelexecError,
    ServerError,
)
from .._execution._models import ExecutionResult
from .._remote_models import SessionInfo
from .._state._fork import ForkMethod
from ._doors import describe_checkpoint, describe_made
from ._executions import ExecutionView
from ._files import FileRefused
from ._making import Making
from ._sessions import SessionError, check_name

__all__ = ["RemoteDoor"]

_SERVER_ID = re.compile(r"[0-9a-f]{32}")
T = TypeVar("T")


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
        return describe_made(made.info.to_dict(), new_name or made.info.id, made)

    async def checkpoint(self, name: str) -> dict[str, Any]:
        return describe_checkpoint(await self._call(calls.checkpoint(self._known(name), True)))

    async def restore(self, checkpoint: str, name: str | None) -> dict[str, Any]:
        call = calls.create_made("python3", None, None, None, checkpoint)
        made = await self._make(name, call, _made_id)
        return describe_made(made.info.to_dict(), name or made.info.id, made)

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


def _remote_view(handle: AsyncRemoteExecution, events: list[Any]) -> ExecutionView:
    info = {
        "id": handle.id,
        "state": handle.state,
        "status": handle.status,
        "code": handle.code,
        "created": handle.created,
        "started": handle.started,
        "finished": handle.finished,
        "events": handle.events_end,
    }
    error = None if handle.error is None else str(handle.error)
    return ExecutionView(info, events, handle.result, error)
