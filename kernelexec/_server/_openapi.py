"""The OpenAPI 3.1 description of the HTTP API, served at /openapi.json.

Written by hand next to the routes; the test suite runs schemathesis against
it with every check, which holds each answer's status, content type, headers
and body to it, and each request it calls invalid to a refusal. OpenAPI 3.2,
for ``itemSchema``: the streaming route's body is a sequence of events, each
described on its own.
"""

from __future__ import annotations

from typing import Any

from .._execution._data import data_schemas
from .._times import SCHEMA as WHEN
from .._version import __version__
from ._config import ServerConfig
from ._executions import execution_paths, execution_schemas
from ._options import options_schema
from ._paths import path_schema

__all__ = ["openapi_schema"]

_JSON = "application/json"


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {_JSON: {"schema": schema}}}


def _errors(*statuses: int) -> dict[str, Any]:
    """The error answers an operation can give; 401 and 413 every one can."""
    said = {
        400: "Malformed request",
        401: "Missing or wrong token",
        403: "Path leaves the work dir, or a session option the operator has not allowed "
        "(the message names the flag)",
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
        429: "At --max-sessions (forks, and suspended sessions resuming, count too), or the "
        "session's queue is full (queue_full: --max-queued, --max-queued-mb; see Retry-After)",
        503: "Kernel start failed, or the server is shutting down",
        507: "Not enough room on the server's disk, or past its checkpoint budgets "
        "(--session-disk-mb, --store-disk-mb); nothing was written",
    }
    return {str(s): _json(_ref("Error"), said[s]) for s in sorted({401, 413, *statuses})}


def _op(summary: str, responses: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"summary": summary, "responses": responses, **extra}


_SESSION_ID = {
    "name": "session_id",
    "in": "path",
    "required": True,
    "schema": {"type": "string", "pattern": "^[0-9a-f]{32}$"},
}
_PATH = {
    "name": "path",
    "in": "path",
    "required": True,
    "description": "A file's path relative to the session's work dir: names joined by '/', "
    "none empty, '.' or '..', without NUL, backslash or percent-escapes",
    "schema": path_schema(),
}
_VARIABLE = {
    "name": "name",
    "in": "path",
    "required": True,
    "description": "A variable's name (404 if the namespace has none such)",
    "schema": {"type": "string", "minLength": 1},
}
_CHECKPOINT_ID = {
    "name": "checkpoint_id",
    "in": "path",
    "required": True,
    "description": "A checkpoint's id, as POST /sessions/{session_id}/checkpoint gave it",
    "schema": {"type": "string", "pattern": "^[0-9a-f]{32}$"},
}
_KERNEL_ID = {
    "name": "kernel_id",
    "in": "path",
    "required": True,
    "description": "A session's id, in UUID form (as Jupyter writes it) or as 32 hex digits",
    "schema": {
        "type": "string",
        "pattern": "^([0-9a-f]{32}|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$",
    },
}


