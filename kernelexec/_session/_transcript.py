"""The session's notebook on disk: one code cell per execution.

Every execution lands in the file right after it finishes: a task writes the
file, and the session hands out a result only once ``flush()`` says its cell
is written. Cells added while a write is under way coalesce into the next
one. A small append is written on the event loop's thread, anything else
(a first write, a notebook someone else changed, a large one) in a worker
thread (``Transcript._append_here``).

A reader or a crash never sees a torn notebook: each version is written whole
under another name, then swapped with the file in one step
(``renameat2(RENAME_EXCHANGE)``, ``_workdir.exchange``). The file it displaces
stays beside it, hidden (``.transcript.ipynb.previous``), and is the next
version's start: it already holds all but the last write's cells, so a write
copies the last write's bytes into it (inside the OS, ``copy_file_range``),
then writes the new cells and the closing lines. A write costs the new cells,
in this process and in the OS, however large the notebook: no copy of the
whole file, no new file, and no rename over a file, which on ext4 starts the
writeback of all of it first. A file swapped out is written into only when
nobody has it open, so someone who opened it before reads it whole: the OS
says so, and keeps it so while it is written (a lease, ``_workdir.alone``);
where it cannot tell, only after a grace (``_READ_GRACE``, ``_READ_RATE``).
Where files cannot be swapped, where someone has it open or the grace has not
passed, or where either file is not as this process left it, a version is made
under a temp name (the prefix copied from the notebook, or the notebook read
back and written whole, edits kept) and renamed or swapped into place.

The swap skips the writeback a rename over a file starts on ext4, which
makes a notebook replaced by rename survive a power loss; ``settle()`` (at
the session's close) syncs the file and its folder instead.

The file lives in the kernel's work dir, where the kernel can plant links, so
it is handled through ``_workdir``: read without following a link, the temp
file made with O_EXCL under a random name, renamed relative to the folder's
handle, and neither file written unless it is the one this process left
there. A link found at the transcript's name is not a notebook: it is moved
aside like any broken file, and the next write puts the real one in its place.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import logging
import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from stat import S_ISREG
from typing import Any

from .. import _telemetry, _workdir
from .._execution._models import Usage

__all__ = [
    "MAX_TRANSCRIPT_BYTES",
    "Transcript",
    "code_cell",
    "note_cell",
    "session_note",
]

# A transcript read back (to be continued, or copied into a fork) is at most
# this big; a bigger file in its place was not written by a session's cells
# (their outputs are capped) and is moved aside rather than read into memory.
MAX_TRANSCRIPT_BYTES = 1 << 30

log = logging.getLogger("kernelexec")

# A file swapped out of the notebook's place may still be being read by
# someone who opened it before. Where the OS cannot say whether anyone has it
# open (``_workdir.alone``), it is written into again only this long after, in
# seconds, plus its size at this many bytes a second (a page-cache read goes at
# gigabytes a second; this allows for a slow, busy reader).
_READ_GRACE = 0.01
_READ_RATE = 50e6

# A write that copies and writes at most this many bytes is done on the event
# loop's thread, not handed to a worker thread (``Transcript._append_here``).
INLINE_BYTES = 1 << 20

NBFORMAT, NBFORMAT_MINOR = 4, 5
_METADATA: dict[str, Any] = {
    "kernelspec": {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"},
    "language_info": {"name": "python"},
}


@dataclass(frozen=True)
class _Written:
    """A file as this process last wrote it, so the next write can extend it."""

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

    A continued notebook gets a markdown note before this session's first
    cell, "session N started <time> with a new kernel", so a reader sees why
    the execution counts start again at 1.

    Args:
        path: the notebook file.
        work_dir: the kernel's work dir; a ``path`` inside it is reached from
            it with no link followed. None: from the notebook's own folder.
    """

    def __init__(self, path: Path, *, work_dir: Path | None = None) -> None:
        self.path = path
        self._root, parts = _workdir.locate(path, work_dir or path.parent)
        self._folder, self._name = parts[:-1], parts[-1]
        self._previous_name = _workdir.previous_of(self._name)
        self._shown = "/".join(parts)
        self._unwritten: list[dict[str, Any]] = []
        self._metadata: dict[str, Any] = dict(_METADATA)
        self._code_cells = 0
        self._writer: asyncio.Task[None] | None = None
        self._written: _Written | None = None
        self._previous: _Written | None = None  # the file at _workdir.previous_of(name), when ours
        self._reusable_at = 0.0  # time.monotonic() from which that file may be written into
        self.write_error: str | None = None
        self._opened = time.time()
        self._earlier_sessions = 0  # none: a new notebook needs no note
        try:
            folder = _workdir.open_folder(self._root, self._folder)
        except OSError:
            return  # no folder yet, so no notebook to continue
        try:
            cells = self._read_cells(folder)
        finally:
            os.close(folder)
        self._code_cells = sum(1 for c in cells if c.get("cell_type") == "code")
        self._earlier_sessions = _sessions_in(cells)

    def note(self, name: str, value: Any) -> None:
        """Records ``value`` as ``name`` in the notebook's ``kernelexec`` metadata (next write)."""
        ours = dict(self._metadata.get("kernelexec") or {})
        ours[name] = value
        self._metadata["kernelexec"] = ours

    @property
    def code_cells(self) -> int:
        """How many code cells the notebook holds, earlier sessions' included."""
        return self._code_cells

    def add(self, cell: dict[str, Any]) -> None:
        """Appends a cell and schedules the file's write."""
        if self._earlier_sessions:
            # Added with the first cell, not at open: a session that never
            # runs anything leaves the notebook as it was.
            self._unwritten.append(session_note(self._earlier_sessions + 1, self._opened))
            self._earlier_sessions = 0
        self._unwritten.append(cell)
        self._code_cells += cell.get("cell_type") == "code"
        if self._writer is None or self._writer.done():
            self._writer = asyncio.get_running_loop().create_task(self._write_while_new())

    async def flush(self) -> None:
        """Returns once the file holds every cell added so far (or writing failed)."""
        while self._writer is not None and not self._writer.done():
            await asyncio.shield(self._writer)

    async def settle(self) -> None:
        """Flushes, then syncs the file and its folder to the disk (at a session's close)."""
        await self.flush()
        if self._written is not None:
            await asyncio.to_thread(self._sync)

    def _sync(self) -> None:
        try:
            folder = _workdir.open_folder(self._root, self._folder)
        except OSError:
            return  # removed already: nothing to keep
        try:
            with _workdir.open_in(folder, self._name, self._shown) as file:
                os.fdatasync(file.fileno())
            os.fsync(folder)
        except OSError as exc:
            log.warning("kernelexec: could not sync %s: %s", self.path, exc)
        finally:
            os.close(folder)

    async def _write_while_new(self) -> None:
        while self._unwritten:
            batch, self._unwritten = self._unwritten, []
            try:
                with _telemetry.transcript_write(len(batch)):
                    pieces = [_dump(c) for c in batch]
                    if not self._append_here(pieces):
                        await asyncio.to_thread(self._write, pieces)
            except OSError as exc:
                self._unwritten[:0] = batch  # kept for the next add() to retry
                self.write_error = f"could not write {self.path}: {exc}"
                log.warning("kernelexec: %s", self.write_error)
                return
            self.write_error = None

    def _append_here(self, pieces: list[str]) -> bool:
        """Appends the cells on the event loop's own thread, when that is cheap; else False.

        Handing a write to a thread costs more than the write itself when it
        is small: the two threads pass the GIL back and forth at each of the
        write's dozen system calls and at each of the loop's own, some 130
        futex calls an execution with 16 sessions running, and each waits for
        the other to be scheduled on a busy machine. So a write that copies
        and writes at most ``INLINE_BYTES`` (the file's bytes up to the last
        cell, and the new cells) is done here. Anything else, the first write
        of all (it may read a notebook back) and a file not as this process
        left it (the kernel can write it), goes to the thread.
        """
        written = self._written
        if written is None or written.prefix + sum(map(len, pieces)) > INLINE_BYTES:
            return False
        with self._opened_folder() as folder:
            return self._append(folder, written, pieces)

    def _write(self, pieces: list[str]) -> None:
        with self._opened_folder() as folder:
            written = self._written
            if written is not None and self._append(folder, written, pieces):
                return
            # The first write, or the file is not as this process left it.
            pieces = [_dump(c) for c in self._read_cells(folder)] + pieces
            body = ('{\n "cells": [\n' + ",\n".join(pieces)).encode()
            temp, fd = _workdir.temp_file(folder)
            try:
                _workdir.write_all(fd, body + self._tail())
            except BaseException:
                os.close(fd)
                os.unlink(temp, dir_fd=folder)
                raise
            self._install(folder, temp, fd, len(pieces), len(body))

    @contextlib.contextmanager
    def _opened_folder(self) -> Iterator[int]:
        """A handle on the notebook's folder, made if need be (anything in the way moved aside)."""
        folder, moved = self._own_folder()
        for note in moved:
            log.warning("kernelexec: %s", note)
        try:
            yield folder
        finally:
            os.close(folder)

    def _append(self, folder: int, written: _Written, pieces: list[str]) -> bool:
        """Appends to the file as this process left it; False, untouched, if it is not.

        Costs the new cells and, at most, the file's bytes up to them, copied
        inside the OS: into the previous version (``_advance``), or, within
        its grace, into a new file.
        """
        new = ((",\n" if written.cells else "") + ",\n".join(pieces)).encode()
        if self._advance(folder, written, new, len(pieces)):
            return True
        temp, fd = _workdir.temp_file(folder)
        if _extend(folder, self._name, written.identity, written.prefix, fd, new + self._tail()):
            self._install(folder, temp, fd, written.cells + len(pieces), written.prefix + len(new))
            return True
        os.close(fd)
        os.unlink(temp, dir_fd=folder)
        return False

    def _advance(self, folder: int, written: _Written, new: bytes, cells: int) -> bool:
        """Writes the next version into the previous one's file and swaps the two.

        The previous version holds the current one's bytes up to its own
        prefix; the current one's bytes after that (the last write's cells)
        are copied over, then ``new`` and the closing lines written after
        them. False, with the notebook untouched, when either file is not as
        this process left it, someone has the previous version open (or,
        where the OS cannot tell, its grace has not passed), or the files
        cannot be swapped.
        """
        previous = self._previous
        if previous is None:
            return False
        self._previous = None  # written into from here: no longer the previous version
        end = written.prefix + len(new)
        tail = self._tail()
        try:
            with (
                _workdir.open_in(folder, self._name) as current,
                _open_ours(folder, self._previous_name, previous.identity) as target,
                _workdir.alone(target) as alone,
            ):
                # Nobody has it open (and nobody can open it until it is
                # written), or, where the OS cannot tell, the grace has passed.
                if not alone and (alone is False or time.monotonic() < self._reusable_at):
                    return False
                if _identity(os.fstat(current.fileno())) != written.identity:
                    return False
                copied = _workdir.copy_range(
                    current.fileno(), target, previous.prefix, written.prefix
                )
                if copied != written.prefix - previous.prefix:
                    return False  # the notebook is shorter than this process wrote it
                _workdir.write_all(target, new + tail, offset=written.prefix)
                os.ftruncate(target, end + len(tail))
                identity = _identity(os.fstat(target))
        except OSError:
            return False
        if not _workdir.exchange(folder, self._previous_name, self._name):
            return False
        self._displaced(written)
        self._written = _Written(written.cells + cells, end, identity)
        return True

    def _own_folder(self) -> tuple[int, list[str]]:
        parts = [*self._folder, self._name]
        try:
            return _workdir.own_folder(self._root, parts)
        except _workdir.Refused as exc:
            if self._folder or exc.reason != "missing":
                raise
        # A folder the caller chose, made when missing: asked only then, as
        # this runs once per execution.
        self._root.mkdir(parents=True, exist_ok=True)
        return _workdir.own_folder(self._root, parts)

    def _install(self, folder: int, temp: str, fd: int, cells: int, prefix: int) -> None:
        """Puts the written temp file in place; its stat is the file's from then on.

        Swapped with the file there when it can be: the file displaced, when
        this process wrote it, is kept as the previous version for the next
        write (``_advance``); a file someone else wrote is kept there too, as
        a copy of what was replaced, but never written into.
        """
        try:
            identity = _identity(os.fstat(fd))
        finally:
            os.close(fd)
        displaced = self._written
        self._previous = None
        try:
            swapped = _workdir.exchange(folder, temp, self._name)
        except OSError:
            swapped = False
        if swapped:
            # Unlinked first, so that the rename replaces no file: on ext4 that
            # would start the displaced file's writeback, in proportion to its size.
            with contextlib.suppress(OSError):
                os.unlink(self._previous_name, dir_fd=folder)  # a file, or a planted link
            note = _workdir.put_in_place(folder, temp, self._previous_name, self._previous_name)
            if displaced is not None and _identity_in(folder, self._previous_name) == (
                displaced.identity
            ):
                self._displaced(displaced)
        else:
            note = _workdir.put_in_place(folder, temp, self._name, self._shown)
        if note:
            log.warning("kernelexec: %s", note)
        self._written = _Written(cells, prefix, identity)

    def _displaced(self, written: _Written) -> None:
        """Keeps the file just swapped out as the previous version, to be written into later.

        Not while someone has it open: a reader that opened it while it was
        the notebook reads it whole only while nobody writes into it. Where
        the OS cannot say who has it open, it is left alone for the time a
        slow reader takes to read it (``_READ_GRACE``, plus its size at
        ``_READ_RATE``); a write before that makes a new file instead.
        """
        self._previous = written
        self._reusable_at = time.monotonic() + _READ_GRACE + written.identity[1] / _READ_RATE

    def _tail(self) -> bytes:
        return (
            f'\n ],\n "metadata": {json.dumps(self._metadata, sort_keys=True)},\n'
            f' "nbformat": {NBFORMAT},\n "nbformat_minor": {NBFORMAT_MINOR}\n}}\n'
        ).encode()

    def cells_on_disk(self) -> list[dict[str, Any]]:
        """The cells the file holds now (none if it cannot be read); nothing is moved or kept."""
        try:
            folder = _workdir.open_folder(self._root, self._folder)
        except OSError:
            return []
        try:
            return self._load(folder)[0]
        except (OSError, ValueError, KeyError, TypeError):
            return []
        finally:
            os.close(folder)

    def _read_cells(self, folder: int) -> list[dict[str, Any]]:
        """The cells of the notebook on disk (none if there is none); its metadata is kept.

        A file that is not a notebook (a link included: it is never followed),
        or one too big to be this session's, is moved aside.
        """
        try:
            cells, metadata = self._load(folder)
        except _workdir.Refused as exc:
            if exc.reason == "missing":
                return []
            self._move_aside(folder, exc)
            return []
        except (OSError, ValueError, KeyError, TypeError) as exc:
            self._move_aside(folder, exc)
            return []
        self._metadata = {**_METADATA, **metadata}
        return cells

    def _load(self, folder: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        # The kernel's code can write this file: it is read to a bound, never through a link.
        with _workdir.open_in(folder, self._name, self._shown) as file:
            if os.fstat(file.fileno()).st_size > MAX_TRANSCRIPT_BYTES:
                raise ValueError(f"over {MAX_TRANSCRIPT_BYTES:,} bytes")
            data = file.read(MAX_TRANSCRIPT_BYTES + 1)  # and if it grows meanwhile
        if len(data) > MAX_TRANSCRIPT_BYTES:
            raise ValueError(f"over {MAX_TRANSCRIPT_BYTES:,} bytes")
        notebook = json.loads(data.decode("utf-8"))
        cells = notebook["cells"]
        if not isinstance(cells, list) or not all(isinstance(c, dict) for c in cells):
            raise TypeError("cells is not a list of cells")
        return cells, notebook.get("metadata") or {}

    def _move_aside(self, folder: int, why: Exception) -> None:
        aside = f"{self._name}.broken-{int(time.time())}"
        log.warning("kernelexec: %s is not a notebook (%s); moved to %s", self.path, why, aside)
        # A rename never follows a link: a planted one is moved, not what it names.
        os.rename(self._name, aside, src_dir_fd=folder, dst_dir_fd=folder)


def code_cell(
    source: str,
    outputs: list[dict[str, Any]],
    *,
    execution_count: int | None,
    started: float,
    finished: float,
    kernelexec: dict[str, Any],
    failed: bool,
    usage: Usage | None = None,
) -> dict[str, Any]:
    """A code cell for one execution, with nbclient-style timing metadata.

    Failed cells carry the ``raises-exception`` tag, so nbclient replays the
    notebook past them as it would any notebook that documents an error. The
    execution's ``usage`` goes into the ``kernelexec`` metadata as
    ``ExecutionResult.to_dict()`` has it (null when the kernel did not measure it).
    """
    metadata: dict[str, Any] = {
        "execution": {"iopub.execute_input": _iso(started), "shell.execute_reply": _iso(finished)},
        "kernelexec": {**kernelexec, "usage": asdict(usage) if usage is not None else None},
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


def session_note(number: int, started: float) -> dict[str, Any]:
    """The note between two sessions' cells in one notebook."""
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(started))
    return note_cell(
        f"*kernelexec: session {number} started {when} with a new kernel: execution "
        "counts start again at 1, and earlier sessions' variables are gone.*",
        kernelexec={"session": number, "started": _iso(started)},
    )


def _sessions_in(cells: list[dict[str, Any]]) -> int:
    """How many sessions wrote ``cells``: the highest session note's number, else 1 (0 if none)."""
    if not cells:
        return 0
    numbers = [1]
    for cell in cells:
        metadata = cell.get("metadata")
        ours = metadata.get("kernelexec") if isinstance(metadata, dict) else None
        number = ours.get("session") if isinstance(ours, dict) else None
        # The file is in the kernel's work dir: anything may be written there.
        if type(number) is int and 0 < number < 1_000_000:
            numbers.append(number)
    return max(numbers)


def _extend(
    folder: int, name: str, identity: tuple[int, int, int], keep: int, target: int, more: bytes
) -> bool:
    """Writes the first ``keep`` bytes of the file ``name``, then ``more``, to ``target``.

    Only when ``name`` is still the file this process wrote (``identity``),
    checked on the open file itself, so the copy is of that very file; inside
    the OS where it can be (``_workdir.copy_range``). False when it cannot be
    done this way: another file (or a link) at the name, or one shorter than
    this process wrote it.
    """
    try:
        with _workdir.open_in(folder, name) as source:
            if _identity(os.fstat(source.fileno())) != identity:
                return False
            if _workdir.copy_range(source.fileno(), target, 0, keep) != keep:
                return False  # the file is shorter than this process wrote it
        _workdir.write_all(target, more, offset=keep)
    except OSError:
        return False
    return True


def _identity(stat: os.stat_result) -> tuple[int, int, int]:
    return (stat.st_ino, stat.st_size, stat.st_mtime_ns)


def _identity_in(folder: int, name: str) -> tuple[int, int, int] | None:
    """The identity of the regular file at ``name`` (a link is not followed), else None."""
    try:
        stat = os.stat(name, dir_fd=folder, follow_symlinks=False)
    except OSError:
        return None
    return _identity(stat) if S_ISREG(stat.st_mode) else None


@contextlib.contextmanager
def _open_ours(folder: int, name: str, identity: tuple[int, int, int]) -> Iterator[int]:
    """``name`` opened for writing, when it is the file of that ``identity`` (else OSError)."""
    # Non-blocking: opening a pipe the kernel put there would wait for a reader forever.
    flags = os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    fd = os.open(name, flags, dir_fd=folder)
    try:
        if _identity(os.fstat(fd)) != identity:
            raise FileExistsError(errno.ESTALE, "not the file kernelexec left there", name)
        os.set_blocking(fd, True)
        yield fd
    finally:
        os.close(fd)


def _dump(cell: dict[str, Any]) -> str:
    return json.dumps(cell, indent=1, sort_keys=True, ensure_ascii=False)


def _iso(timestamp: float) -> str:
    seconds = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(timestamp))
    return f"{seconds}.{int(timestamp % 1 * 1_000_000):06d}Z"
