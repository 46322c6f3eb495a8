"""Checkpoints: a kernel's variables, imports and files in a directory a person can read.

A checkpoint is made in three steps. The kernel pickles its namespace variable
by variable (``_kernel/checkpoint.py``, sent as code, run silently) into a
staging folder of its work dir, the one folder both sides see, local or in a
container. This process then moves those files into the checkpoint (renames:
the data never passes through it), copies the work dir's files, and writes
``manifest.json`` last: a directory without one is not a checkpoint.

::

    <checkpoint>/
        manifest.json        versions, parent, variables (name, type, size, file), skipped
        vars/0001.pkl        one pickle per variable ...
        vars/0001.buf        ... and its out-of-band buffers (array data), back to back
        files/...            the work dir's files when the checkpoint was made
        transcript.ipynb     the parent's transcript at that moment

The work dir's files are copied, not referenced: a checkpoint outlives its
work dir (pause overnight, clean up, restore elsewhere) and the kernel keeps
changing the files after it is made. Links in the work dir are never followed
(``_workdir``), earlier checkpoints under ``checkpoints/`` are left out.

Restoring (``_restore``) reverses it: the files go into the new work dir, the
variable files into a staging folder there, and the kernel loads them, first
refusing a checkpoint made by another Python (major.minor) or with other
versions of the packages whose objects it holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import os
import re
import secrets
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .. import _times, _workdir
from .._backends import DROPPED, KernelBackend
from .._exceptions import CheckpointError, DiskSpaceError
from .._kernel import BOOT_DIR
from .._version import __version__
from . import _disk

__all__ = [
    "CAUSES",
    "STAGING",
    "Checkpoint",
    "CheckpointVariable",
    "RestoreReport",
    "SkippedVariable",
    "kernel_call",
    "note",
    "read_json",
    "run_silently",
    "take",
]

MANIFEST = "manifest.json"
FORMAT = 1
DEFAULT_FOLDER = "checkpoints"  # under the work dir; left out of the files copied
_KERNEL_SOURCE = (BOOT_DIR / "checkpoint.py").read_text(encoding="utf-8")
_STEM = re.compile(r"^\d{4}$")
_MAX_JSON = 64 * 1024 * 1024  # a report or manifest beyond this is not ours
_POLL = 0.2
_GRACE = 5.0
# The staging folders a checkpoint and a restore make in a work dir (a crash may leave them).
STAGING = re.compile(r"\.kernelexec-(checkpoint|restore)-[0-9a-f]{16}")
# Why a variable was left out (``manifest["skipped"][i]["cause"]``): the object itself
# could not be pickled, or something that may pass (see _kernel/checkpoint.py).
CAUSES = ("object", "disk", "io", "timeout", "memory")


@dataclass(frozen=True)
class CheckpointVariable:
    """A variable a checkpoint holds: ``size`` bytes in ``file`` (and ``buffers_file``)."""

    name: str
    type: str
    size: int
    file: str
    buffers_file: str


@dataclass(frozen=True)
class SkippedVariable:
    """A variable a checkpoint or a restore could not carry, and why."""

    name: str
    type: str
    reason: str


@dataclass(frozen=True)
class Checkpoint:
    """A checkpoint directory, as its manifest describes it.

    Attributes:
        path: the directory.
        created: when it was made (ISO 8601, UTC).
        variables: what it holds, in restore order.
        modules: module aliases (``{"np": "numpy"}``), re-imported by name.
        skipped: variables that could not be carried, with the reason.
        files: how many work-dir files it holds under ``files/``.
        packages: versions of the packages whose objects it holds (and of
            cloudpickle), which a restoring kernel must have.
        python: the Python that made it ("cpython 3.11.7").
        manifest: the whole manifest, as read.
    """

    path: Path
    created: str
    variables: list[CheckpointVariable]
    modules: dict[str, str]
    skipped: list[SkippedVariable]
    files: int
    packages: dict[str, str]
    python: str
    manifest: dict[str, Any] = field(repr=False)

    @classmethod
    def open(cls, path: str | Path) -> Checkpoint:
        """Reads and checks a checkpoint directory's manifest and variable files.

        Raises:
            CheckpointError: no such directory, no manifest, or a manifest or
                variable file that is damaged (the message says which).
        """
        root = Path(path).expanduser().resolve()
        manifest = _read_manifest(root)
        return cls._of(root, manifest)

    @classmethod
    def _of(cls, root: Path, manifest: dict[str, Any]) -> Checkpoint:
        python = manifest["python"]
        return cls(
            path=root,
            created=manifest["created"],
            variables=[
                CheckpointVariable(v["name"], v["type"], v["size"], v["file"], v["buffers_file"])
                for v in manifest["variables"]
            ],
            modules=dict(manifest["modules"]),
            skipped=[
                SkippedVariable(s["name"], s["type"], s["reason"]) for s in manifest["skipped"]
            ],
            files=int(manifest["files"]["count"]),
            packages=dict(manifest["packages"]),
            python=f"{python['implementation']} {'.'.join(map(str, python['version']))}",
            manifest=manifest,
        )

    @property
    def size(self) -> int:
        """Bytes of variable data."""
        return sum(v.size for v in self.variables)

    @property
    def text(self) -> str:
        """What was carried and what was not, for an LLM or a person."""
        lines = [
            f"Checkpoint {self.path}: {len(self.variables)} variables "
            f"({_bytes(self.size)}), {len(self.modules)} modules, {self.files} files."
        ]
        if self.variables:
            lines.append("Variables: " + ", ".join(f"{v.name} ({v.type})" for v in self.variables))
        if self.modules:
            lines.append("Modules: " + ", ".join(_alias(a, m) for a, m in self.modules.items()))
        lines.extend(_skipped_lines(self.skipped, "Not carried"))
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """The manifest, with the directory's path."""
        return {"path": str(self.path), **self.manifest}