def _schemas(config: ServerConfig, kernel_names: list[str]) -> dict[str, Any]:
    timeout = {
        "type": ["number", "null"],
        "exclusiveMinimum": 0,
        "maximum": config.max_timeout,
        "description": "seconds; null or absent: the default",
    }
    text, nullable_text = {"type": "string"}, {"type": ["string", "null"]}
    return {
        "Error": {
            "type": "object",
            "required": ["error", "message"],
            "properties": {"error": text, "message": text},
        },
        "CreateSession": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "kernel_name": {"type": "string", "enum": kernel_names},
                "env": {
                    "type": "object",
                    "propertyNames": {"pattern": "^[A-Za-z_][A-Za-z0-9_]*$"},
                    "additionalProperties": {"type": "string", "pattern": "^[^\\x00]*$"},
                },
                "timeout": timeout,
                "checkpoint": {
                    "type": "string",
                    "pattern": "^[0-9a-f]{32}$",
                    "description": "a checkpoint's id: the new session starts with its "
                    "variables, imports and files (404 unknown, 422 damaged, 409 made by "
                    "another Python or package versions)",
                },
                **options_schema(config.policy),
            },
        },
        "ForkBody": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "wait": {
                    "type": "boolean",
                    "description": "wait for a running execution to end (default true); "
                    "false answers 409 session_busy instead",
                },
                "method": {
                    "enum": ["auto", "process", "checkpoint"],
                    "description": "auto (default): fork a local kernel's process unless "
                    "it holds what a fork breaks (a GPU driver in use, a live OpenMP pool), "
                    "else checkpoint and restore; process: fork the process even so "
                    "(400 for a kernel that is not local); checkpoint: always",
                },
            },
        },
        "CheckpointBody": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "files": {
                    "type": "boolean",
                    "description": "copy the work dir's files too (default true)",
                },
            },
        },
        "Skipped": {
            "type": "object",
            "required": ["name", "type", "reason"],
            "properties": {"name": text, "type": text, "reason": text},
        },
        "ForkReport": {
            "type": "object",
            "required": [
                "parent_work_dir",
                "parent_cells",
                "method",
                "files",
                "left_behind",
                "reason",
            ],
            "properties": {
                "parent_work_dir": text,
                "parent_transcript": text,
                "parent_cells": {"type": "integer"},
                "method": {
                    "enum": ["process", "checkpoint"],
                    "description": "process: the kernel process was forked (copy-on-write); "
                    "checkpoint: checkpointed and restored (reason says why)",
                },
                "files": {"type": "integer"},
                "left_behind": {"type": "array", "items": text},
                "reason": {
                    "type": ["string", "null"],
                    "description": "why a checkpoint was made rather than a process fork",
                },
            },
        },
        "RestoreReport": {
            "type": "object",
            "required": ["checkpoint", "restored", "modules", "skipped", "files"],
            "properties": {
                "checkpoint": {"type": "string", "description": "the checkpoint's id"},
                "restored": {"type": "array", "items": text},
                "modules": {"type": "array", "items": text},
                "skipped": {"type": "array", "items": _ref("Skipped")},
                "files": {"type": "integer"},
                "message": nullable_text,
            },
        },
        "Checkpoint": {
            "type": "object",
            "required": ["id", "created", "variables", "modules", "skipped", "files", "size"],
            "properties": {
                "id": {"type": "string", "pattern": "^[0-9a-f]{32}$"},
                "created": WHEN,
                "session": {
                    "type": ["string", "null"],
                    "description": "the session it was made from",
                },
                "suspend": {
                    "type": "boolean",
                    "description": "made by the server to suspend an idle session",
                },
                "python": text,
                "variables": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["name", "type", "size", "file", "buffers_file"],
                        "properties": {
                            "name": text,
                            "type": text,
                            "size": {"type": "integer"},
                            "file": {
                                "type": "string",
                                "description": "its pickle, relative to the checkpoint's folder",
                            },
                            "buffers_file": {
                                "type": "string",
                                "description": "its out-of-band buffers, relative likewise",
                            },
                        },
                    },
                },
                "modules": {"type": "object", "additionalProperties": text},
                "skipped": {"type": "array", "items": _ref("Skipped")},
                "files": {"type": "integer"},
                "size": {"type": "integer", "description": "bytes of variable data"},
                "packages": {"type": "object", "additionalProperties": text},
            },
        },
        "CheckpointList": {
            "type": "object",
            "required": ["checkpoints", "unreadable"],
            "properties": {
                "checkpoints": {"type": "array", "items": _ref("Checkpoint")},
                "unreadable": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["id", "message"],
                        "properties": {"id": text, "message": text},
                    },
                },
            },
        },
        "CheckpointDeleted": {
            "type": "object",
            "required": ["id", "deleted"],
            "properties": {"id": text, "deleted": {"const": True}},
        },
        "Execute": {
            "type": "object",
            "additionalProperties": False,
            "required": ["code"],
            "properties": {
                "code": text,
                "language": text,
                "timeout": timeout,
                "stdin": {"type": "array", "items": text},
            },
        },
        "Session": {
            "type": "object",
            "required": [
                "id",
                "state",
                "kernel_name",
                "timeout",
                "created",
                "last_activity",
                "executions",
            ],
            "properties": {
                "id": {"type": "string", "pattern": "^[0-9a-f]{32}$"},
                "state": {"enum": ["starting", "idle", "busy", "suspended", "culled", "lost"]},
                "kernel_name": text,
                "timeout": {"type": "number"},
                "created": WHEN,
                "last_activity": WHEN,
                "executions": {"type": "integer"},
                "options": {
                    "type": "object",
                    "description": "the session options it was created with",
                },
                "message": {
                    "type": "string",
                    "description": "suspended or culled: what became of its kernel and state",
                },
                "fork_report": _ref("ForkReport"),
                "restore_report": _ref("RestoreReport"),
            },
        },
        "SessionList": {
            "type": "object",
            "required": ["sessions"],
            "properties": {"sessions": {"type": "array", "items": _ref("Session")}},
        },
        "Deleted": {
            "type": "object",
            "required": ["id", "purged"],
            "properties": {"id": text, "purged": {"type": "boolean"}},
        },
        "ExecutionResult": {
            "type": "object",
            "required": ["status", "text", "outputs"],
            "properties": {
                "status": {"enum": ["ok", "error", "timeout", "kernel_died", "cancelled"]},
                "execution_count": {"type": ["integer", "null"]},
                "stdout": text,
                "stderr": text,
                "outputs": {"type": "array", "items": {"type": "object"}},
                "error": {
                    "oneOf": [
                        {"type": "null"},
                        {
                            "type": "object",
                            "required": ["ename", "evalue", "traceback"],
                            "properties": {
                                "ename": text,
                                "evalue": text,
                                "traceback": {"type": "array", "items": text},
                            },
                        },
                    ]
                },
                "files": {"type": "array", "items": text},
                "duration": {"type": "number"},
                "text": text,
                "restarted": {"type": "boolean"},
                "message": nullable_text,
                "full_output": nullable_text,
                "language": text,
                "usage": {
                    "oneOf": [{"type": "null"}, _ref("Usage")],
                    "description": "CPU time and peak memory of this execution, measured in "
                    "the kernel; null for kernels kernelexec did not boot",
                },
                "data": {
                    "type": "array",
                    "items": {"oneOf": [_ref("TableData"), _ref("ChartData")]},
                    "description": "the DataFrames and matplotlib figures the outputs "
                    "showed, as data (see kernelexec.TableData, kernelexec.ChartData)",
                },
                "resumed": {
                    **_ref("RestoreReport"),
                    "description": "present when the session was suspended and this "
                    "execution restored it first: what came back and what did not (also "
                    "said at the start of message and text)",
                },
            },
        },
        **data_schemas(),
        "Usage": {
            "type": "object",
            "description": "see kernelexec.Usage",
            "properties": {
                "wall_seconds": {"type": "number"},
                "user_seconds": {"type": "number"},
                "system_seconds": {"type": "number"},
                "peak_rss_bytes": {"type": ["integer", "null"]},
                "children_user_seconds": {"type": "number"},
                "children_system_seconds": {"type": "number"},
                "children_max_rss_bytes": {"type": "integer"},
            },
        },
        "FileInfo": {
            "type": "object",
            "required": ["path", "size", "modified"],
            "properties": {
                "path": text,
                "size": {"type": "integer"},
                "modified": WHEN,
            },
        },
        "Variable": {
            "type": "object",
            "description": "A variable of the user namespace; 'unavailable' says why facts "
            "are missing (its repr or len raised, or took too long)",
            "required": ["name", "type"],
            "properties": {
                "name": text,
                "type": text,
                "shape": {"type": ["array", "null"], "items": {"type": "integer"}},
                "length": {"type": ["integer", "null"]},
                "dtype": nullable_text,
                "bytes": {"type": ["integer", "null"]},
                "repr": nullable_text,
                "unavailable": nullable_text,
            },
        },
        "VariableList": {
            "type": "object",
            "required": ["variables"],
            "properties": {"variables": {"type": "array", "items": _ref("Variable")}},
        },
        "VariableDetail": {
            "allOf": [_ref("Variable")],
            "description": "A DataFrame's columns and first rows as records, or anything "
            "else's public attributes; repr up to 2,000 characters",
            "properties": {
                "columns": {"type": ["array", "null"], "items": {"type": "object"}},
                "columns_truncated": {"type": "boolean"},
                "head": {"type": ["array", "null"], "items": {"type": "object"}},
                "attributes": {"type": "array", "items": {"type": "object"}},
            },
        },
        "FileList": {
            "type": "object",
            "required": ["files", "truncated"],
            "properties": {
                "files": {"type": "array", "items": _ref("FileInfo")},
                "truncated": {"type": "boolean"},
                "skipped": {"type": "array", "items": {"type": "string"}},
            },
        },
        "Health": {
            "type": "object",
            "required": ["status"],
            "properties": {"status": text, "version": text},
        },
        "Dropped": {
            "type": "object",
            "required": ["outputs", "chars"],
            "properties": {"outputs": {"type": "integer"}, "chars": {"type": "integer"}},
        },
        "Event": {
            "description": "One server-sent event; its data is one line of JSON",
            "type": "object",
            "required": ["event", "data"],
            "properties": {
                "event": {"enum": ["output", "dropped", "result", "error"]},
                "data": {"type": "string", "contentMediaType": _JSON},
            },
            "oneOf": [
                _event("output", {"type": "object", "required": ["output_type"]}),
                _event("dropped", _ref("Dropped")),
                _event("result", _ref("ExecutionResult")),
                _event("error", _ref("Error")),
            ],
        },
        **_jupyter_schemas(kernel_names),
    }


