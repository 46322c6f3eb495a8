"""The concise ``text`` of a result: what an LLM should read, never base64."""

from __future__ import annotations

import json
import re
from typing import Any

from ._ansi import strip_ansi
from ._artifacts import Saved
from ._reducer import cut_records

__all__ = ["cap_text", "collapse_carriage_returns", "render_outputs"]

# Reprs that say nothing once the real payload was saved as a file.
_EMPTY_REPR = re.compile(
    r"^<[^<>\n]*(?: object| at 0x[0-9a-fA-F]+|Figure size [^<>\n]*| image mode=\w+ size=\d+x\d+)>$"
)
_TEXT_MIMETYPES = ("text/markdown", "text/latex")


def render_outputs(outputs: list[dict[str, Any]], saved: Saved, *, errors: bool = True) -> str:
    """One block of text for every output, in order; ``errors=False`` leaves tracebacks out."""
    parts: list[str] = []
    for index, output in enumerate(outputs):
        kind = output.get("output_type")
        if kind == "error" and not errors:
            continue
        if kind == "stream":
            piece = collapse_carriage_returns(strip_ansi(_as_text(output.get("text", ""))))
        elif kind == "error":
            piece = strip_ansi("\n".join(_as_text(t) for t in output.get("traceback", [])))
            if not piece.strip():
                piece = f"{output.get('ename', 'Error')}: {output.get('evalue', '')}"
        else:
            piece = _render_bundle(output, saved.get(index, []))
        if piece:
            parts.append(piece if piece.endswith("\n") else piece + "\n")
    return "".join(parts)


def cap_text(text: str, max_chars: int, full_output: str | None, *, already_cut: int = 0) -> str:
    """Keeps the head and tail of ``text`` around a marker saying what was cut.

    ``already_cut`` counts output dropped before ``text`` was rendered, so the
    marker tells the whole loss, not just this last trim.
    """
    if len(text) <= max_chars:
        return text
    keep = max_chars // 2
    cut = len(text) - 2 * keep + already_cut
    where = f"; the full output is in {full_output}" if full_output else ""
    return f"{text[:keep]}\n[... {cut:,} characters cut{where} ...]\n{text[-keep:]}"


def collapse_carriage_returns(text: str) -> str:
    """Shows each line as a terminal would leave it after ``\\r`` redraws."""
    if "\r" not in text:
        return text
    lines = text.replace("\r\n", "\n").split("\n")
    return "\n".join(_last_drawn(line) for line in lines)


def _last_drawn(line: str) -> str:
    segments = [s for s in line.split("\r") if s]
    return segments[-1] if segments else ""


def _render_bundle(output: dict[str, Any], files: list[tuple[str, str]]) -> str:
    data = output.get("data") or {}
    metadata = output.get("metadata")
    # Parts left out for the byte caps show as their files, as saved images do.
    left_out = [
        _left_out(r)
        for r in cut_records(metadata.get("kernelexec") if isinstance(metadata, dict) else None)
        if not r["kept"]
    ]
    lines: list[str] = []
    text = _bundle_text(data)
    if text and not ((files or left_out) and _EMPTY_REPR.match(text.strip())):
        lines.append(strip_ansi(text))
    lines.extend(f"[{mimetype} saved to {path}]" for mimetype, path in files)
    lines.extend(left_out)
    if not lines and data:
        lines.append(f"[display of {', '.join(sorted(data))}]")
    return "\n".join(lines)


def _left_out(record: dict[str, Any]) -> str:
    what = f"{record['part']}, {record['bytes']:,} bytes,"
    if record["path"]:
        return f"[{what} saved to {record['path']}]"
    why = f": {record['error']}" if record["error"] else ""
    return f"[{what} left out{why}]"


def _bundle_text(data: dict[str, Any]) -> str:
    for mimetype in _TEXT_MIMETYPES:
        if mimetype in data:
            return _as_text(data[mimetype])
    if "application/json" in data:
        try:
            return json.dumps(data["application/json"], indent=2, ensure_ascii=False)
        except (TypeError, ValueError):
            return str(data["application/json"])
    plain = data.get("text/plain")
    return _as_text(plain) if plain is not None else ""


def _as_text(value: object) -> str:
    if isinstance(value, list):
        return "".join(str(v) for v in value)
    return value if isinstance(value, str) else str(value)
