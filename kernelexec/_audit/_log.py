"""The audit log's writer: one JSON line per event, appended whole, never in the caller's way.

``record`` is called on the event loop, so it does no I/O: it checks the
event (``_fields.make_line``), encodes its line and hands it to one writer
thread through a bounded queue. When the queue is full (a stuck disk, the
lock held by a wedged process) the event is dropped and counted rather than
waited for: a server that stops answering because its audit disk is slow is
worse than an audit log with a gap, as long as the gap is on record. So the
writer, once it can write again, adds a ``"event": "dropped"`` line with how
many events it lost, and the log warns (at most once a minute).

Several writers may share one file: threads, other ``AuditLog`` objects and
other processes (a ``serve`` and an ``mcp --http`` given the same file). Each
writes under an exclusive ``flock`` on a side file, ``FILE.lock``, and each
line goes in with one ``os.write`` on a descriptor opened ``O_APPEND``; the
lock is what makes a short write's remainder, or a rotation, safe from the
others. Under that lock a writer first checks that its descriptor is still
FILE (another writer may have rotated it away) and reopens it if not, so two
writers never rotate the same file twice, and no line lands in a file that
has just become ``FILE.1``.

A write that fails (disk full, file too big, permissions changed) never
raises into the caller: the line is counted in ``failed``, half a line is cut
off again so that it cannot merge with the next, and each kind of error is
logged once.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import errno
import fcntl
import json
import logging
import os
import queue
import stat
import threading
import time
from collections.abc import Mapping
from typing import Any

from .._exceptions import ConfigurationError
from ._fields import make_line

__all__ = ["DEFAULT_BACKUPS", "DEFAULT_MAX_BYTES", "DEFAULT_QUEUE_SIZE", "AuditLog"]

log = logging.getLogger("kernelexec.audit")

DEFAULT_MAX_BYTES = 64 * 1024 * 1024
DEFAULT_BACKUPS = 5
DEFAULT_QUEUE_SIZE = 10_000  # a few MB at most: lines are a few hundred bytes
_BATCH = 256  # lines written under one taking of the lock
_WARN_EVERY = 60.0  # seconds between two warnings about dropped events
_STOP = b""  # put last by close(); an encoded line is never empty
# O_NONBLOCK: a FIFO put where the file should be fails at once (ENXIO)
# instead of hanging the server's start until someone reads it.
_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK


class AuditLog:
    """An append-only file of JSON lines, one per ``record``, rotated by size.

    Args:
        path: the file; its folder must exist. Made with mode 0o600 if new.
        max_bytes: a file that a line would take past this is first renamed
            ``FILE.1`` (``FILE.1`` to ``FILE.2``, and so on); None never rotates.
        backups: how many rotated files are kept; the oldest goes. 0 keeps
            none: a full file is removed.
        queue_size: events that may wait for the writer; more are dropped
            and counted.

    Raises:
        ConfigurationError: the folder does not exist or cannot be written,
            the path is a symbolic link or not a regular file, or a number
            cannot work.

    Attributes:
        path: the file, absolute.
        written, dropped, failed, rotations: lines written (its own
            "dropped" lines too); events dropped because the queue was full
            or the log closed; lines a write error lost; rotations this
            object made.

    From async code, ``record`` as it is (it never waits) and ``aclose`` at
    the end::

        audit = AuditLog("/var/log/kernelexec/audit.log")
        audit.record({"kind": "execution", "tenant": "alice", **code_fields(code)})
        await audit.aclose()
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        max_bytes: int | None = DEFAULT_MAX_BYTES,
        backups: int = DEFAULT_BACKUPS,
        queue_size: int = DEFAULT_QUEUE_SIZE,
    ) -> None:
        if max_bytes is not None and max_bytes < 1:
            raise ConfigurationError(
                f"the audit log's max_bytes is {max_bytes}: give a positive size, or None "
                "never to rotate"
            )
        if backups < 0 or queue_size < 1:
            raise ConfigurationError(
                f"the audit log's backups ({backups}) and queue_size ({queue_size}) "
                "cannot work: give backups >= 0 and queue_size >= 1"
            )
        self.path = os.path.abspath(os.fspath(path))
        folder, self._name = os.path.split(self.path)
        self._max_bytes = max_bytes
        self._backups = backups
        self._folder = _open_folder(self.path, folder)
        try:
            self._lock = _open_checked(self.path, self._name + ".lock", self._folder)
            self._fd = _open_checked(self.path, self._name, self._folder, os.O_APPEND)
        except BaseException:
            self._close_fds()
            raise
        self.written = self.dropped = self.failed = self.rotations = 0
        self._queue: queue.Queue[bytes] = queue.Queue(queue_size)
        self._guard = threading.Lock()  # closed, dropped and unreported change together
        self._closed = False
        self._stop_queued = False
        self._unreported = 0  # drops not yet told by a "dropped" line
        self._warned_at = -_WARN_EVERY
        self._errors_told: set[str] = set()
        self._thread = threading.Thread(target=self._run, name="kernelexec-audit", daemon=True)
        self._thread.start()
        # A server that exits without close() still writes what it recorded.
        atexit.register(self.close)

    def record(self, event: Mapping[str, Any]) -> None:
        """Adds a line for ``event``, with ``v`` and ``time``; returns at once, never waits.

        Safe from any thread and from the event loop. The line is written
        soon after by the writer thread; ``close`` waits for it.

        Args:
            event: fields of ``FIELDS``, ``kind`` among them; None values are
                left out.

        Raises:
            ValueError: a field the log does not take (``code``, ``token``...),
                or no ``kind``.
            TypeError: a value not of its field's type.
        """
        line = _encode(make_line(event))
        with self._guard:
            if not self._closed:
                try:
                    self._queue.put_nowait(line)
                    return
                except queue.Full:
                    pass
            self.dropped += 1
            self._unreported += 1
            moment = time.monotonic()
            warn = moment - self._warned_at >= _WARN_EVERY
            if warn:
                self._warned_at = moment
            dropped, closed = self.dropped, self._closed
        if warn and closed:
            log.warning(
                "audit log %s: %d events dropped: recorded after close()", self.path, dropped
            )
        elif warn:
            log.warning(
                "audit log %s: %d events dropped so far, its writer being behind (a slow disk, "
                "or its lock held); a 'dropped' line in the log will count them",
                self.path,
                dropped,
            )

    def close(self, timeout: float | None = 30.0) -> None:
        """Writes what was recorded and stops the writer; calling it again does nothing more.

        Args:
            timeout: seconds to wait for the writer; a writer still stuck
                then (its lock held by a wedged process) is left behind, and
                what it had not written is lost, said in the log.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._guard:
            first, self._closed = not self._closed, True
        if first:
            atexit.unregister(self.close)
        if not self._stop_queued:  # a close that timed out before left it to the next one
            try:
                self._queue.put(_STOP, timeout=_left(deadline))
                self._stop_queued = True
            except queue.Full:
                pass
        self._thread.join(_left(deadline))
        if self._thread.is_alive():
            log.warning("audit log %s: its writer is stuck; what it still holds is lost", self.path)
            return
        self._close_fds()

    async def aclose(self) -> None:
        """``close``, awaited in a thread so that the event loop goes on meanwhile."""
        await asyncio.to_thread(self.close)

    def __enter__(self) -> AuditLog:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- the writer thread

    def _run(self) -> None:
        while True:
            batch = [self._queue.get()]
            while len(batch) < _BATCH and batch[-1] != _STOP:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            # Nothing is queued after _STOP, so it can only come last.
            stop = batch[-1] == _STOP
            lines = batch[:-1] if stop else batch
            with self._guard:
                lost, self._unreported = self._unreported, 0
            if lost:
                lines.append(
                    _encode(make_line({"kind": "server", "event": "dropped", "count": lost}))
                )
            try:
                self._write(lines)
            except Exception:  # a bug here must not end the writer, and every line after it
                self.failed += len(lines)
                log.exception("audit log %s: %d lines lost", self.path, len(lines))
            if stop:
                return

    def _write(self, lines: list[bytes]) -> None:
        if not lines:
            return
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX)
        except OSError as exc:
            for _ in lines:
                self._failed(exc)
            return
        try:
            size: int | None = None  # FILE's size; None: to be read from the file again
            for line in lines:
                try:
                    if size is None:
                        size = self._current_size()
                    if self._max_bytes is not None and size and size + len(line) > self._max_bytes:
                        self._rotate()
                        size = self._current_size()
                    _append(self._fd, line, size)
                    size += len(line)
                    self.written += 1
                except OSError as exc:
                    size = None
                    self._failed(exc)
        finally:
            fcntl.flock(self._lock, fcntl.LOCK_UN)

    def _current_size(self) -> int:
        """FILE's size, first reopening it if what this writer holds is no longer FILE."""
        held = os.fstat(self._fd)
        try:
            named = os.stat(self._name, dir_fd=self._folder, follow_symlinks=False)
        except FileNotFoundError:
            named = None  # removed by someone: O_CREAT makes it again
        if named is None or (named.st_dev, named.st_ino) != (held.st_dev, held.st_ino):
            # Rotated away by another writer (or moved aside by an operator).
            fd = _open_file(self._name, self._folder, os.O_APPEND)
            os.close(self._fd)
            self._fd = fd
            held = os.fstat(fd)
        return held.st_size

    def _rotate(self) -> None:
        # Renames, not copies: a reader holding FILE.1 open reads on undisturbed,
        # and rename never follows a link planted at the target's name.
        name, folder = self._name, self._folder
        if self._backups == 0:
            os.unlink(name, dir_fd=folder)
            self.rotations += 1
            return
        # Only the files there are shifted (FILE.1 up to the first gap), so a large
        # `backups` costs nothing until that many files exist; the last rename
        # replaces the oldest.
        there = 0
        while there < self._backups and _exists(f"{name}.{there + 1}", folder):
            there += 1
        for number in range(min(there, self._backups - 1), 0, -1):
            os.rename(
                f"{name}.{number}", f"{name}.{number + 1}", src_dir_fd=folder, dst_dir_fd=folder
            )
        os.rename(name, f"{name}.1", src_dir_fd=folder, dst_dir_fd=folder)
        self.rotations += 1

    def _failed(self, exc: OSError) -> None:
        self.failed += 1
        kind = errno.errorcode.get(exc.errno or 0, type(exc).__name__)
        if kind not in self._errors_told:
            self._errors_told.add(kind)
            log.error(
                "audit log %s cannot be written (%s): its lines are lost until it can; free "
                "its disk or fix the file (each kind of error is logged once, all are counted)",
                self.path,
                exc.strerror or exc,
            )

    def _close_fds(self) -> None:
        for name in ("_fd", "_lock", "_folder"):
            fd = getattr(self, name, None)
            if fd is not None:
                setattr(self, name, None)
                os.close(fd)