def _event(name: str, data: dict[str, Any]) -> dict[str, Any]:
    return {"properties": {"event": {"const": name}, "data": {"contentSchema": data}}}


def _jupyter_schemas(kernel_names: list[str]) -> dict[str, Any]:
    text = {"type": "string"}
    return {
        "Kernel": {
            "type": "object",
            "required": ["id", "name", "last_activity", "execution_state", "connections"],
            "properties": {
                "id": _KERNEL_ID["schema"],
                "name": text,
                "last_activity": text,
                "execution_state": {"enum": ["starting", "idle", "busy", "dead"]},
                "connections": {"type": "integer"},
            },
        },
        "KernelList": {"type": "array", "items": _ref("Kernel")},
        "KernelSpecs": {
            "type": "object",
            "required": ["default", "kernelspecs"],
            "properties": {
                "default": text,
                "kernelspecs": {
                    "type": "object",
                    "additionalProperties": {
                        "type": "object",
                        "required": ["name", "spec"],
                        "properties": {"name": text, "spec": {"type": "object"}},
                    },
                },
            },
        },
        "StartKernel": {
            "type": "object",
            "description": "Other fields of a Jupyter client's body are ignored",
            "properties": {
                "name": {"enum": [*kernel_names, None], "description": "null: python3"},
                "env": {
                    "type": "object",
                    "additionalProperties": text,
                    "description": "ignored: a kernel JupyterLab starts gets the server's",
                },
                "path": text,
            },
        },
    }


