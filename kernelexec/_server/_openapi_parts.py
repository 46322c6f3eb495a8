"""The building blocks of /openapi.json: $refs, answers, errors, operations, path parameters.

Shared by the modules that describe routes: ``_openapi.py`` (sessions,
checkpoints, files), ``_openapi_schemas.py`` (the bodies) and
``_jupyter_api.py`` (the Jupyter kernels API).
"""

from __future__ import annotations

from typing import Any

from ._paths import path_schema

__all__ = [
    "CHECKPOINT_ID",
    "JSON",
    "KERNEL_ID",
    "PATH",
    "SESSION_ID",
    "VARIABLE",
    "errors",
    "event",
    "json_answer",
    "op",
    "ref",
]

JSON = "application/json"


def ref(name: str) -> dict[str, str]:
    """A reference to the component schema ``name``."""
    return {"$ref": f"#/components/schemas/{name}"}


def json_answer(schema: dict[str, Any], description: str) -> dict[str, Any]:
    """An answer whose JSON body has ``schema``."""
    return {"description": description, "content": {JSON: {"schema": schema}}}


def errors(*statuses: int) -> dict[str, Any]:
    """The error answers an operation can give; 401, 403, 413 and 429 every one can
    (a token's tenant without the operation's scope, or past its request rate)."""
    said = {
        400: "Malformed request",
        401: "Missing or wrong token",
        403: "The token's tenant lacks the scope this operation needs (missing_scope; the "
        "body's scope names it, and so does x-kernelexec-scope here); a path that leaves the "
        "work dir, or a session option the operator has not allowed (the message names the "
        "flag or the tenant's allow list)",
        404: "No such session (or file, or checkpoint)",
        409: "The session was culled, closed or deleted, or the file cannot be written; "
        "a fork with wait false of a busy session (session_busy); a checkpoint that "
        "could not be made (checkpoint_failed), holds a suspended session "
        "(checkpoint_in_use) or was made by another Python or package versions "
        "(checkpoint_incompatible)",
        410: "The session's kernel was lost when the server restarted (session_lost); "
        "its files and transcript are kept",
        413: "Body over --max-body-mb (any route); an execution's body over --max-queued-mb "
        "(execution_too_large)",
        422: "A session option's value cannot be used (over a cap, a path for a venv "
        "name, preload code that fails, a package that does not install), or a "
        "checkpoint is damaged (checkpoint_damaged) or failed to load (restore_failed)",
        429: "The tenant sends requests past its rate (rate_limited) or is at one of its "
        "quotas (quota_exceeded: live_sessions, queued_executions, cpu_seconds_per_hour, "
        "work_dir_bytes; the body's quota names it); at --max-sessions (forks, and suspended "
        "sessions resuming, count too), or the session's queue is full (queue_full: "
        "--max-queued, --max-queued-mb). See Retry-After",
        503: "Kernel start failed, or the server is shutting down",
        507: "Not enough room on the server's disk, or past its checkpoint budgets "
        "(--session-disk-mb, --store-disk-mb); nothing was written",
    }
    every = {401, 403, 413, 429, *statuses}
    return {str(s): json_answer(ref("Error"), said[s]) for s in sorted(every)}


def op(summary: str, responses: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """An operation: what it does, its answers, and anything else OpenAPI says of it."""
    return {"summary": summary, "responses": responses, **extra}


SESSION_ID = {
    "name": "session_id",
    "in": "path",
    "required": True,
    "schema": {"type": "string", "pattern": "^[0-9a-f]{32}$"},
}
PATH = {
    "name": "path",
    "in": "path",
    "required": True,
    "description": "A file's path relative to the session's work dir: names joined by '/', "
    "none empty, '.' or '..', without NUL, backslash or percent-escapes",
    "schema": path_schema(),
}
VARIABLE = {
    "name": "name",
    "in": "path",
    "required": True,
    "description": "A variable's name (404 if the namespace has none such)",
    "schema": {"type": "string", "minLength": 1},
}
CHECKPOINT_ID = {
    "name": "checkpoint_id",
    "in": "path",
    "required": True,
    "description": "A checkpoint's id, as POST /sessions/{session_id}/checkpoint gave it",
    "schema": {"type": "string", "pattern": "^[0-9a-f]{32}$"},
}
KERNEL_ID = {
    "name": "kernel_id",
    "in": "path",
    "required": True,
    "description": "A session's id, in UUID form (as Jupyter writes it) or as 32 hex digits",
    "schema": {
        "type": "string",
        "pattern": "^([0-9a-f]{32}|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$",
    },
}


def event(name: str, data: dict[str, Any]) -> dict[str, Any]:
    """One server-sent event: its name, and its data's schema."""
    return {"properties": {"event": {"const": name}, "data": {"contentSchema": data}}}
