"""The session's notebook on disk: one code cell per execution.

Every execution lands in the file right after it finishes, but never on the
execution's own path: a background task writes the file in a worker thread,
atomically (a temp file, then a rename), so a reader or a crash never sees a
torn notebook. Bursts of executions coalesce into one write.

A write costs the new cells, not the notebook, in time and in memory: the new
file's bytes up to the last cell are copied from the old file inside the OS
(``copy_file_range``), then the new cells and the closing lines are appended.
When the file is not the one last written (someone else saved it, or there is
no such call here), it is read back and written whole, its edits kept.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Transcript", "code_cell", "note_cell"]

log = logging.getLogger("kernelexec")

NBFORMAT, NBFORMAT_MINOR = 4, 5
_METADATA: dict[str, Any] = {
    "kernelspec": {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"},
    "language_info": {"name": "python"},
}


@dataclass(frozen=True)
class _Written:
    """The file as this process last wrote it, so the next write can extend it."""

    cells: int  # how many cells it holds
    prefix: int  # bytes before the closing lines (after the last cell)
    identity: tuple[int, int, int]  # inode, size, mtime: unchanged since


class Transcript:
    """A notebook file that grows by appending cells.

    Only cells not yet in the file are held in memory, so a long session's
    transcript (images and all) costs this process nothing. An existing
    notebook at ``path`` is continued, and so is one someone edits meanwhile
    (JupyterLab saving a note, say): the file is read back then, not
    overwritten. One that cannot be read is moved aside (``.broken-<time>``).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._unwritten: list[dict[str, Any]] = []
        self._metadata: dict[str, Any] = dict(_METADATA)
        self._code_cells = 0
        self._writer: asyncio.Task[None] | None = None
        self._written: _Written | None = None
        self.write_error: str | None = None
        if path.exists():
            cells = self._read_cells()
            self._code_cells = sum(1 for c in cells if c.get("cell_type") == "code")

    @property
    def code_cells(self) -> int:
        """How many code cells the notebook holds, earlier sessions' included."""
        return self._code_cells

    def add(self, cell: dict[str, Any]) -> None:
        """Appends a cell and schedules the file's write."""
        self._unwritten.append(cell)
        self._code_cells += cell.get("cell_type") == "code"
        if self._writer is None or self._writer.done():
            self._writer = asyncio.get_running_loop().create_task(self._write_while_new())

    async def flush(self) -> None:
        """Returns once the file holds every cell added so far (or writing failed)."""
        while self._writer is not None and not self._writer.done():
            await asyncio.shield(self._writer)

    async def _write_while_new(self) -> None:
        while self._unwritten:
            batch, self._unwritten = self._unwritten, []
            try:
                await asyncio.to_thread(self._write, batch)
            except OSError as exc:
                self._unwritten[:0] = batch  # kept for the next add() to retry
                self.write_error = f"could not write {self.path}: {exc}"
                log.warning("kernelexec: %s", self.write_error)
                return
            self.write_error = None

    def _write(self, batch: list[dict[str, Any]]) -> None:
        pieces = [_dump(c) for c in batch]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        written = self._written
        if written is not None and self._unchanged(written):
            new = ((",\n" if written.cells else "") + ",\n".join(pieces)).encode()
            if _extend(self.path, temp, written.prefix, new + self._tail()):
                self._replace(temp, written.cells + len(pieces), written.prefix + len(new))
                return
        # The first write, or the file is not as this process left it.
        pieces = [_dump(c) for c in self._read_cells()] + pieces
        body = ('{\n "cells": [\n' + ",\n".join(pieces)).encode()
        temp.write_bytes(body + self._tail())
        self._replace(temp, len(pieces), len(body))

    def _replace(self, temp: Path, cells: int, prefix: int) -> None:
        os.replace(temp, self.path)
        stat = self.path.stat()
        self._written = _Written(cells, prefix, (stat.st_ino, stat.st_size, stat.st_mtime_ns))

    def _unchanged(self, written: _Written) -> bool:
        try:
            stat = self.path.stat()
        except OSError:
            return False
        return (stat.st_ino, stat.st_size, stat.st_mtime_ns) == written.identity

    def _tail(self) -> bytes:
        return (
            f'\n ],\n "metadata": {json.dumps(self._metadata, sort_keys=True)},\n'
            f' "nbformat": {NBFORMAT},\n "nbformat_minor": {NBFORMAT_MINOR}\n}}\n'
        ).encode()

    def _read_cells(self) -> list[dict[str, Any]]:
        """The cells of the notebook on disk (none if there is none); its metadata is kept."""
        try:
            notebook = json.loads(self.path.read_text(encoding="utf-8"))
            cells = notebook["cells"]
            if not isinstance(cells, list) or not all(isinstance(c, dict) for c in cells):
                raise TypeError("cells is not a list of cells")
        except FileNotFoundError:
            return []
        except (OSError, ValueError, KeyError, TypeError) as exc:
            aside = self.path.with_name(f"{self.path.name}.broken-{int(time.time())}")
            log.warning("kernelexec: %s is not a notebook (%s); moved to %s", self.path, exc, aside)
            self.path.rename(aside)
            return []
        self._metadata = {**_METADATA, **(notebook.get("metadata") or {})}
        return cells


def code_cell(
    source: str,
    outputs: list[dict[str, Any]],
    *,
    execution_count: int | None,
    started: float,
    finished: float,
    kernelexec: dict[str, Any],
    failed: bool,
) -> dict[str, Any]:
    """A code cell for one execution, with nbclient-style timing metadata.

    Failed cells carry the ``raises-exception`` tag, so nbclient replays the
    notebook past them as it would any notebook that documents an error.
    """
    metadata: dict[str, Any] = {
        "execution": {"iopub.execute_input": _iso(started), "shell.execute_reply": _iso(finished)},
        "kernelexec": kernelexec,
    }
    if failed:
        metadata["tags"] = ["raises-exception"]
    return {
        "cell_type": "code",
        "execution_count": execution_count,
        "id": uuid.uuid4().hex[:12],
        "metadata": metadata,
        "outputs": outputs,
        "source": source,
    }


def note_cell(
    text: str, *, kind: str = "markdown", kernelexec: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A markdown (or raw) cell recording what happened outside any code."""
    return {
        "cell_type": kind,
        "id": uuid.uuid4().hex[:12],
        "metadata": {"kernelexec": kernelexec or {}},
        "source": text,
    }


def _extend(source: Path, target: Path, keep: int, more: bytes) -> bool:
    """Writes ``source``'s first ``keep`` bytes, then ``more``, to ``target``.

    The copy happens inside the OS, so it costs no Python time however large
    the notebook. False when it cannot be done this way: no copy_file_range,
    a file system that cannot copy ranges, a file shorter than ``keep``.
    """
    copy = getattr(os, "copy_file_range", None)
    if copy is None:
        return False
    try:
        with source.open("rb", buffering=0) as src, target.open("wb", buffering=0) as dst:
            copied = 0
            while copied < keep:
                step = copy(src.fileno(), dst.fileno(), keep - copied)
                if step <= 0:
                    return False  # the file is shorter than this process wrote it
                copied += step
            rest = memoryview(more)
            while rest:
                rest = rest[os.write(dst.fileno(), rest) :]
    except OSError:
        return False
    return True


def _dump(cell: dict[str, Any]) -> str:
    return json.dumps(cell, indent=1, sort_keys=True, ensure_ascii=False)


def _iso(timestamp: float) -> str:
    seconds = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(timestamp))
    return f"{seconds}.{int(timestamp % 1 * 1_000_000):06d}Z"
