"""The concise ``text`` of a result: what an LLM should read, never base64."""

from __future__ import annotations

import json
import re
from typing import Any

from ._ansi import strip_ansi
from ._artifacts import Saved
from ._messages import cut_records

__all__ = ["cap_text", "collapse_carriage_returns", "render_outputs", "render_parts"]

# Reprs that say nothing once the real payload was saved as a file.
_EMPTY_REPR = re.compile(
    r"^<[^<>\n]*(?: object| at 0x[0-9a-fA-F]+|Figure size [^<>\n]*| image mode=\w+ size=\d+x\d+)>$"
)
_TEXT_MIMETYPES = ("text/markdown", "text/latex")


def render_outputs(outputs: list[dict[str, Any]], saved: Saved, *, errors: bool = True) -> str:
    """One block of text for every output, in order; ``errors=False`` leaves tracebacks out."""
    return "".join(render_parts(outputs, saved, errors=errors))


def render_parts(outputs: list[dict[str, Any]], saved: Saved, *, errors: bool = True) -> list[str]:
    """The text of each output ("" for one that shows none): joined, ``render_outputs``.

    Each starts on a line of its own, but for a stream's text that goes on in
    the next output (the streams cut in two around the marker of their cut).
    """
    parts: list[str] = []
    for index, output in enumerate(outputs):
        kind = output.get("output_type")
        if kind == "error" and not errors:
            piece = ""
        elif kind == "stream":
            piece = collapse_carriage_returns(strip_ansi(_as_text(output.get("text", ""))))
        elif kind == "error":
            piece = strip_ansi("\n".join(_as_text(t) for t in output.get("traceback", [])))
            if not piece.strip():
                piece = f"{output.get('ename', 'Error')}: {output.get('evalue', '')}"
        else:
            piece = _render_bundle(output, saved.get(index, []))
        if piece and not piece.endswith("\n") and not _goes_on(outputs, index):
            piece += "\n"
        parts.append(piece)
    return parts


def cap_text(
    text: str,
    max_chars: int,
    full_output: str | None,
    *,
    marked: tuple[int, int, int] | None = None,
) -> str:
    """Keeps the head and tail of ``text`` around a marker saying what was cut.

    ``marked`` is a cut already in ``text`` (the streams' own, made before
    ``text`` was rendered): ``(start, end, chars)``, ``text[start:end]``
    being its marker, which stands for ``chars`` characters. This cut takes
    it in, so the text shows one gap whose marker counts exactly the
    characters missing there, never two markers with two numbers.
    """
    if len(text) <= max_chars:
        return text
    keep = max_chars // 2
    head_end, tail_start, cut = keep, len(text) - keep, 0
    if marked is not None:
        start, end, chars = marked
        head_end, tail_start = min(head_end, start), max(tail_start, end)
        cut = chars - (end - start)  # the marker's own characters were never output
    cut += tail_start - head_end
    where = f"; the full output is in {full_output}" if full_output else ""
    return f"{text[:head_end]}\n[... {cut:,} characters cut{where} ...]\n{text[tail_start:]}"


def collapse_carriage_returns(text: str) -> str:
    """Shows each line as a terminal would leave it after ``\\r`` redraws."""
    if "\r" not in text:
        return text
    lines = text.replace("\r\n", "\n").split("\n")
    return "\n".join(_last_drawn(line) for line in lines)


def _last_drawn(line: str) -> str:
    segments = [s for s in line.split("\r") if s]
    return segments[-1] if segments else ""


def _goes_on(outputs: list[dict[str, Any]], index: int) -> bool:
    """The output after ``index`` carries on its stream."""
    this, after = outputs[index], outputs[index + 1] if index + 1 < len(outputs) else None
    return (
        after is not None
        and this.get("output_type") == after.get("output_type") == "stream"
        and this.get("name") == after.get("name")
    )


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