def _jupyter_paths() -> dict[str, Any]:
    """The Jupyter kernels API, for JupyterLab (its WebSocket channels are not HTTP)."""
    kernel = [_KERNEL_ID]
    tags = {"tags": ["jupyter"]}
    return {
        "/api/kernelspecs": {
            "get": _op(
                "The kernelspecs sessions may use",
                {"200": _json(_ref("KernelSpecs"), "Kernelspecs"), **_errors()},
                **tags,
            )
        },
        "/api/kernels": {
            "get": _op(
                "Every session's kernel",
                {"200": _json(_ref("KernelList"), "Kernels"), **_errors()},
                **tags,
            ),
            "post": _op(
                "Start a kernel: a new session, which JupyterLab may also shut down",
                {"201": _json(_ref("Kernel"), "Started"), **_errors(400, 429, 503)},
                requestBody={"content": {_JSON: {"schema": _ref("StartKernel")}}},
                **tags,
            ),
        },
        "/api/kernels/{kernel_id}": {
            "parameters": kernel,
            "get": _op(
                "A kernel",
                {"200": _json(_ref("Kernel"), "The kernel"), **_errors(404, 409)},
                **tags,
            ),
            "delete": _op(
                "Shut down a kernel JupyterLab started; an agent's is only let go of (200)",
                {
                    "204": {"description": "Shut down"},
                    "200": _json(
                        {
                            "type": "object",
                            "required": ["id", "shut_down", "message"],
                            "properties": {
                                "id": {"type": "string"},
                                "shut_down": {"const": False},
                                "message": {"type": "string"},
                            },
                        },
                        "An agent's kernel: not shut down, it keeps running",
                    ),
                    **_errors(404),
                },
                **tags,
            ),
        },
        "/api/kernels/{kernel_id}/interrupt": {
            "parameters": kernel,
            "post": _op(
                "Interrupt a kernel",
                {"204": {"description": "Interrupted"}, **_errors(404, 409, 410)},
                **tags,
            ),
        },
        "/api/kernels/{kernel_id}/restart": {
            "parameters": kernel,
            "post": _op(
                "Restart a kernel (recorded in its session's transcript)",
                {
                    "200": _json(_ref("Kernel"), "Restarted"),
                    **_errors(404, 409, 410, 429, 503, 507),
                },
                **tags,
            ),
        },
    }