@dataclass(frozen=True)
class RestoreReport:
    """What a restore brought back into the kernel, and what it did not.

    Attributes:
        checkpoint: the checkpoint's directory (a temporary one for
            ``restart(keep_state=True)``, removed since).
        restored: the variables back in the kernel.
        modules: the module aliases imported again.
        skipped: what did not come back (not carried by the checkpoint, or
            failed to load), with the reason.
        files: work-dir files copied from the checkpoint.
        message: anything else worth saying, or None.
    """

    checkpoint: str
    restored: list[str] = field(default_factory=list)
    modules: list[str] = field(default_factory=list)
    skipped: list[SkippedVariable] = field(default_factory=list)
    files: int = 0
    message: str | None = None

    @property
    def text(self) -> str:
        lines = [
            f"Restored {len(self.restored)} variables and {len(self.modules)} modules"
            + (f" and {self.files} files" if self.files else "")
            + "."
        ]
        if self.restored:
            lines.append("Variables: " + ", ".join(self.restored))
        if self.modules:
            lines.append("Modules: " + ", ".join(self.modules))
        lines.extend(_skipped_lines(self.skipped, "Not restored"))
        if self.message:
            lines.append(self.message)
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# -- making one


async def take(
    backend: KernelBackend,
    *,
    work_dir: Path,
    kernel_dir: str,
    path: str | Path | None,
    notebook: Path,
    cells: int,
    files: bool,
    timeout: float,
    variable_timeout: float,
    max_bytes: int | None = None,
) -> Checkpoint:
    """Checkpoints the kernel's namespace (and, with ``files``, the work dir) into ``path``.

    What it writes is held to a budget before it is written: the work dir's
    files by their apparent sizes (a sparse file at its full length), the
    variables by a cap the kernel is told and this side checks again. The
    budget is ``max_bytes`` and the room on the disks it writes to (minus a
    reserve, ``_disk.reserve``). On any failure what was written is removed.

    Args:
        backend: the running kernel.
        work_dir: the session's work dir, where the staging folder is made.
        kernel_dir: the work dir as the kernel sees it ("/workspace" in Docker).
        path: the checkpoint directory (absent or empty); None: a new one
            under ``work_dir/checkpoints/``.
        notebook: the session's transcript, copied into the checkpoint.
        cells: code cells the transcript holds (a restored session numbers on).
        files: copy the work dir's files.
        timeout: seconds for the whole of it; the kernel is interrupted after.
        variable_timeout: seconds per variable in the kernel.
        max_bytes: what the checkpoint may hold, at most (None: what the disk has).

    Raises:
        DiskSpaceError: it would not fit in ``max_bytes`` or on the disk (a
            variable that would pass the budget included); nothing is kept.
        CheckpointError: the kernel could not make it (no cloudpickle there,
            it died or took too long: ``transient`` says which may pass), or
            ``path`` cannot be used.
    """
    started = time.monotonic()
    target = _Target.make(work_dir, path)
    staging = f".kernelexec-checkpoint-{secrets.token_hex(8)}"
    try:
        wanted = (
            await asyncio.to_thread(_files_to_copy, work_dir, target, staging, notebook)
            if files
            else _Files()
        )
        _disk.check(
            wanted.size,
            target.path,
            work_dir,
            budget=max_bytes,
            what=f"the checkpoint's copy of {len(wanted.copies)} work-dir files",
            setting="max_bytes",
        )
        room = _disk.room(target.path, work_dir) - wanted.size
        budget = room if max_bytes is None else min(room, max_bytes - wanted.size)
        options = {"variable_timeout": variable_timeout, "max_bytes": budget}
        await run_silently(
            backend,
            kernel_call("dump", f"{kernel_dir}/{staging}", options),
            timeout=timeout,
            what="the checkpoint",
        )
        report, held = await asyncio.to_thread(_collect, work_dir, staging, target, budget)
        _refuse_disk_skips(report, budget)
        copied = await asyncio.to_thread(_copy_work_dir, work_dir, target, wanted)
        manifest = _manifest(report, target, work_dir, notebook, cells, copied, wanted.left_out)
        manifest["bytes"] = held + wanted.size
        manifest["seconds"] = round(time.monotonic() - started, 3)
        await asyncio.to_thread(target.write, MANIFEST, _dump_json(manifest))
    except BaseException as exc:
        await asyncio.to_thread(target.discard)
        if _disk.is_full(exc):
            assert isinstance(exc, OSError)
            raise _disk.full(exc, "the checkpoint") from None
        if isinstance(exc, OSError) and not isinstance(exc, _workdir.Refused):
            raise CheckpointError(f"the checkpoint failed: {exc}", transient=True) from exc
        raise
    finally:
        await asyncio.to_thread(_workdir.remove_tree, work_dir / staging)
    return Checkpoint._of(target.path, manifest)


