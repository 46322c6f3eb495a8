"""What an audit line may hold: a fixed list of fields, each of one type, checked on the way in.

The list is closed on purpose. An audit log outlives the server and is read
by more people than its tenants, so what a tenant sent (its code, its files)
and what its kernel printed must never reach it, nor a token. A key that is
not here (``code``, ``outputs``, ``token``, a typo) is a ``ValueError`` at
the call, in the caller's tests, rather than a secret in a file years later.

Strings are held to ``MAX_TEXT`` characters, a path loses its query string
(where a Jupyter client may put its token), and anything shaped like a
kernelexec token is blanked out, so a token pasted into an error message
does not land in the log either. No I/O here: ``_log.py`` writes the result.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .._tenants._tokens import TOKEN_PREFIX
from .._times import now

if TYPE_CHECKING:
    from .._execution._models import ExecutionResult

__all__ = ["FIELDS", "FORMAT_VERSION", "KINDS", "MAX_TEXT", "code_fields", "make_line"]

FORMAT_VERSION = 1
KINDS = ("request", "execution", "server")
MAX_TEXT = 1024  # characters of one string: keeps a line to a few KiB, so one write holds it

# Name -> (type, meaning). The order is the order of a line's keys; the types
# are those of JSON: "string", "integer", "number", "object" (of numbers).
FIELDS: dict[str, tuple[str, str]] = {
    "v": ("integer", "the format's version, 1; written by the log"),
    "time": ("string", "when record() was called, UTC, to the millisecond; written by the log"),
    "kind": ("string", "request, execution or server"),
    "event": ("string", "what happened to the server: start, stop, tenants_reloaded, dropped"),
    "count": ("integer", "with event dropped: how many events the log could not keep"),
    "door": ("string", "the door a request came in by: http or mcp"),
    "client": ("string", "the address the request came from"),
    "tenant": ("string", "the tenant's name"),
    "token_id": ("string", "the id of the token used: never the token"),
    "session": ("string", "the session's id"),
    "execution_id": ("string", "the execution's id"),
    "method": ("string", "the HTTP method"),
    "route": ("string", "the route's template (/sessions/{session_id}) or the MCP tool's name"),
    "path": ("string", "the path asked for, without its query string"),
    "status": ("integer", "the HTTP status answered"),
    "error": ("string", "the error code of a refused or failed request"),
    "scope": ("string", "the scope the request needed"),
    "quota": ("string", "the quota that refused it"),
    "language": ("string", "the code's language: python, bash"),
    "code_sha256": ("string", "the SHA-256 of the code's UTF-8 bytes, hex: never the code"),
    "code_bytes": ("integer", "the code's size in UTF-8 bytes"),
    "outcome": (
        "string",
        "how the execution ended: ok, error, timeout, kernel_died, cancelled, quota_exceeded "
        "(or failed: it never ran)",
    ),
    "duration_seconds": ("number", "how long the request or execution took"),
    "usage": ("object", "what the execution cost: its Usage, numbers (or null) by name"),
    "bytes_in": ("integer", "bytes of the request's body"),
    "bytes_out": ("integer", "bytes of the answer or of the execution's outputs"),
    "message": ("string", "a few words on what happened; never user content"),
}
_WRITTEN_BY_LOG = ("v", "time")
_TOKEN = re.compile(re.escape(TOKEN_PREFIX) + r"[A-Za-z0-9_-]{8,}")
_TOKEN_BLANK = TOKEN_PREFIX + "<redacted>"


def code_fields(code: str) -> dict[str, Any]:
    """The fields that stand for ``code`` in a line: its SHA-256 and its size, never itself.

    The hash lets an auditor match a line to code they hold (a transcript, a
    tenant's report) without the log holding anyone's code.
    """
    data = code.encode("utf-8", "surrogatepass")
    return {"code_sha256": hashlib.sha256(data).hexdigest(), "code_bytes": len(data)}


def execution_line(
    who: tuple[str, str] | None,
    session: str,
    execution_id: str | None,
    code: str,
    language: str | None,
    result: ExecutionResult | None,
    **more: Any,
) -> dict[str, Any]:
    """The line of one execution, as every door records it: who (tenant and token id),
    where, the code's hash and size, how it ended (``failed``: no result) and its cost."""
    event: dict[str, Any] = {
        "kind": "execution",
        "tenant": None if who is None else who[0],
        "token_id": None if who is None else who[1],
        "session": session,
        "execution_id": execution_id,
        "language": language or "python",
        **code_fields(code),
        "outcome": "failed" if result is None else result.status,
        **more,
    }
    if result is not None:
        event["usage"] = result.usage
        event["bytes_out"] = (
            len(result.stdout.encode("utf-8", "surrogatepass"))
            + len(result.stderr.encode("utf-8", "surrogatepass"))
            + len(json.dumps(result.outputs).encode())
        )
    return event


def make_line(event: Mapping[str, Any]) -> dict[str, Any]:
    """``event`` checked and made into a line's fields: ``v`` and ``time`` first, then its own.

    A None value is left out (unknown is absent, so a caller may pass
    ``identity and identity.tenant.name``); ``usage`` may be a dataclass
    (``ExecutionResult.usage``) or a mapping of numbers.

    Raises:
        ValueError: a key that is not in ``FIELDS`` (or one the log writes
            itself), no ``kind`` or one not in ``KINDS``, a number that is not
            finite.
        TypeError: a value not of its field's type.
    """
    unknown = sorted(str(key) for key in event if key not in FIELDS or key in _WRITTEN_BY_LOG)
    if unknown:
        raise ValueError(
            f"the audit log has no field {', '.join(map(repr, unknown))}: it takes only "
            f"{', '.join(name for name in FIELDS if name not in _WRITTEN_BY_LOG)} "
            "(code, outputs and tokens are never logged; code_fields(code) stands for code)"
        )
    if event.get("kind") not in KINDS:
        raise ValueError(f"an audit event needs a kind, one of {', '.join(KINDS)}")
    line: dict[str, Any] = {"v": FORMAT_VERSION, "time": now()}
    for name, (kind, _) in FIELDS.items():
        value = event.get(name)
        if value is not None and name not in _WRITTEN_BY_LOG:
            line[name] = _checked(name, kind, value)
    return line


def _checked(name: str, kind: str, value: Any) -> Any:
    if kind == "string" and isinstance(value, str):
        if name == "path":
            value = value.partition("?")[0]
        return _text(value)
    # bool is an int to Python, but True is not a status or a size.
    if kind == "integer" and isinstance(value, int) and not isinstance(value, bool):
        return value
    if kind == "number" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return _finite(name, value)
    if kind == "object":
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            value = dataclasses.asdict(value)
        if isinstance(value, Mapping):
            return {_text(str(key)): _number(f"{name}.{key}", item) for key, item in value.items()}
    article = "an" if kind[0] in "aeiou" else "a"
    raise TypeError(f"the audit field {name!r} takes {article} {kind}, not {type(value).__name__}")


def _number(name: str, value: Any) -> float | int | None:
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return _finite(name, value)
    raise TypeError(f"the audit field {name!r} takes a number or null, not {type(value).__name__}")


def _finite(name: str, value: float) -> float:
    # JSON has no NaN or Infinity: json.dumps would write a line no parser reads.
    if not math.isfinite(value):
        raise ValueError(f"the audit field {name!r} takes a finite number, not {value}")
    return value


def _text(value: str) -> str:
    # Blanked before it is cut, so that no cut leaves a token's head unrecognised.
    value = _TOKEN.sub(_TOKEN_BLANK, value)
    return value if len(value) <= MAX_TEXT else value[: MAX_TEXT - 3] + "..."
