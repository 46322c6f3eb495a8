"""JupyterLab's file browser on a kernelexec server's live sessions, within a tenant's scope.

A JupyterLab whose kernels are a ``kernelexec serve``'s (``--GatewayClient.url``)
can also take its contents from it::

    jupyter lab --GatewayClient.url=http://127.0.0.1:8765 --GatewayClient.auth_token=$TOKEN \\
    --ServerApp.contents_manager_class=kernelexec.integrations.jupyterlab.SessionsContents \\
    --FileIdExtension.file_id_manager_class=jupyter_server_fileid.manager.ArbitraryFileIdManager \\
    --ServerApp.session_manager_class=kernelexec.integrations.jupyterlab.TranscriptSessions

The file browser then holds one folder per live session the token's tenant
sees (``GET /sessions``), each with the session's ``transcript.ipynb``, read
through the server (``GET /sessions/{id}/notebook``): never another tenant's,
and never through a link a kernel planted, as a JupyterLab rooted in the work
root would follow. With jupyter-collaboration (the ``lab`` extra) an open
transcript follows the agent live, as a file does: the collaboration polls
``get(content=False)`` each second, whose ``last_modified`` moves whenever the
transcript's size or time does (``HEAD`` of it through the server).

``TranscriptSessions`` opens a session's transcript on that session's own
kernel, as ``attach --lab`` opens its notebook, where JupyterLab would start a
new kernel for it: a new session of the server, counted against its sessions
and the tenant's quota, for every transcript a person opens to watch. On the
agent's kernel, the tab shows the kernel busy while the agent runs, and its
debugger panel the agent's variables; a cell run there is the person's,
recorded in the transcript as such (``_server/_attached.py``).

``SessionsContents`` is read-only: the transcripts are the agents' records,
written by kernelexec, and nothing a person types in one is saved (a cell they
run is recorded, as above). Their own notebooks belong in a JupyterLab with a
root dir of its own (``kernelexec attach --lab``). The file ID manager must be
``ArbitraryFileIdManager``, which keeps ids without looking for the paths on
this machine's disk.
"""

from __future__ import annotations

import datetime
import hashlib
import re
import uuid
from typing import Any

from .._extras import missing_extra

try:
    import httpx
    import nbformat
    from jupyter_server.gateway.gateway_client import GatewayClient, gateway_request
    from jupyter_server.gateway.managers import GatewaySessionManager
    from jupyter_server.services.contents.checkpoints import AsyncCheckpoints
    from jupyter_server.services.contents.manager import AsyncContentsManager
    from tornado.web import HTTPError
    from traitlets import Unicode, default
except ImportError as exc:  # pragma: no cover - the lab extra is missing
    raise missing_extra("kernelexec.integrations.jupyterlab", "lab", exc) from exc

__all__ = ["SessionsContents", "TranscriptSessions"]

TRANSCRIPT = "transcript.ipynb"
# A notebook in a session's folder (of the root dir, or of a drive's: "RTC:"). JupyterLab
# may name a new session's path "<folder>/<a uuid>", the notebook's name apart.
_IN_A_SESSION = re.compile(r"(?:.*[/:])?([0-9a-f]{32})/([^/]+)")
_READ_ONLY = (
    "kernelexec's sessions are read-only here: a transcript is its agent's record, written by "
    "kernelexec; write your own cells in a notebook of your own (kernelexec attach --lab)"
)


def _now() -> datetime.datetime:
    return datetime.datetime.now(tz=datetime.timezone.utc)


def _parse_time(text: Any) -> datetime.datetime:
    """An ISO 8601 time of the server's ("2025-06-01T12:00:03.250Z"); now if it is none."""
    if isinstance(text, str):
        try:
            return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            pass
    return _now()


class _NoCheckpoints(AsyncCheckpoints):
    """Nothing here is saved, so nothing has checkpoints."""

    async def list_checkpoints(self, path: str) -> list[dict[str, Any]]:
        return []

    async def create_checkpoint(self, contents_mgr: Any, path: str) -> dict[str, Any]:
        raise HTTPError(403, _READ_ONLY)

    async def restore_checkpoint(self, contents_mgr: Any, checkpoint_id: str, path: str) -> None:
        raise HTTPError(403, _READ_ONLY)

    async def rename_checkpoint(self, checkpoint_id: str, old_path: str, new_path: str) -> None:
        raise HTTPError(403, _READ_ONLY)

    async def delete_checkpoint(self, checkpoint_id: str, path: str) -> None:
        raise HTTPError(403, _READ_ONLY)


