"""An ExecutionResult as the server sends it: strict JSON, whatever the kernel put in it.

A kernel's messages are JSON, but not necessarily strict JSON: a kernel that
packs its own messages can send ``NaN`` or a display whose metadata is nested
a thousand levels deep, and either would fail the encoder after the code ran,
costing the caller its result. Such a result is sent with those parts
replaced (``null`` for a number JSON has no word for, a marker for the
nesting) rather than not at all.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, fields
from typing import Any

from .._models import ExecutionResult

__all__ = ["MAX_DEPTH", "result_json"]

MAX_DEPTH = 64
"""Containers nested deeper than this in a result that failed to encode are left out."""

_TOO_DEEP = f"[kernelexec: left out, nested deeper than {MAX_DEPTH} levels]"


def _encode(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=True, allow_nan=False).encode("ascii")


def result_json(result: ExecutionResult) -> bytes:
    """The result's ``to_dict()`` as ASCII JSON bytes."""
    try:
        return _encode(result.to_dict())
    except (ValueError, RecursionError):
        pass  # NaN or Infinity, or nesting deeper than the encoder (or asdict) can go
    shallow = {f.name: getattr(result, f.name) for f in fields(result)}
    if result.error is not None:
        shallow["error"] = asdict(result.error)
    return _encode(_strict(shallow, 0))


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
