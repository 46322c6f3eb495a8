"""Whether anyone else has a file open, asked of the OS: a write lease (Linux).

``fcntl(F_SETLEASE, F_WRLCK)`` is granted only while no other open file
description (in this process or another) refers to the file, and while it is
held, an open by anyone else waits until it is let go (or fails, if that open
is non-blocking). So a file written under the lease is never read half
written by someone who had it open, nor by someone who opens it meanwhile.

Linux counts the files opened for reading only where it is built with IMA
(``i_readcount``); elsewhere a lease is granted with readers present, and it
would say nothing. So each process asks once, on a file of its own with a
reader on it, whether the lease sees readers (``_sees_readers``); where it
does not, or where a file system has no leases (some network and overlay
file systems; ``fs.leases-enable=0``), the answer is "cannot tell" and the
caller decides as it did without one.

A lease broken by someone's open is signalled to its holder: ``SIGURG`` here,
which is ignored unless a handler is set (the default, ``SIGIO``, would end
this process). A kernel that opens the file to break a lease gets only that.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import signal
import tempfile
from collections.abc import Iterator

__all__ = ["alone"]

_SETLEASE = getattr(fcntl, "F_SETLEASE", 1024)  # linux/fcntl.h
_SETSIG = getattr(fcntl, "F_SETSIG", 10)
_BREAK_SIGNAL = getattr(signal, "SIGURG", 0)
_seen: bool | None = None  # whether a lease sees readers, in this process: asked once


@contextlib.contextmanager
def alone(fd: int) -> Iterator[bool | None]:
    """Whether no one else has ``fd``'s file open, held so while inside the block.

    ``fd`` must be open for writing. Yields True (nobody: the lease is held
    until the block ends), False (someone has it open), or None where the OS
    cannot tell.
    """
    if not _sees_readers():
        yield None
        return
    try:
        fcntl.fcntl(fd, _SETSIG, _BREAK_SIGNAL)
        fcntl.fcntl(fd, _SETLEASE, fcntl.F_WRLCK)
    except OSError as exc:
        refused: bool | None = False if exc.errno in (errno.EAGAIN, errno.EBUSY) else None
    else:
        try:
            yield True
        finally:
            with contextlib.suppress(OSError):
                fcntl.fcntl(fd, _SETLEASE, fcntl.F_UNLCK)
        return
    yield refused  # out of the except clause: the block's own errors are not chained to it


def _sees_readers() -> bool:
    global _seen
    if _seen is None:
        _seen = _ask_once()
    return _seen


def _ask_once() -> bool:
    """A lease on a file of this process's: granted alone, refused with a reader on it."""
    if not hasattr(os, "O_TMPFILE"):
        return False  # not Linux
    try:
        with tempfile.TemporaryFile() as own:  # no name: nobody else can open it
            fd = own.fileno()
            fcntl.fcntl(fd, _SETLEASE, fcntl.F_WRLCK)
            fcntl.fcntl(fd, _SETLEASE, fcntl.F_UNLCK)
            reader = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_CLOEXEC)
            try:
                fcntl.fcntl(fd, _SETLEASE, fcntl.F_WRLCK)
            except OSError as exc:
                return exc.errno == errno.EAGAIN  # refused: the reader was seen
            finally:
                os.close(reader)
            fcntl.fcntl(fd, _SETLEASE, fcntl.F_UNLCK)
            return False  # granted with a reader on it: readers are not counted
    except OSError:
        return False
