"""Points in time as kernelexec reports them: ISO 8601 text in UTC, to the millisecond.

One format on every door (the library, HTTP, the clients, MCP) for every
"when": a session's ``created`` and ``last_activity``, a file's ``modified``, a
checkpoint's ``created``, an execution's ``created``, ``started`` and
``finished``. ``"2025-06-01T12:00:03.250Z"`` reads the same to a person and to
an LLM, sorts as text in time order, and parses with
``datetime.fromisoformat`` (Python 3.11+; 3.10 after ``.replace("Z", "+00:00")``).
Durations stay numbers of seconds (``ExecutionResult.duration``).
"""

from __future__ import annotations

import time
from typing import Any

__all__ = ["SCHEMA", "iso", "now"]

SCHEMA: dict[str, Any] = {
    "type": "string",
    "format": "date-time",
    "description": "ISO 8601, UTC, to the millisecond (2025-06-01T12:00:03.250Z)",
}
"""The JSON schema of a time, for the OpenAPI description."""


def iso(seconds: float) -> str:
    """``seconds`` since the epoch (``time.time()``) as ``YYYY-MM-DDTHH:MM:SS.mmmZ``."""
    whole = int(seconds // 1)
    millis = min(round((seconds - whole) * 1000), 999)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)) + f".{millis:03d}Z"


def now() -> str:
    """The time now, as ``iso`` writes it."""
    return iso(time.time())
