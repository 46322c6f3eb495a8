"""The files of a Ray node's kernel, without shared storage: both sides.

``HostFiles`` is the node host's part (a base of ``NodeHost``): it lists,
opens and takes uploads in a kernel's work dir on the node, with ``_workdir``'s
functions, so no link is followed there either. A file opened for reading, or
an upload under way, is held by the host under a handle of its own until its
owner closes it (or the kernel goes), at most ``_OPEN_MOST`` of each per kernel.

``NodeAccess`` is the owner's part, the session's ``files`` (a ``WorkDirAccess``,
``_session/_files.py``): one view of the two folders a session has, the
caller's work dir (its transcript and saved outputs, written on this side) and
the kernel's on the node (what its code writes). A name in the caller's folder
is read from there, any other from the node's; uploads go to the node, where
the kernel reads them. Errors the host raises (``Refused``, a full disk) are
raised here as they were there.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any, BinaryIO

from .. import _workdir
from .._session._files import room_for

__all__ = ["HostFiles", "NodeAccess", "bring_back"]

_OPEN_MOST = 16  # files a kernel's owner may hold open on the node, to read and to upload each
_CHUNK = 8 * 2**20  # bytes a read through the host answers with at most
_BRING_BACK_FILES = 10_000


class HostFiles:
    """A node host's calls on its kernels' files (``NodeHost`` has them)."""

    _cwds: dict[str, Path]

    def __init__(self) -> None:
        self._reading: dict[str, tuple[str, BinaryIO]] = {}
        self._uploading: dict[str, tuple[str, _workdir.Upload]] = {}

    async def files_list(self, kernel_id: str, max_files: int) -> _workdir.Listing:
        cwd = self._dir(kernel_id)
        return await asyncio.to_thread(_workdir.list_tree, cwd, max_files=max_files)

    async def files_bytes(self, kernel_id: str) -> int:
        """What the kernel's folder holds, in bytes (apparent sizes, no link followed):
        a tenant's work-dir quota counts it with the owner's side."""
        cwd = self._dir(kernel_id)
        listing = await asyncio.to_thread(_workdir.list_tree, cwd, max_files=1_000_000)
        return sum(entry.size for entry in listing.files)

    async def files_open(self, kernel_id: str, relative: str) -> tuple[str, int, float]:
        """A handle on the file, opened with no link followed; its size and time."""
        self._room(kernel_id, self._reading)
        file = await asyncio.to_thread(_workdir.open_read, self._dir(kernel_id), relative)
        info = os.fstat(file.fileno())
        handle = uuid.uuid4().hex
        self._reading[handle] = (kernel_id, file)
        return handle, info.st_size, info.st_mtime

    async def files_read(self, handle: str, most: int) -> bytes:
        _, file = self._held(self._reading, handle)
        return await asyncio.to_thread(file.read, max(0, most))

    def files_close(self, handle: str) -> None:
        held = self._reading.pop(handle, None)
        if held is not None:
            held[1].close()

    async def upload_open(self, kernel_id: str, relative: Sequence[str], size: int = 0) -> str:
        """A handle on a new upload; refused with ``DiskSpaceError`` when the node's disk
        has no room for the ``size`` bytes its owner declared."""
        self._room(kernel_id, self._uploading)
        cwd = self._dir(kernel_id)
        upload = await asyncio.to_thread(_workdir.Upload, cwd, relative)
        room_for(upload, size, cwd, relative)
        handle = uuid.uuid4().hex
        self._uploading[handle] = (kernel_id, upload)
        return handle

    async def upload_write(self, handle: str, data: bytes) -> None:
        _, upload = self._held(self._uploading, handle)
        try:
            await asyncio.to_thread(upload.write, data)
        except BaseException:
            self.upload_abort(handle)
            raise

    async def upload_commit(self, handle: str) -> tuple[int, float]:
        _, upload = self._held(self._uploading, handle)
        del self._uploading[handle]
        info = await asyncio.to_thread(upload.commit)
        return info.st_size, info.st_mtime

    def upload_abort(self, handle: str) -> None:
        held = self._uploading.pop(handle, None)
        if held is not None:
            held[1].abort()

    def _drop_files(self, kernel_id: str) -> None:
        """Closes what the kernel's owner still held open (the kernel is going)."""
        for handle, (owner, _) in list(self._reading.items()):
            if owner == kernel_id:
                self.files_close(handle)
        for handle, (owner, _) in list(self._uploading.items()):
            if owner == kernel_id:
                self.upload_abort(handle)

    def _dir(self, kernel_id: str) -> Path:
        cwd = self._cwds.get(kernel_id)
        if cwd is None:
            raise _workdir.Refused("missing", "the session's kernel is no longer on its node")
        return cwd

    @staticmethod
    def _room(kernel_id: str, held: dict[str, tuple[str, Any]]) -> None:
        if sum(1 for owner, _ in held.values() if owner == kernel_id) >= _OPEN_MOST:
            raise _workdir.Refused(
                "busy", f"{_OPEN_MOST} of the session's files are already open on its node"
            )

    @staticmethod
    def _held(held: dict[str, tuple[str, Any]], handle: str) -> tuple[str, Any]:
        found = held.get(handle)
        if found is None:
            raise _workdir.Refused("missing", "that file was closed on the session's node")
        return found


