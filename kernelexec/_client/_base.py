"""What Client and AsyncClient share: every request described, every answer read.

A ``Call`` says which request to send and how to read its answer; the two
clients differ only in how they send it (``httpx.Client`` or ``AsyncClient``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Generic, TypeVar
from urllib.parse import quote

import httpx

from .._environment import server_token
from .._exceptions import (
    AuthenticationError,
    ServerError,
    SessionCulledError,
    SessionNotFoundError,
)
from .._execution._models import ExecutionResult, Limits
from .._remote_models import CheckpointInfo, FileInfo, SessionInfo
from .._state._fork import ForkReport
from .._state._manifest import RestoreReport, SkippedVariable
from .._state._variables import Variable, VariableDetail

__all__ = [
    "DEFAULT_URL",
    "Call",
    "Made",
    "calls",
    "error_for",
    "http_options",
    "session_options",
    "unreachable",
]

T = TypeVar("T")

DEFAULT_URL = "http://127.0.0.1:8765"


@dataclass(frozen=True)
class Call(Generic[T]):
    """One request and how to read its answer.

    Attributes:
        long: it waits on a kernel (start, execution, restart), so it gets no
            read timeout: the server bounds it (execution timeouts, start timeout).
        tolerated: an error status that ``read`` reads rather than the client
            raising it (a variable that is not there is None, as locally).
    """

    method: str
    path: str
    read: Callable[[httpx.Response], T]
    json: Any = None
    content: bytes | None = None
    params: Mapping[str, str] | None = None
    long: bool = False
    tolerated: int | None = None

    def raises(self, response: httpx.Response) -> bool:
        """Whether the answer is an error to raise (``error_for``) rather than read."""
        return response.is_error and response.status_code != self.tolerated

    def options(self, timeout: float | None) -> dict[str, Any]:
        """Keyword arguments for ``httpx.Client.request`` (or ``stream``)."""
        content, headers = self.content, None
        if self.json is not None:
            # ASCII JSON: text with a lone surrogate still reaches the server,
            # whose session refuses it as a result rather than the client crashing.
            content = json.dumps(self.json, ensure_ascii=True).encode("ascii")
            headers = {"Content-Type": "application/json"}
        elif content is not None:
            # Said even for an empty file: the server takes a PUT with no
            # body and no type for a mistake.
            headers = {"Content-Type": "application/octet-stream"}
        return {
            "content": content,
            "headers": headers,
            "params": self.params,
            "timeout": httpx.Timeout(timeout, read=None) if self.long else timeout,
        }


def http_options(url: str, token: str | None) -> dict[str, Any]:
    """Arguments for the httpx client under a Client or AsyncClient."""
    token = token or server_token()
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    # trust_env off: a proxy from the environment must not see the token.
    return {"base_url": url.rstrip("/"), "headers": headers, "trust_env": False}


def session_options(
    *,
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
) -> dict[str, Any]:
    """The session options given, as ``POST /sessions`` takes them (None: left out)."""
    if isinstance(packages, str):
        raise TypeError("packages= takes a list of requirements, not one string")
    given: dict[str, Any] = {
        "python": python,
        "venv": venv,
        "packages": list(packages) if packages is not None else None,
        "python_version": python_version,
        "preload": preload,
        "limits": asdict(limits) if isinstance(limits, Limits) else limits,
        "docker": dict(docker) if docker is not None else None,
        "gateway": gateway,
        "sandbox": dict(sandbox) if sandbox is not None else None,
        "ray": dict(ray) if ray is not None else None,
        "checkpoint_every": checkpoint_every,
    }
    return {name: value for name, value in given.items() if value is not None}


def error_for(response: httpx.Response) -> ServerError:
    """The exception for an error answer (its body already read)."""
    try:
        body = response.json()
        code, message = str(body["error"]), str(body["message"])
    except (ValueError, KeyError, TypeError):
        code, message = "http_error", response.text[:300] or response.reason_phrase
    text = f"{message} (HTTP {response.status_code} {code})"
    status = response.status_code
    if status == 401:
        return AuthenticationError(
            text + "; pass token= (or set KERNELEXEC_TOKEN) to the one `kernelexec serve` printed",
            status=status,
            code=code,
        )
    if (status, code) in ((404, "session_not_found"), (410, "session_lost")):
        # 410: the server restarted and the session's kernel went with it.
        return SessionNotFoundError(text, status=status, code=code)
    if status == 409 and code in ("session_culled", "session_closed"):
        return SessionCulledError(text, status=status, code=code)
    return ServerError(text, status=status, code=code)


def unreachable(url: str, exc: httpx.TransportError) -> ServerError:
    return ServerError(
        f"cannot reach the kernelexec server at {url} ({type(exc).__name__}: "
        f"{exc}); is `kernelexec serve` running there?",
        code="unreachable",
    )


def _json(response: httpx.Response) -> Any:
    return response.json()


@dataclass(frozen=True)
class Made:
    """A session the server made by forking or restoring, and how (``fork_report`` ...)."""

    info: SessionInfo
    fork_report: ForkReport | None = None
    restore_report: RestoreReport | None = None


def fork_report(data: dict[str, Any]) -> ForkReport:
    """A ``ForkReport`` from its JSON (the parent's paths are the server's)."""
    return ForkReport(
        parent_work_dir=str(data.get("parent_work_dir", "")),
        parent_transcript=str(data.get("parent_transcript", "")),
        parent_cells=int(data.get("parent_cells", 0)),
        method=str(data.get("method", "")),
        files=int(data.get("files", 0)),
        left_behind=tuple(data.get("left_behind", ())),
        reason=None if data.get("reason") is None else str(data["reason"]),
    )


def restore_report(data: dict[str, Any]) -> RestoreReport:
    """A ``RestoreReport`` from its JSON (``checkpoint`` is the checkpoint's id)."""
    return RestoreReport(
        checkpoint=str(data.get("checkpoint", "")),
        restored=list(data.get("restored", [])),
        modules=list(data.get("modules", [])),
        skipped=[
            SkippedVariable(s["name"], s["type"], s["reason"]) for s in data.get("skipped", [])
        ],
        files=int(data.get("files", 0)),
        message=data.get("message"),
    )


def _made(response: httpx.Response) -> Made:
    data = response.json()
    forked, restored = data.get("fork_report"), data.get("restore_report")
    return Made(
        SessionInfo.from_dict(data),
        fork_report(forked) if forked else None,
        restore_report(restored) if restored else None,
    )


def _checkpoint(response: httpx.Response) -> CheckpointInfo:
    return CheckpointInfo.from_dict(response.json())


def _session(response: httpx.Response) -> SessionInfo:
    return SessionInfo.from_dict(response.json())


def _nothing(response: httpx.Response) -> None:
    return None


def _detail(response: httpx.Response) -> VariableDetail | None:
    if response.status_code == 404:
        if error_for(response).code == "variable_not_found":
            return None  # as AsyncSession.inspect says of a name it does not hold
        raise error_for(response)
    return VariableDetail.from_dict(response.json())


def _s(session_id: str) -> str:
    return f"/sessions/{quote(session_id, safe='')}"


def _c(checkpoint_id: str) -> str:
    # As for files: "." and ".." reach the server as given, which refuses them.
    quoted = quote(checkpoint_id, safe="")
    return f"/checkpoints/{quoted.replace('.', '%2E') if quoted in ('.', '..') else quoted}"


def _file_path(session_id: str, path: str) -> str:
    # "." and ".." are encoded so httpx sends them as given and the server,
    # not URL normalization, decides about them.
    segments = [
        quote(s, safe="") if s not in (".", "..") else s.replace(".", "%2E")
        for s in str(path).split("/")
    ]
    return f"{_s(session_id)}/files/{'/'.join(segments)}"


class calls:  # a namespace of Call builders, lower case like a module
    """The API, one Call builder per route."""

    @staticmethod
    def raw(method: str, path: str, read: Callable[[httpx.Response], T]) -> Call[T]:
        """Any other request, read with ``read``."""
        return Call(method, path, read)

    @staticmethod
    def health() -> Call[dict[str, Any]]:
        return Call("GET", "/health", _json)

    @staticmethod
    def create(
        kernel_name: str,
        env: Mapping[str, str] | None,
        timeout: float | None,
        options: Mapping[str, Any] | None = None,
    ) -> Call[SessionInfo]:
        body: dict[str, Any] = {"kernel_name": kernel_name}
        if env:
            body["env"] = dict(env)
        if timeout is not None:
            body["timeout"] = timeout
        body.update(options or {})
        return Call("POST", "/sessions", _session, json=body, long=True)

    @staticmethod
    def create_made(
        kernel_name: str,
        env: Mapping[str, str] | None,
        timeout: float | None,
        options: Mapping[str, Any] | None = None,
        checkpoint: str | None = None,
    ) -> Call[Made]:
        """``create``, read with its restore report (``checkpoint``: a checkpoint's id)."""
        call = calls.create(kernel_name, env, timeout, options)
        body = dict(call.json) | ({"checkpoint": checkpoint} if checkpoint is not None else {})
        return Call("POST", "/sessions", _made, json=body, long=True)

    @staticmethod
    def fork(session_id: str, wait: bool, method: str = "auto") -> Call[Made]:
        body = {"wait": wait, "method": method}
        return Call("POST", f"{_s(session_id)}/fork", _made, json=body, long=True)

    @staticmethod
    def checkpoint(session_id: str, files: bool) -> Call[CheckpointInfo]:
        return Call(
            "POST", f"{_s(session_id)}/checkpoint", _checkpoint, json={"files": files}, long=True
        )

    @staticmethod
    def checkpoints() -> Call[list[CheckpointInfo]]:
        return Call(
            "GET",
            "/checkpoints",
            lambda r: [CheckpointInfo.from_dict(c) for c in r.json()["checkpoints"]],
        )

    @staticmethod
    def checkpoint_info(checkpoint_id: str) -> Call[CheckpointInfo]:
        return Call("GET", _c(checkpoint_id), _checkpoint)

    @staticmethod
    def delete_checkpoint(checkpoint_id: str) -> Call[None]:
        return Call("DELETE", _c(checkpoint_id), _nothing)

    @staticmethod
    def sessions() -> Call[list[SessionInfo]]:
        return Call(
            "GET", "/sessions", lambda r: [SessionInfo.from_dict(s) for s in r.json()["sessions"]]
        )

    @staticmethod
    def info(session_id: str) -> Call[SessionInfo]:
        return Call("GET", _s(session_id), _session)

    @staticmethod
    def delete(session_id: str, purge: bool) -> Call[None]:
        return Call(
            "DELETE",
            _s(session_id),
            _nothing,
            params={"purge": "true" if purge else "false"},
            long=True,
        )

    @staticmethod
    def execute(
        session_id: str,
        code: str,
        language: str | None,
        timeout: float | None,
        stdin: Sequence[str] | None,
        *,
        stream: bool = False,
    ) -> Call[ExecutionResult]:
        body: dict[str, Any] = {"code": code, "language": language or "python"}
        if timeout is not None:
            body["timeout"] = timeout
        if stdin is not None:
            body["stdin"] = list(stdin)
        suffix = "/stream" if stream else ""
        return Call(
            "POST",
            f"{_s(session_id)}/execute{suffix}",
            lambda r: ExecutionResult.from_dict(r.json()),
            json=body,
            long=True,
        )

    @staticmethod
    def variables(session_id: str) -> Call[list[Variable]]:
        return Call(
            "GET",
            f"{_s(session_id)}/variables",
            lambda r: [Variable.from_dict(v) for v in r.json()["variables"]],
        )

    @staticmethod
    def inspect(session_id: str, name: str) -> Call[VariableDetail | None]:
        path = f"{_s(session_id)}/variables/{quote(name, safe='')}"
        return Call("GET", path, _detail, tolerated=404)

    @staticmethod
    def interrupt(session_id: str) -> Call[None]:
        return Call("POST", f"{_s(session_id)}/interrupt", _nothing)

    @staticmethod
    def restart(session_id: str) -> Call[None]:
        return Call("POST", f"{_s(session_id)}/restart", _nothing, long=True)

    @staticmethod
    def files(session_id: str) -> Call[list[FileInfo]]:
        return Call(
            "GET",
            f"{_s(session_id)}/files",
            lambda r: [FileInfo.from_dict(f) for f in r.json()["files"]],
        )

    @staticmethod
    def download(session_id: str, path: str) -> Call[bytes]:
        return Call("GET", _file_path(session_id, path), lambda r: r.content)

    @staticmethod
    def upload(session_id: str, path: str, data: bytes | str) -> Call[FileInfo]:
        content = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        return Call(
            "PUT",
            _file_path(session_id, path),
            lambda r: FileInfo.from_dict(r.json()),
            content=content,
        )

    @staticmethod
    def notebook(session_id: str) -> Call[dict[str, Any]]:
        return Call("GET", f"{_s(session_id)}/notebook", _json)
