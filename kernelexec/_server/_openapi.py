"""The OpenAPI 3.1 description of the HTTP API, served at /openapi.json.

Written by hand next to the routes (the bodies in ``_openapi_schemas.py``, the
executions' routes in ``_executions.py``, the Jupyter kernels API's in
``_jupyter_api.py``); the test suite runs schemathesis against
it with every check, which holds each answer's status, content type, headers
and body to it, and each request it calls invalid to a refusal. OpenAPI 3.2,
for ``itemSchema``: the streaming route's body is a sequence of events, each
described on its own.
"""

from __future__ import annotations

import re
from typing import Any

from .._version import __version__
from ._access import OPEN
from ._config import ServerConfig
from ._executions import execution_paths, execution_schemas
from ._jupyter_api import JUPYTER_ROUTES, jupyter_paths
from ._openapi_parts import (
    CHECKPOINT_ID,
    JSON,
    PATH,
    SESSION_ID,
    VARIABLE,
    errors,
    json_answer,
    op,
    ref,
)
from ._openapi_schemas import schemas
from ._routes import ROUTES

__all__ = ["openapi_schema"]


def openapi_schema(config: ServerConfig, kernel_names: list[str]) -> dict[str, Any]:
    """The schema for a server with this config and these installed kernels."""
    session = [SESSION_ID]
    execute_body = {"required": True, "content": {JSON: {"schema": ref("Execute")}}}
    paths = {
        "/health": {
            "get": op(
                "Liveness; needs no token",
                {"200": json_answer(ref("Health"), "The server is up")},
                security=[],
            )
        },
        "/openapi.json": {
            "get": op(
                "This schema", {"200": json_answer({"type": "object"}, "OpenAPI 3.2"), **errors()}
            )
        },
        "/sessions": {
            "post": op(
                "Create a session and start its kernel (restoring a checkpoint if given)",
                {
                    "201": json_answer(
                        ref("Session"), "Created (restore_report: from a checkpoint)"
                    ),
                    **errors(400, 403, 404, 409, 422, 429, 503, 507),
                },
                requestBody={"content": {JSON: {"schema": ref("CreateSession")}}},
            ),
            "get": op(
                "List sessions", {"200": json_answer(ref("SessionList"), "Sessions"), **errors()}
            ),
        },
        "/sessions/{session_id}": {
            "parameters": session,
            "get": op(
                "A session's state",
                {"200": json_answer(ref("Session"), "The session"), **errors(404)},
            ),
            "delete": op(
                "Shut the kernel down and forget the session; files are kept unless purge=true",
                {"200": json_answer(ref("Deleted"), "Deleted"), **errors(400, 404)},
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
            "post": op(
                "Run code; the ExecutionResult",
                {
                    "200": json_answer(
                        ref("ExecutionResult"), "What the code did, failures included"
                    ),
                    **errors(400, 404, 409, 410, 413, 429, 503, 507),
                },
                requestBody=execute_body,
            ),
        },
        "/sessions/{session_id}/execute/stream": {
            "parameters": session,
            "post": op(
                "Run code; server-sent events: an 'output' event per output, then 'result'",
                {
                    "200": {
                        "description": "Server-sent events: 'output' per live output, "
                        "'dropped' for those left out, then 'result' (or 'error')",
                        "content": {"text/event-stream": {"itemSchema": ref("Event")}},
                    },
                    **errors(400, 404, 409, 410, 413, 429, 503, 507),
                },
                requestBody=execute_body,
            ),
        },
        "/sessions/{session_id}/interrupt": {
            "parameters": session,
            "post": op(
                "Interrupt what the kernel runs",
                {"200": json_answer(ref("Session"), "Interrupted"), **errors(404, 409, 410)},
            ),
        },
        "/sessions/{session_id}/restart": {
            "parameters": session,
            "post": op(
                "Replace the kernel; state is lost",
                {
                    "200": json_answer(ref("Session"), "Restarted"),
                    **errors(404, 409, 410, 429, 503, 507),
                },
            ),
        },
        "/sessions/{session_id}/fork": {
            "parameters": session,
            "post": op(
                "Fork the session: a new session with a copy of its live state and files",
                {
                    "201": json_answer(ref("Session"), "The new session, with its fork_report"),
                    **errors(400, 404, 409, 410, 429, 503, 507),
                },
                requestBody={"content": {JSON: {"schema": ref("ForkBody")}}},
            ),
        },
        "/sessions/{session_id}/checkpoint": {
            "parameters": session,
            "post": op(
                "Checkpoint the session's variables, imports and files into the server's store",
                {
                    "201": json_answer(ref("Checkpoint"), "The checkpoint"),
                    **errors(400, 404, 409, 410, 429, 503, 507),
                },
                requestBody={"content": {JSON: {"schema": ref("CheckpointBody")}}},
            ),
        },
        "/checkpoints": {
            "get": op(
                "The server's checkpoints (and those it cannot read)",
                {"200": json_answer(ref("CheckpointList"), "Checkpoints"), **errors()},
            ),
        },
        "/checkpoints/{checkpoint_id}": {
            "parameters": [CHECKPOINT_ID],
            "get": op(
                "A checkpoint's manifest summary",
                {"200": json_answer(ref("Checkpoint"), "The checkpoint"), **errors(404, 422)},
            ),
            "delete": op(
                "Remove a checkpoint",
                {"200": json_answer(ref("CheckpointDeleted"), "Removed"), **errors(404, 409)},
            ),
        },
        "/sessions/{session_id}/variables": {
            "parameters": session,
            "get": op(
                "The kernel's variables, without running a cell (answers while one runs)",
                {
                    "200": json_answer(ref("VariableList"), "The variables"),
                    **errors(404, 409, 410, 429, 503, 507),
                },
            ),
        },
        "/sessions/{session_id}/variables/{name}": {
            "parameters": [SESSION_ID, VARIABLE],
            "get": op(
                "One variable in more detail (a DataFrame's columns, dtypes and head)",
                {
                    "200": json_answer(ref("VariableDetail"), "The variable"),
                    **errors(404, 409, 410, 429, 503, 507),
                },
            ),
        },
        "/sessions/{session_id}/files": {
            "parameters": session,
            "get": op(
                "Files in the work dir",
                {"200": json_answer(ref("FileList"), "The files"), **errors(403, 404)},
            ),
        },
        "/sessions/{session_id}/files/{path}": {
            "parameters": [SESSION_ID, PATH],
            "get": op(
                "Download a file",
                {
                    "200": {
                        "description": "The file's bytes",
                        "content": {"*/*": {"schema": {"type": "string", "format": "binary"}}},
                    },
                    **errors(400, 403, 404, 409),
                },
            ),
            "put": op(
                "Upload a file (the body is its bytes)",
                {
                    "201": json_answer(ref("FileInfo"), "Written"),
                    **errors(400, 403, 404, 409, 413, 507),
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
            "get": op(
                "The transcript (nbformat 4)",
                {
                    "200": {
                        "description": "The notebook",
                        "content": {"application/x-ipynb+json": {"schema": {"type": "object"}}},
                    },
                    **errors(404, 409),
                },
            ),
        },
    }
    paths.update(execution_paths(session, execute_body, config.max_timeout))
    paths.update(jupyter_paths())
    _scopes(paths)
    return {
        "openapi": "3.2.0",
        "info": {
            "title": "kernelexec",
            "version": __version__,
            "description": "Stateful code execution on Jupyter kernels.",
        },
        "paths": paths,
        "components": {
            "schemas": schemas(config, kernel_names) | execution_schemas(),
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
    }


def _scopes(paths: dict[str, Any]) -> None:
    """Each operation's scope, as ``x-kernelexec-scope``, from the routes themselves, and
    the answers every operation behind the token may give (401, 403, 413, 429)."""
    for route in [*ROUTES, *JUPYTER_ROUTES]:
        for method, scope in getattr(route, "scopes", {}).items():
            path = re.sub(r":\w+}", "}", getattr(route, "path", ""))  # {path:path} is {path}
            found = paths.get(path, {}).get(method.lower())
            if found is None or scope == OPEN:
                continue
            if scope is not None:
                found["x-kernelexec-scope"] = scope
            # Whatever else it answers, a token's tenant can lack its scope or pass its rate.
            answers = found.setdefault("responses", {})
            for status, answer in errors().items():
                answers.setdefault(status, answer)
