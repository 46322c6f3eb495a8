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
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
from pathlib import Path
from typing import Any

from .._checkpoint import Checkpoint
from .._exceptions import CheckpointError
from .._remote_models import CheckpointInfo
from .._workdir import Refused, open_folder, own_folder, remove_tree

__all__ = ["FOLDER", "CheckpointStore", "UnknownCheckpoint"]

FOLDER = ".checkpoints"
_ID = re.compile(r"[0-9a-f]{32}")


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

    def new(self) -> tuple[str, Path]:
        """A new, empty checkpoint folder: its id and path.

        Raises:
            CheckpointError: the store cannot be written.
        """
        checkpoint_id = secrets.token_hex(16)
        try:
            # Made folder by folder with no link followed; a link in the way is moved aside.
            fd, _ = own_folder(self.work_root, [FOLDER, checkpoint_id, "-"])
        except OSError as exc:
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
        try:
            path = self.path(checkpoint_id)
        except UnknownCheckpoint:
            return
        remove_tree(path)

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
