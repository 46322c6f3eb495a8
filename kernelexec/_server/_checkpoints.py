"""The server's checkpoint store: ``<work-root>/.checkpoints/<id>/``, one checkpoint each.

Checkpoints are kept beside the sessions' work dirs, never inside one: a
session's kernel writes in its work dir, so a checkpoint there could be
changed by the code it is meant to preserve, and copied into the next
checkpoint of the same session. A container's kernel (``docker``) sees only
its own work dir, so it cannot reach the store at all. A local kernel runs as
the server's user and can reach any folder the server can, so there is no
such place for it; the store is therefore made and opened with no link
followed (a link planted at ``.checkpoints`` or at a checkpoint's name is
moved aside, never written through), and a checkpoint is checked, after it
is made, to be where the store says.

An id is 128 random bits in hex, made by the server; anything else (``..``,
``%2e%2e``, a path) is refused as unknown before it reaches the file system.

The store is also a budget (``usage``): each checkpoint is counted at the
bytes it holds (its manifest's ``bytes``, or its files' apparent sizes), by
the session it was made from, so a new one is refused before it is written
when it would pass the operator's per-session or store-wide limit. What is
older than the age policy goes (``expired``), and a checkpoint a crash left
half made (no manifest) is removed when the server starts (``sweep``).
"""

from __future__ import annotations

import calendar
import contextlib
import logging
import os
import re
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._exceptions import CheckpointError
from .._remote_models import CheckpointInfo
from .._state import _disk
from .._state._manifest import Checkpoint
from .._workdir import Refused, list_tree, open_folder, own_folder, remove_tree

__all__ = ["FOLDER", "CheckpointStore", "Held", "UnknownCheckpoint"]

log = logging.getLogger("kernelexec.server")

FOLDER = ".checkpoints"
_ID = re.compile(r"[0-9a-f]{32}")
_STAMP = "%Y-%m-%dT%H:%M:%SZ"  # a manifest's "created", UTC


@dataclass(frozen=True)
class Held:
    """What one checkpoint of the store holds: bytes, made from which session, when."""

    size: int
    session: str | None
    created: float


class UnknownCheckpoint(Exception):
    """No checkpoint by that id in the store (or not an id at all)."""