def _refuse_disk_skips(report: dict[str, Any], budget: int) -> None:
    """A variable the kernel left out for want of room fails the checkpoint: it would not fit."""
    for skipped in report["skipped"]:
        if skipped.get("cause") == "disk":
            raise DiskSpaceError(
                f"variable {skipped['name']!r} ({skipped['type']}) did not fit in the "
                f"checkpoint, whose variables had {_disk.shown(max(budget, 0))} (the room on "
                f"disk, or max_bytes): {skipped['reason']}; nothing was kept. Delete large "
                "variables you do not need, free some disk space, or raise the budget"
            )


class _Target:
    """The checkpoint directory: walked from the work dir, no link followed, when inside it."""

    def __init__(self, root: Path, prefix: list[str], path: Path) -> None:
        self.root, self.prefix, self.path = root, prefix, path
        self.made = False  # the folder itself is ours to remove if the checkpoint fails

    @classmethod
    def make(cls, work_dir: Path, path: str | Path | None) -> _Target:
        if path is None:
            stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
            path = work_dir / DEFAULT_FOLDER / f"{stamp}-{secrets.token_hex(3)}"
        target = Path(path).expanduser().absolute()
        existed = os.path.lexists(target)
        relative = os.path.normpath(os.path.relpath(target, work_dir))
        if relative == "." or relative.startswith(".."):
            if relative == ".":
                raise CheckpointError("a checkpoint cannot be the work dir itself; give a path")
            # Outside the work dir: the caller's choice, made as asked.
            try:
                target.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise CheckpointError(f"cannot make the checkpoint dir {target}: {exc}") from exc
            self = cls(target, [], target)
        else:
            # Inside: the kernel may have planted links on the way; they are moved aside.
            self = cls(work_dir, relative.split("/"), target)
        fd = self.folder([])
        try:
            if os.listdir(fd):
                raise CheckpointError(
                    f"{target} is not empty; give a new or empty directory for the checkpoint"
                )
        finally:
            os.close(fd)
        self.made = not existed
        return self

    def folder(self, parts: list[str]) -> int:
        try:
            fd, _ = _workdir.own_folder(self.root, [*self.prefix, *parts, "-"])
        except OSError as exc:
            raise CheckpointError(f"cannot write the checkpoint in {self.path}: {exc}") from exc
        return fd

    def write(self, name: str, data: bytes) -> None:
        _workdir.write(self.root, "/".join([*self.prefix, name]), data)

    def discard(self) -> None:
        """Removes what a checkpoint writes here (never anything else), and the folder
        itself if the checkpoint made it."""
        try:
            fd = _workdir.open_folder(self.root, self.prefix)
        except OSError:
            return
        try:
            for name in ("vars", "files"):
                _workdir.remove_in(fd, name)
            for name in (MANIFEST, "transcript.ipynb"):
                with contextlib.suppress(OSError):
                    os.unlink(name, dir_fd=fd)
        finally:
            os.close(fd)
        if self.made:
            with contextlib.suppress(OSError):
                self.path.rmdir()