class NodeAccess:
    """A Ray session's files: the caller's work dir and its kernel's on the node, as one.

    Args:
        root: the caller's work dir (the transcript, saved outputs).
        call: awaits a call on the kernel's host (``RayBackend._host_call``),
            raising what the host raised.
        node: the node's id, for messages.
        kernel_id: the kernel's id on its host.
        node_dir: the kernel's work dir on the node, for messages.
    """

    def __init__(self, root: Path, call: Any, node: str, kernel_id: str, node_dir: str) -> None:
        self.root, self._call = root, call
        self.node, self.kernel_id, self.node_dir = node, kernel_id, node_dir

    async def listing(self, max_files: int) -> _workdir.Listing:
        here = await asyncio.to_thread(_workdir.list_tree, self.root, max_files=max_files)
        there: _workdir.Listing = await self._call("files_list", self.kernel_id, max_files)
        seen = {entry.path for entry in here.files}
        files = here.files + [e for e in there.files if e.path not in seen]
        merged = _workdir.Listing(
            files=files[:max_files],
            truncated=here.truncated or there.truncated or len(files) > max_files,
            skipped=_counts(here.skipped + there.skipped),
        )
        return merged

    async def open_read(self, relative: str | Sequence[str]) -> Any:
        try:
            file = await asyncio.to_thread(_workdir.open_read, self.root, relative)
            return _workdir.Reading(file)
        except _workdir.Refused as exc:
            if exc.reason not in ("missing", "not_a_folder"):
                raise
        parts = _workdir.parts_of(relative)
        handle, size, modified = await self._call("files_open", self.kernel_id, "/".join(parts))
        return _There(self._call, handle, size, modified)

    async def upload(self, relative: str | Sequence[str], size: int) -> Any:
        # The node's disk is the one that must have room: its host checks it.
        parts = _workdir.parts_of(relative)
        return _Sending(self._call, await self._call("upload_open", self.kernel_id, parts, size))

    def where(self, relative: str) -> str:
        parts = _workdir.parts_of(relative)
        try:
            _workdir.open_read(self.root, parts).close()
            return str(self.root.resolve().joinpath(*parts))
        except _workdir.Refused:
            return f"{Path(self.node_dir).joinpath(*parts)} on Ray node {self.node}"


def _counts(lines: list[str]) -> list[str]:
    """Both sides' "kind: N" lines (``list_tree``'s), one per kind."""
    totals: dict[str, int] = {}
    for line in lines:
        kind, _, count = line.rpartition(": ")
        totals[kind] = totals.get(kind, 0) + (int(count) if count.isdigit() else 1)
    return [f"{kind}: {count}" for kind, count in totals.items()]


class _There:
    """A file of the node's work dir, held open by the host."""

    def __init__(self, call: Any, handle: str, size: int, modified: float) -> None:
        self._call, self.handle, self.size, self.modified = call, handle, size, modified

    async def read(self, most: int) -> bytes:
        return bytes(await self._call("files_read", self.handle, most)) if most > 0 else b""

    async def close(self) -> None:
        await self._call("files_close", self.handle)


class _Sending:
    """An upload into the node's work dir, held by the host."""

    def __init__(self, call: Any, handle: str) -> None:
        self._call, self.handle = call, handle

    async def write(self, data: bytes) -> None:
        await self._call("upload_write", self.handle, data)

    async def commit(self) -> tuple[int, float]:
        size, modified = await self._call("upload_commit", self.handle)
        return int(size), float(modified)

    async def abort(self) -> None:
        await self._call("upload_abort", self.handle)


async def bring_back(call: Any, kernel_id: str, root: Path, most: int) -> tuple[int, list[str]]:
    """Copies what the kernel wrote on its node into the caller's work dir ``root``, as its
    node folder is about to go (the session closes, or is culled).

    A name the caller's work dir already has (the transcript, a saved output, a file
    there before) is kept as it is; links and pipes on the node are never followed or
    copied; each file lands whole or not at all. At most ``most`` bytes come.

    Returns:
        How many files came, and what was left on the node, said in words.
    """
    listing: _workdir.Listing = await call("files_list", kernel_id, _BRING_BACK_FILES)
    left = [f"more than {_BRING_BACK_FILES:,} files"] if listing.truncated else []
    copied, budget = 0, most
    for entry in listing.files:
        parts = _workdir.parts_of(entry.path)
        if await asyncio.to_thread(_held_here, root, parts):
            continue
        if entry.size > budget:
            left.append(f"{entry.path} ({entry.size:,} bytes, past {most:,} in all)")
            continue
        try:
            size = await _copy_back(call, kernel_id, entry.path, root, parts)
        except _workdir.Refused as exc:
            left.append(f"{entry.path} ({exc})")
            continue
        budget -= size
        copied += 1
    return copied, left


def _held_here(root: Path, parts: list[str]) -> bool:
    """Whether the caller's work dir has something at that name (or a link on the way)."""
    try:
        _workdir.open_read(root, parts).close()
    except _workdir.Refused as exc:
        return exc.reason not in ("missing", "not_a_folder")
    return True


async def _copy_back(call: Any, kernel_id: str, path: str, root: Path, parts: list[str]) -> int:
    handle, size, _ = await call("files_open", kernel_id, path)
    try:
        upload = await asyncio.to_thread(_workdir.Upload, root, parts)
        try:
            while chunk := await call("files_read", handle, _CHUNK):
                await asyncio.to_thread(upload.write, chunk)
            await asyncio.to_thread(upload.commit)
        except BaseException:
            upload.abort()
            raise
    finally:
        await call("files_close", handle)
    return int(size)