class CheckpointStore:
    """The checkpoints under one work root.

    Attributes:
        work_root: the server's work root (resolved).
        root: ``<work_root>/.checkpoints``.
    """

    def __init__(self, work_root: Path) -> None:
        self.work_root = work_root.expanduser().resolve()
        self.root = self.work_root / FOLDER
        self.suspends: dict[str, str] = {}  # checkpoint id -> the suspended session's id
        self.making: set[str] = set()  # ids being made: not listed, not deletable
        self.held: dict[str, Held] = {}  # what each one holds (see ``sweep``)

    def new(self) -> tuple[str, Path]:
        """A new, empty checkpoint folder: its id and path.

        Raises:
            DiskSpaceError: the disk is full.
            CheckpointError: the store cannot be written.
        """
        checkpoint_id = secrets.token_hex(16)
        try:
            # Made folder by folder with no link followed; a link in the way is moved aside.
            fd, _ = own_folder(self.work_root, [FOLDER, checkpoint_id, "-"])
        except OSError as exc:
            if _disk.is_full(exc):
                raise _disk.full(exc, "making a checkpoint folder") from None
            raise CheckpointError(f"cannot make a checkpoint in {self.root}: {exc}") from exc
        os.close(fd)
        with contextlib.suppress(OSError):
            os.chmod(self.root, 0o700)
        self.making.add(checkpoint_id)
        return checkpoint_id, self.root / checkpoint_id

    def done(self, checkpoint_id: str) -> None:
        """The checkpoint is made (or abandoned): listed and deletable from now on."""
        self.making.discard(checkpoint_id)

    def path(self, checkpoint_id: str) -> Path:
        """The folder of an existing checkpoint, reached with no link followed.

        Raises:
            UnknownCheckpoint: not an id, or no such folder (or a link in its place).
        """
        if not isinstance(checkpoint_id, str) or not _ID.fullmatch(checkpoint_id):
            raise UnknownCheckpoint(checkpoint_id)
        try:
            fd = open_folder(self.work_root, [FOLDER, checkpoint_id])
        except OSError:
            raise UnknownCheckpoint(checkpoint_id) from None
        os.close(fd)
        return self.root / checkpoint_id

    def open(self, checkpoint_id: str) -> Checkpoint:
        """The checkpoint, its manifest read and checked.

        Raises:
            UnknownCheckpoint: no such checkpoint.
            CheckpointError: it is damaged, or still being made.
        """
        path = self.path(checkpoint_id)
        if checkpoint_id in self.making:
            raise CheckpointError(f"checkpoint {checkpoint_id} is still being made")
        try:
            return Checkpoint.open(path)
        except CheckpointError as exc:
            # The message names the server's paths relative to the store.
            raise CheckpointError(str(exc).replace(str(self.root) + "/", "")) from None

    def ids(self) -> list[str]:
        """Every checkpoint id in the store but those being made, oldest first."""
        try:
            fd = open_folder(self.work_root, [FOLDER])
        except Refused:
            return []
        try:
            with os.scandir(fd) as found:
                entries = [
                    (e.stat(follow_symlinks=False).st_mtime, e.name)
                    for e in found
                    if _ID.fullmatch(e.name) and e.is_dir(follow_symlinks=False)
                ]
        finally:
            os.close(fd)
        return [name for _, name in sorted(entries) if name not in self.making]

    def remove(self, checkpoint_id: str) -> None:
        """Removes a checkpoint's folder, never following a link; absent is fine."""
        self.held.pop(checkpoint_id, None)
        try:
            path = self.path(checkpoint_id)
        except UnknownCheckpoint:
            return
        remove_tree(path)

    # -- the budget

    def count(self, checkpoint_id: str, checkpoint: Checkpoint) -> Held:
        """Counts a checkpoint (just made, or found at start) against the budget."""
        size = checkpoint.manifest.get("bytes")
        if type(size) is not int or size < 0:
            size = _apparent_size(checkpoint.path)  # made before manifests said it
        info = self.describe(checkpoint_id, checkpoint)
        try:
            created = float(calendar.timegm(time.strptime(checkpoint.created, _STAMP)))
        except (ValueError, OverflowError):
            created = time.time()
        held = self.held[checkpoint_id] = Held(size, info.session, created)
        return held

    def usage(self, session_id: str | None = None) -> int:
        """Bytes the store holds, or (given an id) those one session's checkpoints hold."""
        return sum(
            h.size for h in self.held.values() if session_id is None or h.session == session_id
        )

    def expired(self, max_age: float, now: float | None = None) -> list[str]:
        """The ids of checkpoints older than ``max_age`` seconds, oldest first."""
        cutoff = (time.time() if now is None else now) - max_age
        old = [(h.created, i) for i, h in self.held.items() if h.created < cutoff]
        return [i for _, i in sorted(old) if i not in self.making]

    def sweep(self) -> None:
        """At start: removes what a crash left half made, and counts the rest.

        A folder of the store without a manifest is a checkpoint that was
        being made when the server stopped: its id is one this store made,
        so it is removed. A damaged one is kept (and listed as unreadable).
        """
        for checkpoint_id in self.ids():
            try:
                fd = open_folder(self.work_root, [FOLDER, checkpoint_id])
            except OSError:
                continue
            try:
                complete = _has(fd, "manifest.json")
            finally:
                os.close(fd)
            if not complete:
                log.info("removed checkpoint %s, left half made by a crash", checkpoint_id)
                self.remove(checkpoint_id)
                continue
            with contextlib.suppress(UnknownCheckpoint, CheckpointError):
                self.count(checkpoint_id, self.open(checkpoint_id))

    def describe(self, checkpoint_id: str, checkpoint: Checkpoint) -> CheckpointInfo:
        """The checkpoint as the API describes it (no server paths)."""
        parent = Path(str(checkpoint.manifest.get("parent", {}).get("work_dir", "")))
        session = parent.name if parent.parent == self.work_root else None
        return CheckpointInfo(
            id=checkpoint_id,
            created=checkpoint.created,
            session=session if session and _ID.fullmatch(session) else None,
            suspend=checkpoint_id in self.suspends,
            python=checkpoint.python,
            variables=list(checkpoint.variables),
            modules=dict(checkpoint.modules),
            skipped=list(checkpoint.skipped),
            files=checkpoint.files,
            size=checkpoint.size,
            packages=dict(checkpoint.packages),
        )

    def listing(self) -> dict[str, Any]:
        """``GET /checkpoints``: the readable ones, and the ids of those that are not."""
        found, unreadable = [], []
        for checkpoint_id in self.ids():
            try:
                found.append(self.describe(checkpoint_id, self.open(checkpoint_id)).to_dict())
            except (UnknownCheckpoint, CheckpointError) as exc:
                if not isinstance(exc, UnknownCheckpoint):
                    unreadable.append({"id": checkpoint_id, "message": str(exc)})
        return {"checkpoints": found, "unreadable": unreadable}


def _has(folder: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=folder, follow_symlinks=False)
    except OSError:
        return False
    return True


def _apparent_size(path: Path) -> int:
    return sum(e.size for e in list_tree(path, max_files=1_000_000).files)