def kernel_call(function: str, *args: Any) -> str:
    """Code that runs the kernel-side module's ``function`` and binds no name."""
    return (
        "(lambda ns: (exec(compile(ns.pop('source'), '<kernelexec checkpoint>', 'exec'), ns), "
        f"ns[{function!r}](*ns.pop('args'))))"
        f"({{'__name__': 'kernelexec_checkpoint', 'source': {_KERNEL_SOURCE!r}, "
        f"'args': __import__('json').loads({json.dumps(list(args))!r})}})"
    )


async def run_silently(backend: KernelBackend, code: str, *, timeout: float, what: str) -> None:
    """Runs kernelexec's own code in the kernel and waits for its reply.

    Local and Docker kernels get a silent request: no history entry, no
    execution count, no events. Other backends get an ordinary one.

    Raises:
        CheckpointError: the code failed, the kernel died, or it took longer
            than ``timeout`` (the kernel is then interrupted).
    """
    send = getattr(backend, "_send_execute", None)
    if callable(send):
        msg_id = send(code, allow_stdin=False, silent=True)
    else:
        msg_id = await backend.execute(code, allow_stdin=False)
    deadline = time.monotonic() + timeout
    interrupted = False
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            if interrupted:
                raise CheckpointError(
                    f"{what} did not finish within {timeout:g} s, nor stop when interrupted; "
                    "restart the session",
                    transient=True,
                )
            await backend.interrupt()
            interrupted, deadline = True, time.monotonic() + _GRACE
            continue
        item = await backend.receive(min(_POLL, remaining))
        if item is None:
            if not await backend.is_alive():
                reason = backend.exit_reason() or "cause unknown"
                raise CheckpointError(f"the kernel died during {what} ({reason})")
            continue
        channel, msg = item
        if channel == DROPPED and msg["content"]["channel"] in ("shell", None):
            raise CheckpointError(
                f"the kernel's reply to {what} may be lost: a message over the host's cap of "
                f"{msg['content']['cap']:,} bytes (Limits.max_message_bytes) was dropped unread"
            )
        if channel != "shell" or (msg.get("parent_header") or {}).get("msg_id") != msg_id:
            continue
        content = msg.get("content") or {}
        if interrupted:
            raise CheckpointError(
                f"{what} did not finish within {timeout:g} s and was interrupted; "
                "pass a longer timeout",
                transient=True,
            )
        if content.get("status") != "ok":
            raise _kernel_failure(what, content)
        return