def _left(deadline: float | None) -> float | None:
    return None if deadline is None else max(0.0, deadline - time.monotonic())


def _encode(line: dict[str, Any]) -> bytes:
    # ASCII only, so no newline, NUL or stray byte can ever sit inside a line.
    text = json.dumps(line, ensure_ascii=True, separators=(",", ":"), allow_nan=False)
    return text.encode("ascii") + b"\n"


def _append(fd: int, line: bytes, size: int) -> None:
    """Appends ``line`` whole, or leaves the file at ``size``. The caller holds the lock."""
    view = memoryview(line)
    try:
        while view:
            written = os.write(fd, view)
            if written == 0:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            view = view[written:]
    except OSError:
        if len(view) < len(line):
            # Half a line would run into the next one, and no reader could parse
            # either: take it back.
            with contextlib.suppress(OSError):
                os.ftruncate(fd, size)
        raise


def _exists(name: str, folder: int) -> bool:
    try:
        os.stat(name, dir_fd=folder, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def _open_file(name: str, folder: int, flags: int = 0) -> int:
    fd = os.open(name, _FILE_FLAGS | flags, 0o600, dir_fd=folder)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file")
    return fd


def _open_folder(path: str, folder: str) -> int:
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise ConfigurationError(
            f"audit log {path}: its folder {folder} does not exist: make it first, or give "
            "a path in a folder that does"
        ) from None
    except OSError as exc:
        raise ConfigurationError(
            f"audit log {path}: cannot open its folder {folder} ({exc.strerror}): give a "
            "path in a folder this server's user may write"
        ) from None
    if not os.access(folder, os.W_OK | os.X_OK):
        os.close(fd)
        raise ConfigurationError(
            f"audit log {path}: its folder {folder} is not writable, and the log makes its "
            "lock and rotated files there: give a folder this server's user may write"
        )
    return fd


def _open_checked(path: str, name: str, folder: int, flags: int = 0) -> int:
    """``_open_file``, its errors told as what to change."""
    try:
        return _open_file(name, folder, flags)
    except OSError as exc:
        shown = os.path.join(os.path.dirname(path), name)
        if exc.errno == errno.ELOOP:
            why = "is a symbolic link, which the audit log never follows: give the file's own path"
        elif exc.errno in (errno.EINVAL, errno.ENXIO, errno.EISDIR):
            why = "is not a regular file: give the path of a file, or of none yet"
        elif exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            why = f"cannot be written ({exc.strerror}): give a path this server's user may write"
        else:
            why = f"cannot be opened ({exc.strerror}): give another path"
        raise ConfigurationError(f"audit log {shown} {why}") from None
