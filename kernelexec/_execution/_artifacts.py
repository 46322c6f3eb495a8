"""Rich outputs written to the work dir as files an agent or a person can open."""

from __future__ import annotations

import base64
import binascii
from pathlib import Path
from typing import Any

from .. import _workdir

__all__ = ["OUTPUT_DIR", "SAVED_MIMETYPES", "Saved", "save_rich_outputs"]

OUTPUT_DIR = "outputs"

# Preference order within one bundle doesn't matter: each present type is kept.
SAVED_MIMETYPES: dict[str, str] = {
    "image/png": "png",
    "image/jpeg": "jpg",
    "image/gif": "gif",
    "image/svg+xml": "svg",
    "application/pdf": "pdf",
    "text/html": "html",
}
_BASE64 = {"image/png", "image/jpeg", "image/gif", "application/pdf"}

Saved = dict[int, list[tuple[str, str]]]
"""Output index -> [(mimetype, path relative to the work dir)]."""


def save_rich_outputs(
    outputs: list[dict[str, Any]], work_dir: Path, stem: str
) -> tuple[Saved, list[str]]:
    """Writes each saved mimetype of each output to ``outputs/{stem}-{k}.{ext}``.

    ``k`` counts the outputs that saved something, from 1. A payload that cannot
    be decoded, or a file that cannot be written, is skipped and reported in
    the returned problems, so a malformed bundle never costs the rest of the
    result. Files are written through ``_workdir``, so no link the kernel
    planted is followed; what it put in a file's way is moved aside, and the
    problems say so.
    """
    saved: Saved = {}
    problems: list[str] = []
    k = 0
    for index, output in enumerate(outputs):
        data = output.get("data")
        if not isinstance(data, dict):
            continue
        present = [m for m in SAVED_MIMETYPES if m in data]
        if not present:
            continue
        k += 1
        for mimetype in present:
            relative = f"{OUTPUT_DIR}/{stem}-{k}.{SAVED_MIMETYPES[mimetype]}"
            try:
                payload = _payload(mimetype, data[mimetype])
            except (TypeError, ValueError, binascii.Error) as exc:
                problems.append(f"{mimetype} output {k} was not saved: {exc}")
                continue
            try:
                note = _workdir.write(work_dir, relative, payload)
            except OSError as exc:
                problems.append(f"{mimetype} output {k} was not saved to {relative}: {exc}")
                continue
            problems.extend([note] if note else [])
            saved.setdefault(index, []).append((mimetype, relative))
    return saved, problems


def _payload(mimetype: str, value: object) -> bytes:
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        value = "".join(value)  # nbformat's multiline strings
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {type(value).__name__}")
    if mimetype in _BASE64:
        return base64.b64decode(value, validate=True)
    return value.encode("utf-8", "surrogatepass")