def _kernel_failure(what: str, content: dict[str, Any]) -> Exception:
    """The error for a failed reply: a full disk, a passing failure, or one that stays.

    The kernel's words are only read for the kind of failure, which can at
    most make the owner keep a session's kernel or answer 507.
    """
    ename, evalue = str(content.get("ename", "Error")), str(content.get("evalue", ""))
    text = f"{what} failed in the kernel: {ename}: {evalue[:1000]}"
    if any(f"[Errno {e}]" in evalue for e in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)):
        return DiskSpaceError(f"{text}; free some space on the disk of the work dir")
    # An I/O error or a lack of memory may pass; a missing cloudpickle will not.
    return CheckpointError(text, transient=ename in ("OSError", "MemoryError", "IOError"))


def _collect(
    work_dir: Path, staging: str, target: _Target, budget: int
) -> tuple[dict[str, Any], int]:
    """Reads the kernel's report and moves its variable files into the checkpoint.

    Returns:
        The report, and the bytes the variable files hold.

    Raises:
        DiskSpaceError: the files hold more than ``budget`` (a kernel that
            ignored the cap it was given).
    """
    try:
        folder = _workdir.open_folder(work_dir, [staging])
    except OSError as exc:
        raise CheckpointError(
            f"the kernel's checkpoint files are not in {work_dir / staging} ({exc}); "
            "checkpoints need the kernel to share the session's work dir"
        ) from exc
    held = 0
    try:
        report = read_json(folder, "report.json", "the kernel's report")
        _check_report(report)
        into = target.folder(["vars"])
        try:
            for entry in report["variables"]:
                size = 0
                for suffix in (".pkl", ".buf"):
                    size += _move(folder, into, entry["file"] + suffix, budget - held - size)
                if size != entry["size"]:
                    raise CheckpointError(
                        f"the files of variable {entry['name']!r} changed while they were moved"
                    )
                held += size
        finally:
            os.close(into)
    finally:
        os.close(folder)
    return report, held


def _move(source: int, target: int, name: str, most: int) -> int:
    """Moves the regular file ``name`` between two folders; its size. Links are refused.

    Renamed first, then opened where it landed: what is checked is what was
    moved, whatever the kernel swaps in meanwhile. A file over ``most`` bytes
    fails the checkpoint (whose folder the caller removes).
    """
    try:
        os.rename(name, name, src_dir_fd=source, dst_dir_fd=target)
        moved = target
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise CheckpointError(f"could not move {name} into the checkpoint: {exc}") from exc
        moved = source  # another file system: copied below
    try:
        with _workdir.open_in(moved, name) as file:
            info = os.fstat(file.fileno())
            if info.st_nlink != 1:
                raise CheckpointError(f"{name} has other names (hard links); not carried")
            if info.st_size > most:
                raise DiskSpaceError(
                    f"the kernel wrote {info.st_size:,} bytes to {name}, over the "
                    f"{max(most, 0):,} left in the checkpoint's budget; nothing was kept"
                )
            if moved is source:
                flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                fd = os.open(name, flags, 0o600, dir_fd=target)
                try:
                    _workdir.copy_data(file.fileno(), fd, info.st_size)
                finally:
                    os.close(fd)
            return info.st_size
    except _workdir.Refused as exc:
        with contextlib.suppress(OSError):
            os.unlink(name, dir_fd=target)
        raise CheckpointError(f"{name} in the kernel's checkpoint files: {exc}") from exc


@dataclass
class _Files:
    """The work-dir files a checkpoint will copy, and their apparent size together."""

    copies: list[tuple[str, str]] = field(default_factory=list)  # (in the work dir, in it)
    size: int = 0
    left_out: list[str] = field(default_factory=list)


def _files_to_copy(work_dir: Path, target: _Target, staging: str, notebook: Path) -> _Files:
    """What ``files=True`` copies: the work dir's regular files but ours, and the transcript."""
    listing = _workdir.list_tree(work_dir, max_files=100_000)
    wanted = _Files(left_out=list(listing.skipped))
    if listing.truncated:
        wanted.left_out.append("files past the first 100,000")
    notebook_rel = os.path.relpath(notebook, work_dir)
    own = "/".join(target.prefix) + "/" if target.root == work_dir else None
    for entry in listing.files:
        first = entry.path.split("/", 1)[0]
        if first in (staging, DEFAULT_FOLDER) or (own and entry.path.startswith(own)):
            continue  # ours: staging, this and earlier checkpoints
        name = "transcript.ipynb" if entry.path == notebook_rel else f"files/{entry.path}"
        wanted.copies.append((entry.path, name))
        wanted.size += entry.size
    if DEFAULT_FOLDER in {e.path.split("/", 1)[0] for e in listing.files}:
        wanted.left_out.append(f"{DEFAULT_FOLDER}/: checkpoints are not copied into checkpoints")
    return wanted