def openapi_schema(config: ServerConfig, kernel_names: list[str]) -> dict[str, Any]:
    """The schema for a server with this config and these installed kernels."""
    session = [_SESSION_ID]
    execute_body = {"required": True, "content": {_JSON: {"schema": _ref("Execute")}}}
    paths = {
        "/health": {
            "get": _op(
                "Liveness; needs no token",
                {"200": _json(_ref("Health"), "The server is up")},
                security=[],
            )
        },
        "/openapi.json": {
            "get": _op(
                "This schema", {"200": _json({"type": "object"}, "OpenAPI 3.2"), **_errors()}
            )
        },
        "/sessions": {
            "post": _op(
                "Create a session and start its kernel (restoring a checkpoint if given)",
                {
                    "201": _json(_ref("Session"), "Created (restore_report: from a checkpoint)"),
                    **_errors(400, 403, 404, 409, 422, 429, 503, 507),
                },
                requestBody={"content": {_JSON: {"schema": _ref("CreateSession")}}},
            ),
            "get": _op(
                "List sessions", {"200": _json(_ref("SessionList"), "Sessions"), **_errors()}
            ),
        },
        "/sessions/{session_id}": {
            "parameters": session,
            "get": _op(
                "A session's state", {"200": _json(_ref("Session"), "The session"), **_errors(404)}
            ),
            "delete": _op(
                "Shut the kernel down and forget the session; files are kept unless purge=true",
                {"200": _json(_ref("Deleted"), "Deleted"), **_errors(400, 404)},
                parameters=[
                    {
                        "name": "purge",
                        "in": "query",
                        "required": False,
                        "schema": {"type": "boolean"},
                    }
                ],
            ),
        },
        "/sessions/{session_id}/execute": {
            "parameters": session,
            "post": _op(
                "Run code; the ExecutionResult",
                {
                    "200": _json(_ref("ExecutionResult"), "What the code did, failures included"),
                    **_errors(400, 404, 409, 410, 413, 429, 503, 507),
                },
                requestBody=execute_body,
            ),
        },
        "/sessions/{session_id}/execute/stream": {
            "parameters": session,
            "post": _op(
                "Run code; server-sent events: an 'output' event per output, then 'result'",
                {
                    "200": {
                        "description": "Server-sent events: 'output' per live output, "
                        "'dropped' for those left out, then 'result' (or 'error')",
                        "content": {"text/event-stream": {"itemSchema": _ref("Event")}},
                    },
                    **_errors(400, 404, 409, 410, 413, 429, 503, 507),
                },
                requestBody=execute_body,
            ),
        },
        "/sessions/{session_id}/interrupt": {
            "parameters": session,
            "post": _op(
                "Interrupt what the kernel runs",
                {"200": _json(_ref("Session"), "Interrupted"), **_errors(404, 409, 410)},
            ),
        },
        "/sessions/{session_id}/restart": {
            "parameters": session,
            "post": _op(
                "Replace the kernel; state is lost",
                {
                    "200": _json(_ref("Session"), "Restarted"),
                    **_errors(404, 409, 410, 429, 503, 507),
                },
            ),
        },
        "/sessions/{session_id}/fork": {
            "parameters": session,
            "post": _op(
                "Fork the session: a new session with a copy of its live state and files",
                {
                    "201": _json(_ref("Session"), "The new session, with its fork_report"),
                    **_errors(400, 404, 409, 410, 429, 503, 507),
                },
                requestBody={"content": {_JSON: {"schema": _ref("ForkBody")}}},
            ),
        },
        "/sessions/{session_id}/checkpoint": {
            "parameters": session,
            "post": _op(
                "Checkpoint the session's variables, imports and files into the server's store",
                {
                    "201": _json(_ref("Checkpoint"), "The checkpoint"),
                    **_errors(400, 404, 409, 410, 429, 503, 507),
                },
                requestBody={"content": {_JSON: {"schema": _ref("CheckpointBody")}}},
            ),
        },
        "/checkpoints": {
            "get": _op(
                "The server's checkpoints (and those it cannot read)",
                {"200": _json(_ref("CheckpointList"), "Checkpoints"), **_errors()},
            ),
        },
        "/checkpoints/{checkpoint_id}": {
            "parameters": [_CHECKPOINT_ID],
            "get": _op(
                "A checkpoint's manifest summary",
                {"200": _json(_ref("Checkpoint"), "The checkpoint"), **_errors(404, 422)},
            ),
            "delete": _op(
                "Remove a checkpoint",
                {"200": _json(_ref("CheckpointDeleted"), "Removed"), **_errors(404, 409)},
            ),
        },
        "/sessions/{session_id}/variables": {
            "parameters": session,
            "get": _op(
                "The kernel's variables, without running a cell (answers while one runs)",
                {
                    "200": _json(_ref("VariableList"), "The variables"),
                    **_errors(404, 409, 410, 429, 503, 507),
                },
            ),
        },
        "/sessions/{session_id}/variables/{name}": {
            "parameters": [_SESSION_ID, _VARIABLE],
            "get": _op(
                "One variable in more detail (a DataFrame's columns, dtypes and head)",
                {
                    "200": _json(_ref("VariableDetail"), "The variable"),
                    **_errors(404, 409, 410, 429, 503, 507),
                },
            ),
        },
        "/sessions/{session_id}/files": {
            "parameters": session,
            "get": _op(
                "Files in the work dir",
                {"200": _json(_ref("FileList"), "The files"), **_errors(403, 404)},
            ),
        },
        "/sessions/{session_id}/files/{path}": {
            "parameters": [_SESSION_ID, _PATH],
            "get": _op(
                "Download a file",
                {
                    "200": {
                        "description": "The file's bytes",
                        "content": {"*/*": {"schema": {"type": "string", "format": "binary"}}},
                    },
                    **_errors(400, 403, 404, 409),
                },
            ),
            "put": _op(
                "Upload a file (the body is its bytes)",
                {
                    "201": _json(_ref("FileInfo"), "Written"),
                    **_errors(400, 403, 404, 409, 413, 507),
                },
                requestBody={
                    "required": True,
                    "content": {
                        "application/octet-stream": {
                            "schema": {"type": "string", "format": "binary"}
                        }
                    },
                },
            ),
        },
        "/sessions/{session_id}/notebook": {
            "parameters": session,
            "get": _op(
                "The transcript (nbformat 4)",
                {
                    "200": {
                        "description": "The notebook",
                        "content": {"application/x-ipynb+json": {"schema": {"type": "object"}}},
                    },
                    **_errors(404, 409),
                },
            ),
        },
    }
    paths.update(execution_paths(session, execute_body, config.max_timeout))
    paths.update(_jupyter_paths())
    return {
        "openapi": "3.2.0",
        "info": {
            "title": "kernelexec",
            "version": __version__,
            "description": "Stateful code execution on Jupyter kernels.",
        },
        "paths": paths,
        "components": {
            "schemas": _schemas(config, kernel_names) | execution_schemas(),
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
    }