class SessionsContents(AsyncContentsManager):
    """A contents manager whose files are a kernelexec server's sessions' transcripts.

    ``url`` and ``token`` default to the gateway's (``GatewayClient.url``,
    ``GatewayClient.auth_token``): the kernels and the transcripts come from one
    server, under one token, so one tenant's scope.
    """

    url = Unicode(help="the kernelexec server (default: GatewayClient.url)").tag(config=True)
    token = Unicode(help="a token of the server (default: GatewayClient.auth_token)").tag(
        config=True
    )

    @default("url")
    def _default_url(self) -> str:
        return str(GatewayClient.instance().url or "")

    @default("token")
    def _default_token(self) -> str:
        return str(GatewayClient.instance().auth_token or "")

    @default("checkpoints_class")
    def _default_checkpoints_class(self) -> type:
        return _NoCheckpoints

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._http: httpx.AsyncClient | None = None
        # path -> (size, server's time, the time given out): see _stamp
        self._seen: dict[str, tuple[str, str, datetime.datetime]] = {}

    # -- the server

    def _client(self) -> httpx.AsyncClient:
        if not self.url:
            raise HTTPError(
                500, "SessionsContents needs the kernelexec server's URL: --GatewayClient.url"
            )
        if self._http is None:
            self._http = httpx.AsyncClient(
                base_url=self.url.rstrip("/"),
                headers={"Authorization": f"Bearer {self.token}"},
                trust_env=False,
                timeout=httpx.Timeout(30.0),
            )
        return self._http

    async def _ask(self, method: str, path: str) -> httpx.Response:
        try:
            response = await self._client().request(method, path)
        except httpx.HTTPError as exc:
            raise HTTPError(
                503, f"cannot reach the kernelexec server at {self.url}: {exc}"
            ) from None
        if response.status_code == 404:
            raise HTTPError(404, f"no such session's file: {path}")
        if response.status_code in (401, 403):
            raise HTTPError(403, f"the kernelexec server refused the token ({path})")
        if response.status_code >= 400:
            raise HTTPError(502, f"the kernelexec server answered {response.status_code}")
        return response

    async def _sessions(self) -> list[dict[str, Any]]:
        body = (await self._ask("GET", "/sessions")).json()
        found = body.get("sessions") if isinstance(body, dict) else None
        return [s for s in found or [] if isinstance(s, dict) and isinstance(s.get("id"), str)]

    async def _session(self, session_id: str) -> dict[str, Any]:
        if len(session_id) != 32 or not all(c in "0123456789abcdef" for c in session_id):
            raise HTTPError(404, f"no session {session_id[:64]!r}")
        body = (await self._ask("GET", f"/sessions/{session_id}")).json()
        if not isinstance(body, dict):
            raise HTTPError(502, "the kernelexec server's answer is not a session")
        return body

    async def _stamp(self, session_id: str) -> tuple[datetime.datetime, int]:
        """The transcript's time and size: a time that moves whenever its size or the
        server's time of it (whole seconds) does, so a poll never misses a write."""
        head = await self._ask("HEAD", f"/sessions/{session_id}/files/{TRANSCRIPT}")
        size, when = head.headers.get("content-length", ""), head.headers.get("last-modified", "")
        before = self._seen.get(session_id)
        if before is not None and before[:2] == (size, when):
            return before[2], int(size or 0)
        stamp = _now()
        if before is not None and stamp <= before[2]:
            stamp = before[2] + datetime.timedelta(microseconds=1)
        self._seen[session_id] = (size, when, stamp)
        return stamp, int(size or 0)

    # -- the models

    @staticmethod
    def _split(path: str) -> list[str]:
        return [part for part in path.strip("/").split("/") if part]

    def _folder(self, session: dict[str, Any], content: list[Any] | None) -> dict[str, Any]:
        when = _parse_time(session.get("last_activity"))
        return {
            "name": session["id"],
            "path": session["id"],
            "type": "directory",
            "writable": False,
            "created": _parse_time(session.get("created")),
            "last_modified": when,
            "mimetype": None,
            "content": content,
            "format": None if content is None else "json",
            "size": None,
            "hash": None,
            "hash_algorithm": None,
        }

    async def _notebook(
        self, session_id: str, content: bool, require_hash: bool = False
    ) -> dict[str, Any]:
        when, size = await self._stamp(session_id)
        model: dict[str, Any] = {
            "name": TRANSCRIPT,
            "path": f"{session_id}/{TRANSCRIPT}",
            "type": "notebook",
            "writable": False,
            "created": when,
            "last_modified": when,
            "mimetype": None,
            "content": None,
            "format": None,
            "size": size,
            "hash": None,
            "hash_algorithm": None,
        }
        if content or require_hash:
            raw = (await self._ask("GET", f"/sessions/{session_id}/notebook")).content
            if require_hash:
                model.update(hash=hashlib.sha256(raw).hexdigest(), hash_algorithm="sha256")
        if content:
            text = raw.decode("utf-8", "replace")
            try:
                notebook = nbformat.reads(text, as_version=4)
            except Exception as exc:  # nbformat raises several kinds
                raise HTTPError(
                    502, f"the transcript of {session_id} is no notebook: {exc}"
                ) from None
            self.mark_trusted_cells(notebook, model["path"])
            model.update(content=notebook, format="json")
        return model

    async def get(
        self,
        path: str,
        content: bool = True,
        type: str | None = None,
        format: str | None = None,
        require_hash: bool = False,
    ) -> dict[str, Any]:
        parts = self._split(path)
        if not parts:
            sessions = await self._sessions()
            listed = [self._folder(s, None) for s in sessions] if content else None
            return {
                "name": "",
                "path": "",
                "type": "directory",
                "writable": False,
                "created": _now(),
                "last_modified": _now(),
                "mimetype": None,
                "content": listed,
                "format": None if listed is None else "json",
                "size": None,
                "hash": None,
                "hash_algorithm": None,
            }
        session = await self._session(parts[0])
        if len(parts) == 1:
            inner = [await self._notebook(parts[0], False)] if content else None
            return self._folder(session, inner)
        if parts[1:] != [TRANSCRIPT]:
            raise HTTPError(404, f"no such file: {path}")
        return await self._notebook(parts[0], content, require_hash)

    async def dir_exists(self, path: str) -> bool:
        parts = self._split(path)
        return not parts or (len(parts) == 1 and await self._live(parts[0]))

    async def file_exists(self, path: str = "") -> bool:
        parts = self._split(path)
        return len(parts) == 2 and parts[1] == TRANSCRIPT and await self._live(parts[0])

    async def _live(self, session_id: str) -> bool:
        """Whether the server has that session for this token's tenant."""
        try:
            await self._session(session_id)
        except HTTPError:
            return False
        return True

    async def is_hidden(self, path: str) -> bool:
        return False

    # -- nothing is written

    async def save(self, model: dict[str, Any], path: str) -> dict[str, Any]:
        raise HTTPError(403, _READ_ONLY)

    async def delete_file(self, path: str) -> None:
        raise HTTPError(403, _READ_ONLY)

    async def rename_file(self, old_path: str, new_path: str) -> None:
        raise HTTPError(403, _READ_ONLY)


class TranscriptSessions(GatewaySessionManager):
    """JupyterLab's sessions, a session's transcript opened on that session's kernel.

    A notebook at ``.../<session id>/transcript.ipynb`` (in a JupyterLab rooted in
    the work root, or in ``SessionsContents``) gets the kernel of the session
    whose id is its folder's, which the gateway already runs, instead of a new
    one; any other notebook gets what it asks for.
    """

    async def create_session(
        self,
        path: str | None = None,
        name: Any = None,
        type: str | None = None,
        kernel_name: Any = None,
        kernel_id: str | None = None,
    ) -> dict[str, Any]:
        found = _IN_A_SESSION.fullmatch(path or "")
        if found is not None and TRANSCRIPT not in (found.group(2), name):
            found = None
        if found is not None and kernel_id is None:
            agent = str(uuid.UUID(hex=found.group(1)))
            # Asked of the server, whose answer is the token's tenant's: a 404 for a
            # session that is gone, or another tenant's (then the notebook gets a new one).
            try:
                await gateway_request(f"{self.kernel_manager.kernels_url}/{agent}", method="GET")
            except (HTTPError, OSError):
                pass
            else:
                kernel_id = agent
        return await super().create_session(path, name, type, kernel_name, kernel_id)