def _copy_work_dir(work_dir: Path, target: _Target, wanted: _Files) -> int:
    """Copies the files ``wanted`` lists into the checkpoint; how many (the transcript aside).

    Together they may take what they measured when listed: a file that grew
    meanwhile past what is left is refused (``DiskSpaceError``). One gone or
    unreadable meanwhile is left out, and said so.

    Raises:
        DiskSpaceError: the files grew past their budget.
        OSError: the disk is full, or the transcript cannot be copied.
    """
    copied, left = 0, wanted.size
    for relative, name in wanted.copies:
        try:
            left -= _workdir.copy(
                work_dir, relative, target.root, "/".join([*target.prefix, name]), max_bytes=left
            )
        except DiskSpaceError:
            raise
        except OSError as exc:
            if _disk.is_full(exc) or name == "transcript.ipynb":
                raise
            wanted.left_out.append(f"{relative}: {exc}")
            continue
        copied += name != "transcript.ipynb"
    return copied


def _manifest(
    report: dict[str, Any],
    target: _Target,
    work_dir: Path,
    notebook: Path,
    cells: int,
    copied: int,
    left_out: list[str],
) -> dict[str, Any]:
    return {
        "kernelexec_checkpoint": FORMAT,
        "kernelexec_version": __version__,
        "created": _times.now(),
        "python": report["python"],
        "serializer": "cloudpickle",
        "packages": report["packages"],
        "parent": {"work_dir": str(work_dir), "transcript": str(notebook), "cells": cells},
        "execution_count": report["execution_count"],
        "variables": [
            {
                "name": v["name"],
                "type": v["type"],
                "size": v["size"],
                "file": f"vars/{v['file']}.pkl",
                "buffers_file": f"vars/{v['file']}.buf",
                "buffers": v["buffers"],
                "packages": v["packages"],
            }
            for v in report["variables"]
        ],
        "modules": report["modules"],
        "skipped": report["skipped"],
        "files": {"folder": "files", "count": copied, "left_out": left_out},
    }


# -- manifests and reports


def read_json(folder: int, name: str, what: str) -> dict[str, Any]:
    try:
        with _workdir.open_in(folder, name) as file:
            data = file.read(_MAX_JSON + 1)
    except OSError as exc:
        raise CheckpointError(f"{what} is missing or unreadable ({exc})") from exc
    if len(data) > _MAX_JSON:
        raise CheckpointError(f"{what} is over {_MAX_JSON:,} bytes; not a kernelexec file")
    try:
        value = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise CheckpointError(f"{what} is not valid JSON ({exc})") from exc
    if not isinstance(value, dict):
        raise CheckpointError(f"{what} is not a JSON object")
    return value


def _check_report(report: dict[str, Any]) -> None:
    try:
        for entry in report["variables"]:
            _check_variable(entry, stem=True)
        _check_common(report)
    except (KeyError, TypeError, ValueError, AssertionError) as exc:
        raise CheckpointError(f"the kernel's checkpoint report is malformed ({exc!r})") from exc


