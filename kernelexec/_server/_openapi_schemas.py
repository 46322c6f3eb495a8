"""The HTTP API's JSON bodies as JSON Schema: the components of /openapi.json.

A table, kept by hand beside the routes and held to them by schemathesis
(``tests/test_server_schema.py``): each body a route takes or gives, with the
server's own limits (``--max-timeout``, the installed kernels) in it.
"""

from __future__ import annotations

from typing import Any

from .._execution._data import data_schemas
from .._times import SCHEMA as WHEN
from ._config import ServerConfig
from ._jupyter_api import jupyter_schemas
from ._openapi_parts import JSON, event, ref
from ._options import options_schema

__all__ = ["schemas"]


def schemas(config: ServerConfig, kernel_names: list[str]) -> dict[str, Any]:
    """The components: each JSON body the routes take or give, for this server's settings."""
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
            "properties": {
                "error": text,
                "message": text,
                "scope": {**text, "description": "missing_scope: the scope the route needs"},
                "quota": {**text, "description": "quota_exceeded: the quota it would pass"},
            },
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
                "skipped": {"type": "array", "items": ref("Skipped")},
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
                "skipped": {"type": "array", "items": ref("Skipped")},
                "files": {"type": "integer"},
                "size": {"type": "integer", "description": "bytes of variable data"},
                "packages": {"type": "object", "additionalProperties": text},
            },
        },
        "CheckpointList": {
            "type": "object",
            "required": ["checkpoints", "unreadable"],
            "properties": {
                "checkpoints": {"type": "array", "items": ref("Checkpoint")},
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
                "tenant": {
                    "type": "string",
                    "description": "the tenant whose session it is (default: a server of one "
                    "--token); only it, and tenants with the admin scope, see it",
                },
                "options": {
                    "type": "object",
                    "description": "the session options it was created with",
                },
                "sandbox": {
                    "type": ["object", "null"],
                    "description": "the containment of its kernel in force (kernelexec.Sandbox: "
                    "read, write, network, memory, processes, open_files, gpus); null: uncontained",
                },
                "node": {
                    "type": ["object", "null"],
                    "description": "where its kernel runs on the server's Ray cluster (serve "
                    "--ray): node_id, address, gpus (the ids of the node's GPUs it holds) and "
                    "pooled (its kernel was a ready one of the node's pool, --pool-size); "
                    "null: on no cluster, or not started",
                },
                "message": {
                    "type": "string",
                    "description": "suspended or culled: what became of its kernel and state",
                },
                "fork_report": ref("ForkReport"),
                "restore_report": ref("RestoreReport"),
            },
        },
        "SessionList": {
            "type": "object",
            "required": ["sessions"],
            "properties": {"sessions": {"type": "array", "items": ref("Session")}},
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
                "status": {
                    "enum": ["ok", "error", "timeout", "kernel_died", "cancelled", "quota_exceeded"]
                },
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
                    "oneOf": [{"type": "null"}, ref("Usage")],
                    "description": "CPU time and peak memory of this execution, measured in "
                    "the kernel; null for kernels kernelexec did not boot",
                },
                "data": {
                    "type": "array",
                    "items": {"oneOf": [ref("TableData"), ref("ChartData")]},
                    "description": "the DataFrames and matplotlib figures the outputs "
                    "showed, as data (see kernelexec.TableData, kernelexec.ChartData)",
                },
                "resumed": {
                    **ref("RestoreReport"),
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
            "properties": {"variables": {"type": "array", "items": ref("Variable")}},
        },
        "VariableDetail": {
            "allOf": [ref("Variable")],
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
                "files": {"type": "array", "items": ref("FileInfo")},
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
                "data": {"type": "string", "contentMediaType": JSON},
            },
            "oneOf": [
                event("output", {"type": "object", "required": ["output_type"]}),
                event("dropped", ref("Dropped")),
                event("result", ref("ExecutionResult")),
                event("error", ref("Error")),
            ],
        },
        **jupyter_schemas(kernel_names),
    }
