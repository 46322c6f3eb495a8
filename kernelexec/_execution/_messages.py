"""One kernel message read: as an nbformat output, and the kernel's own reports in it.

The reducer (``_reducer.py``) folds a whole execution's messages; these read
one message each. What the kernel reports about itself (the cuts it made to
the byte caps, its usage, an execution count) is written by the process that
runs the code being capped and measured, so each is held to its shape and
range here before anything uses it.
"""

from __future__ import annotations

import re
from typing import Any

from ._ansi import strip_ansi
from ._models import ExecutionError, Usage

__all__ = [
    "Record",
    "count_from",
    "cut_records",
    "error_from",
    "live_output",
    "notebook_output",
    "usage_from",
]

Message = dict[str, Any]
Record = dict[str, Any]
"""One output part cut to the byte caps (see ``kernelexec._kernel.caps``)."""

# The files our kernel names (outputs/in<N>-<kind>.<ext>): one name in outputs/.
_KERNEL_FILE = re.compile(r"outputs/[A-Za-z0-9][A-Za-z0-9._+-]{0,150}")
_MAX_SECONDS = 1e9  # beyond any real execution: a kernel reporting more is not believed
_MAX_BYTES = 1 << 60


def live_output(msg: Message) -> dict[str, Any] | None:
    """What a message shows, for a listener that displays output as it happens.

    Streams, displays, results and errors come as nbformat outputs;
    ``clear_output`` and ``update_display_data`` come as events of those
    names, so a live view can apply them as JupyterLab would. Other
    messages (status, replies) show nothing and give None.
    """
    kind = msg.get("header", {}).get("msg_type")
    content = msg.get("content") or {}
    try:
        if kind in ("stream", "display_data", "execute_result", "error"):
            output: dict[str, Any] = notebook_output(msg)
            return output
        if kind == "clear_output":
            return {"output_type": "clear_output", "wait": bool(content.get("wait"))}
        if kind == "update_display_data":
            return {
                "output_type": "update_display_data",
                "display_id": (content.get("transient") or {}).get("display_id"),
                "data": content["data"],
                "metadata": content.get("metadata", {}),
            }
    except (KeyError, TypeError, ValueError, AttributeError):
        pass  # a malformed message is the reducer's to count, not the listener's
    return None


def notebook_output(msg: Message) -> dict[str, Any]:
    """The nbformat v4 output of an IOPub message, as ``nbformat.v4.output_from_msg`` makes it.

    Built directly rather than through nbformat, which validates every output
    against the notebook JSON schema: a fifth of a millisecond per output, on
    the path of every execution. The transcript is still a valid notebook
    (the tests validate it); the reducer's tests check this against nbformat's.

    Raises:
        KeyError, TypeError, ValueError: the message is malformed.
    """
    kind = msg["header"]["msg_type"]
    content = msg["content"]
    if kind == "stream":
        name, text = content["name"], content["text"]
        if not isinstance(text, str):
            raise TypeError("stream text must be a string")
        return {"output_type": "stream", "name": name, "text": text}
    if kind in ("display_data", "execute_result"):
        data, metadata = content["data"], content.get("metadata", {})
        if not isinstance(data, dict) or not isinstance(metadata, dict):
            raise TypeError("a display's data and metadata must be objects")
        output: dict[str, Any] = {"output_type": kind, "data": data, "metadata": metadata}
        if kind == "execute_result":
            output["execution_count"] = content["execution_count"]
        return output
    if kind == "error":
        return {
            "output_type": "error",
            "ename": str(content["ename"]),
            "evalue": str(content["evalue"]),
            "traceback": [str(line) for line in content["traceback"]],
        }
    raise ValueError(f"{kind} messages have no notebook output")


def cut_records(value: object) -> list[Record]:
    """The well-formed cut records in ``{"cut": [...]}``, as a kernel reported them.

    The kernel runs the code we are capping, so its report is checked: a
    path must be one name in ``outputs/``, never a way out of the work dir.
    """
    cut = value.get("cut") if isinstance(value, dict) else None
    if not isinstance(cut, list):
        return []
    records: list[Record] = []
    for record in cut[:100]:
        if not isinstance(record, dict):
            continue
        part, whole, kept = record.get("part"), record.get("bytes"), record.get("kept")
        path, error = record.get("path"), record.get("error")
        if not (isinstance(part, str) and 0 < len(part) <= 100):
            continue
        if not (type(whole) is int and type(kept) is int and 0 <= kept <= whole):
            continue
        if path is not None and not (isinstance(path, str) and _KERNEL_FILE.fullmatch(path)):
            continue
        records.append(
            {
                "part": part,
                "bytes": whole,
                "kept": kept,
                "path": path,
                "error": str(error)[:200] if error else None,
            }
        )
    return records


def usage_from(value: object) -> Usage | None:
    """The ``Usage`` in an execute_reply's metadata, None if absent or malformed.

    The kernel runs the code being measured, which may rewrite what it
    reports: every figure must be a finite number in range, or none is taken.
    """
    if not isinstance(value, dict):
        return None
    seconds: dict[str, float] = {}
    for name in (
        "wall_seconds",
        "user_seconds",
        "system_seconds",
        "children_user_seconds",
        "children_system_seconds",
    ):
        number = value.get(name)
        if isinstance(number, bool) or not isinstance(number, (int, float)):
            return None
        if not 0 <= number <= _MAX_SECONDS:
            return None  # NaN too: it compares false
        seconds[name] = round(float(number), 6)
    peak, children_peak = value.get("peak_rss_bytes"), value.get("children_max_rss_bytes")
    if peak is not None and not (type(peak) is int and 0 <= peak <= _MAX_BYTES):
        return None
    if not (type(children_peak) is int and 0 <= children_peak <= _MAX_BYTES):
        return None
    return Usage(**seconds, peak_rss_bytes=peak, children_max_rss_bytes=children_peak)


def count_from(value: object, current: int | None) -> int | None:
    """An execution count the kernel sent, if it is one; else ``current``.

    The kernel's code may send anything there (a string it chose), and the
    count goes into results and traces as a number.
    """
    return value if type(value) is int and 0 <= value < 2**63 else current


def error_from(content: dict[str, Any]) -> ExecutionError:
    """An error message's content as an ``ExecutionError``, its ANSI colours stripped."""
    return ExecutionError(
        ename=str(content.get("ename", "Error")),
        evalue=strip_ansi(str(content.get("evalue", ""))),
        traceback=[strip_ansi(str(line)) for line in content.get("traceback") or []],
    )