def _read_manifest(root: Path) -> dict[str, Any]:
    if not root.is_dir():
        raise CheckpointError(f"{root} is not a directory; give a checkpoint's directory")
    try:
        folder = _workdir.open_folder(root, [])
    except OSError as exc:
        raise CheckpointError(f"cannot open checkpoint {root}: {exc}") from exc
    try:
        try:
            manifest = read_json(folder, MANIFEST, f"{root / MANIFEST}")
        except CheckpointError as exc:
            raise CheckpointError(
                f"{root} is not a usable kernelexec checkpoint: {exc} (a checkpoint that "
                "was interrupted has no manifest)"
            ) from exc
    finally:
        os.close(folder)
    try:
        assert manifest.get("kernelexec_checkpoint") == FORMAT, "an unknown format"
        assert isinstance(manifest["created"], str)
        for entry in manifest["variables"]:
            _check_variable(entry, stem=False)
        _check_common(manifest)
        assert isinstance(manifest["files"]["count"], int)
    except (KeyError, TypeError, ValueError, AssertionError) as exc:
        raise CheckpointError(
            f"the manifest of checkpoint {root} is damaged ({_why(exc)}); it cannot be restored"
        ) from exc
    for entry in manifest["variables"]:
        sizes = []
        for name in (entry["file"], entry["buffers_file"]):
            try:
                sizes.append((root / name).lstat().st_size)
            except OSError as exc:
                raise CheckpointError(
                    f"checkpoint {root} is damaged: {name} (variable {entry['name']!r}) "
                    f"is missing ({exc.strerror})"
                ) from exc
        if sizes[1] != sum(entry["buffers"]) or sum(sizes) != entry["size"]:
            raise CheckpointError(
                f"checkpoint {root} is damaged: the files of variable {entry['name']!r} "
                f"hold {sum(sizes):,} bytes, the manifest says {entry['size']:,}"
            )
    return manifest


def _check_variable(entry: Any, *, stem: bool) -> None:
    assert isinstance(entry, dict), "a variable is not an object"
    assert isinstance(entry["name"], str) and entry["name"].isidentifier(), "a bad name"
    assert isinstance(entry["type"], str)
    assert type(entry["size"]) is int and entry["size"] >= 0, "a bad size"
    buffers = entry["buffers"]
    assert isinstance(buffers, list) and all(type(b) is int and b >= 0 for b in buffers)
    assert isinstance(entry["packages"], list)
    if stem:
        assert isinstance(entry["file"], str) and _STEM.match(entry["file"]), "a bad file"
    else:
        for key, suffix in (("file", ".pkl"), ("buffers_file", ".buf")):
            name = entry[key]
            assert isinstance(name, str), "a bad file"
            folder, _, base = name.partition("/")
            assert folder == "vars" and _STEM.match(base.removesuffix(suffix)), "a bad file"
            assert base.endswith(suffix), "a bad file"


def _check_common(data: dict[str, Any]) -> None:
    python = data["python"]
    assert isinstance(python["version"], list) and len(python["version"]) >= 2
    assert isinstance(python["implementation"], str)
    assert type(data["execution_count"]) is int
    assert isinstance(data["modules"], dict)
    assert all(
        isinstance(k, str) and k.isidentifier() and isinstance(v, str)
        for k, v in data["modules"].items()
    ), "a bad module"
    assert isinstance(data["packages"], dict)
    assert all(isinstance(v, str) for v in data["packages"].values())
    for skipped in data["skipped"]:
        assert {"name", "type", "reason"} <= set(skipped)
        assert all(isinstance(skipped[k], str) for k in ("name", "type", "reason"))
        assert skipped.get("cause", "object") in CAUSES, "a bad cause"


def _why(exc: BaseException) -> str:
    if isinstance(exc, KeyError):
        return f"no {exc.args[0]!r}"
    return str(exc) or type(exc).__name__


def _dump_json(data: dict[str, Any]) -> bytes:
    return (json.dumps(data, indent=1, sort_keys=False) + "\n").encode("utf-8")


def _bytes(size: int) -> str:
    for unit in ("bytes", "KB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size:,.0f} {unit}" if unit == "bytes" else f"{size:,.1f} {unit}"
        size /= 1000  # type: ignore[assignment]
    return ""


def _alias(alias: str, module: str) -> str:
    return module if alias == module else f"{module} as {alias}"


def _skipped_lines(skipped: Sequence[SkippedVariable], heading: str) -> list[str]:
    if not skipped:
        return []
    return [f"{heading}:"] + [f"- {s.name} ({s.type}): {s.reason}" for s in skipped]


def note(report: RestoreReport, *, how: str) -> str:
    """The transcript note of a restore: where from, what came back, what did not."""
    body = report.text.replace("\n", "\n\n")
    return f"*kernelexec: {how}.*\n\n{body}"
