"""An ExecutionResult as the server sends it: strict JSON, whatever the kernel put in it.

A kernel's messages are JSON, but not necessarily strict JSON: a kernel that
packs its own messages can send ``NaN`` or a display whose metadata is nested
a thousand levels deep, and either would fail the encoder after the code ran,
costing the caller its result. Such a result is sent with those parts
replaced (``null`` for a number JSON has no word for, a marker for the
nesting) rather than not at all.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from dataclasses import asdict, fields
from typing import Any

from .._execution._models import ExecutionResult
from .._state._manifest import RestoreReport

__all__ = ["MAX_DEPTH", "result_json", "resumed_result"]

MAX_DEPTH = 64
"""Containers nested deeper than this in a result that failed to encode are left out."""

_TOO_DEEP = f"[kernelexec: left out, nested deeper than {MAX_DEPTH} levels]"


def _encode(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=True, allow_nan=False).encode("ascii")


def result_json(result: ExecutionResult, extra: Mapping[str, Any] | None = None) -> bytes:
    """The result's ``to_dict()`` (and the server's ``extra`` fields) as ASCII JSON bytes."""
    try:
        return _encode(result.to_dict() | dict(extra or {}))
    except (ValueError, RecursionError):
        pass  # NaN or Infinity, or nesting deeper than the encoder (or asdict) can go
    shallow = {f.name: getattr(result, f.name) for f in fields(result)}
    for name in ("error", "usage"):  # the nested dataclasses, as to_dict() gives them
        if shallow[name] is not None:
            shallow[name] = asdict(shallow[name])
    shallow["data"] = [asdict(item) for item in shallow["data"]]
    return _encode(_strict(shallow | dict(extra or {}), 0))


def resumed_result(result: ExecutionResult, report: RestoreReport, idle: float) -> ExecutionResult:
    """The result of the execution that woke a suspended session, saying so first.

    ``message`` and ``text`` begin with what came back and what did not;
    ``restarted`` is true: the kernel is a new one, and what was not restored
    (open files, threads, sockets, a variable that could not be pickled) is gone.
    """
    said = (
        f"This session had been suspended after {idle:.0f} s idle (state checkpointed, "
        "kernel shut down); a new kernel was started in the same work dir and "
        f"{len(report.restored)} variables and {len(report.modules)} modules were restored "
        "before this code ran"
    )
    if report.restored:
        said += f" ({', '.join(report.restored)})"
    said += "."
    if report.skipped:
        said += (
            " Not restored: "
            + "; ".join(f"{s.name} ({s.type}): {s.reason}" for s in report.skipped)
            + "."
        )
    if report.message:
        said += f" {report.message}"
    message = f"{said} {result.message}" if result.message else said
    return dataclasses.replace(
        result, message=message, text=f"[kernelexec] {said}\n{result.text}", restarted=True
    )


def _strict(value: Any, depth: int) -> Any:
    """A copy of ``value`` that strict JSON can hold, at most MAX_DEPTH containers deep."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, (dict, list, tuple)):
        if depth >= MAX_DEPTH:
            return _TOO_DEEP
        if isinstance(value, dict):
            return {str(k): _strict(v, depth + 1) for k, v in value.items()}
        return [_strict(v, depth + 1) for v in value]
    return value
