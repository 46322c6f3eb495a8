"""A fork's report, and its copy of the parent's work dir.

A local kernel is forked as a process (copy-on-write: every variable, import,
class and figure, with nothing re-run), unless something in it would not
survive ``fork()``: a GPU driver in use, or a live GNU OpenMP pool, which
would leave the copy broken or hung on its first parallel operation. Such a
kernel, and one that cannot be forked here (a gateway's, a container's), is
checkpointed and restored into a new kernel of the same kind instead, and the
report says why. Either way the new session gets its own work dir holding a
copy of the parent's files (``copy_files``), and a transcript that begins with
a note naming the parent, then the parent's cells. ``AsyncSession.fork``
(``_session/_state.py``) takes those steps.
"""

from __future__ import annotations

import contextlib
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from .. import _workdir
from .._exceptions import DiskSpaceError
from . import _disk

__all__ = ["FORK_METHODS", "ForkMethod", "ForkReport", "copy_files"]

ForkMethod = Literal["auto", "process", "checkpoint"]
FORK_METHODS: tuple[ForkMethod, ...] = ("auto", "process", "checkpoint")
_CHECKPOINTS = "checkpoints"  # the parent's checkpoints stay the parent's


@dataclass(frozen=True)
class ForkReport:
    """How a session was forked, as ``session.fork_report``.

    Attributes:
        parent_work_dir: the parent session's work dir.
        parent_transcript: the parent's transcript file.
        parent_cells: how many code cells the parent had run when forked.
        method: ``"process"`` (the kernel process was forked) or
            ``"checkpoint"`` (checkpointed and restored).
        files: how many of the parent's files were copied.
        left_behind: what did not come across, as text: variables a
            checkpoint could not carry (``"name (type): why"``), or what a
            forked process leaves behind (threads, the parent's child
            processes, shared sockets, and with ``method="process"`` asked
            for, a GPU context or OpenMP pool that is broken in the copy).
        reason: why a checkpoint was made rather than a process fork
            (None for a process fork).
    """

    parent_work_dir: str
    parent_transcript: str
    parent_cells: int
    method: str
    files: int
    left_behind: tuple[str, ...] = ()
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["left_behind"] = list(self.left_behind)
        return data


def copy_files(
    work_dir: Path, notebook: Path | None, target: Path, max_bytes: int | None = None
) -> int:
    """Copies a work dir's files into ``target`` (never through a link) but the transcript
    (``notebook``, None where it is not there: a Ray node's) and checkpoints; how many.

    They are measured first, by apparent size, and refused whole when they
    would pass ``max_bytes`` or the room on the target's disk: nothing is
    copied then. Holes stay holes; a file that grew since it was measured is
    refused past what is left of the total.

    Raises:
        DiskSpaceError: the files would not fit (or the disk filled up: what
            was copied is removed).
    """
    listing = _workdir.list_tree(work_dir, max_files=100_000)
    ours = set() if notebook is None else {notebook.resolve()}
    ours |= {p.parent / _workdir.previous_of(p.name) for p in ours}
    wanted = [
        entry
        for entry in listing.files
        if entry.path.split("/", 1)[0] != _CHECKPOINTS
        and (work_dir / entry.path).resolve() not in ours
    ]
    left = sum(entry.size for entry in wanted)
    _disk.check(
        left,
        target,
        budget=max_bytes,
        what=f"the fork's copy of {_disk.files(len(wanted))}",
        setting="max_bytes",
    )
    copied: list[str] = []
    try:
        for entry in wanted:
            try:
                left -= _workdir.copy(work_dir, entry.path, target, max_bytes=left)
            except OSError as exc:
                if _disk.is_full(exc):
                    raise _disk.full(exc, "the fork's copy of the files") from None
                continue  # gone or changed under us: the fork has what could be read
            copied.append(entry.path)
    except DiskSpaceError:
        for path in copied:  # the fork's new work dir: no kernel runs there yet
            with contextlib.suppress(OSError):
                (target / path).unlink()
        raise
    return len(copied)
