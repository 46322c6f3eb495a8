"""Landlock: the files a contained kernel may read and write, enforced by Linux.

Loaded by ``contain.py`` inside the kernel's process (standard library only).
A ruleset names, for each allowed directory or file, what may be done beneath
it; everything else of the handled rights is refused (``EACCES``, or
``EXDEV`` for a link or rename that would carry a file to more rights). Rules
are held by inodes, not names: a symbolic link, a hard link or ``..`` reaches
only what the target's own place in the tree allows, and a directory keeps
its rule where it is renamed to. A process can only add restrictions to its
own, never lift them, and its children and threads made later inherit them.

ABI levels (``landlock_create_ruleset``'s version): 1 (Linux 5.13) files,
2 moving files between directories (``REFER``), 3 ``truncate`` (6.2), 4 TCP
ports (6.7), 5 device ioctls (6.10), 6 scopes: abstract Unix sockets and
signals to processes outside the domain (6.12). Containment needs 3; what a
lower level cannot refuse is listed by ``missing``.
"""

from __future__ import annotations

import ctypes
import os
import stat
import sys
from collections.abc import Iterable

MINIMUM_ABI = 3  # below it, truncate(2) of any file stays allowed

_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446  # the same on every architecture
_VERSION = 1  # landlock_create_ruleset's flag: the ABI level
_RULE_PATH_BENEATH = 1

EXECUTE = 1 << 0
WRITE_FILE = 1 << 1
READ_FILE = 1 << 2
READ_DIR = 1 << 3
REMOVE_DIR = 1 << 4
REMOVE_FILE = 1 << 5
MAKE_CHAR = 1 << 6
MAKE_DIR = 1 << 7
MAKE_REG = 1 << 8
MAKE_SOCK = 1 << 9
MAKE_FIFO = 1 << 10
MAKE_BLOCK = 1 << 11
MAKE_SYM = 1 << 12
REFER = 1 << 13  # ABI 2
TRUNCATE = 1 << 14  # ABI 3
IOCTL_DEV = 1 << 15  # ABI 5
_FILE_ONLY = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV
_SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # ABI 6
_SCOPE_SIGNAL = 1 << 1  # ABI 6

READ = EXECUTE | READ_FILE | READ_DIR
WRITE = (
    READ
    | WRITE_FILE
    | REMOVE_DIR
    | REMOVE_FILE
    | MAKE_DIR
    | MAKE_REG
    | MAKE_SOCK
    | MAKE_FIFO
    | MAKE_SYM
    | REFER
    | TRUNCATE
)
DEVICE = READ_FILE | WRITE_FILE | TRUNCATE | IOCTL_DEV  # /dev/null, a terminal
# Its own threads' names (/proc/<pid>/task/<tid>/comm): NVIDIA's driver library
# names its threads with fopen(..., "wb") and fails cuInit (error 304) if refused.
THREAD_NAMES = READ_FILE | WRITE_FILE | TRUNCATE
_ALL_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 4: (1 << 15) - 1}


class LandlockError(OSError):
    """A ruleset could not be made or applied."""


def abi() -> int:
    """The running Linux's Landlock ABI level; 0 where there is none (or it is off)."""
    global _ABI
    libc = _libc()
    if _ABI is None and libc is not None:
        version = ctypes.c_uint32(_VERSION)
        _ABI = max(int(libc.syscall(_CREATE_RULESET, None, ctypes.c_size_t(0), version)), 0)
    return _ABI or 0


def missing(level: int) -> list[str]:
    """What a ruleset at ABI ``level`` cannot refuse, in words (empty from 6 on)."""
    gaps = []
    if level < 5:
        gaps.append("ioctl(2) on devices the kernel may open (Landlock ABI 5, Linux 6.10)")
    if level < 6:
        gaps.append(
            "signals to processes of the kernel's own process group and abstract Unix "
            "sockets (Landlock ABI 6, Linux 6.12)"
        )
    return gaps


def restrict(rules: Iterable[tuple[str | int, int]]) -> int:
    """Confines this thread (and what it starts later) to ``rules``; the ABI level used.

    Each rule is a path (or a descriptor of one, opened with ``O_PATH`` and
    left open) and what may be done beneath it: ``READ`` (execute, read,
    list), ``WRITE`` (all but making device nodes), ``DEVICE`` (read, write,
    ioctl). A path that does not exist is left out. Scopes (ABI 6): no
    abstract Unix socket made outside the domain is reachable, and no process
    outside it can be signalled.

    Raises:
        LandlockError: no Landlock, an ABI below ``MINIMUM_ABI``, or a call failed.
    """
    level = abi()
    if level < MINIMUM_ABI:
        raise LandlockError(
            0,
            f"Landlock ABI {level} is below {MINIMUM_ABI} (Linux 6.2)" if level else "no Landlock",
        )
    handled = _ALL_BY_ABI.get(level, (1 << 16) - 1)
    # struct landlock_ruleset_attr {u64 handled_access_fs, handled_access_net, scoped}:
    # a shorter struct for an older ABI (it refuses fields it does not know).
    scoped = _SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL if level >= 6 else 0
    fields = [handled] + ([0] if level >= 4 else []) + ([scoped] if level >= 6 else [])
    attr = (ctypes.c_uint64 * len(fields))(*fields)
    libc = _libc()
    assert libc is not None  # abi() found one
    ruleset = int(libc.syscall(_CREATE_RULESET, attr, ctypes.c_size_t(8 * len(fields)), 0))
    if ruleset < 0:
        raise _error("landlock_create_ruleset")
    try:
        for target, access in rules:
            _add(libc, ruleset, target, access & handled)
        if libc.syscall(_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0)) != 0:
            raise _error("landlock_restrict_self")
    finally:
        os.close(ruleset)
    return level


def _add(libc: ctypes.CDLL, ruleset: int, target: str | int, access: int) -> None:
    owned = not isinstance(target, int)
    if isinstance(target, int):
        fd = target
    else:
        try:
            fd = os.open(target, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            return  # not on this machine
    try:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            access &= _FILE_ONLY  # a file's rule takes no directory rights
        # struct landlock_path_beneath_attr {u64 allowed_access; s32 parent_fd} (packed)
        rule = ctypes.create_string_buffer(
            access.to_bytes(8, sys.byteorder) + fd.to_bytes(4, sys.byteorder, signed=True)
        )
        if libc.syscall(_ADD_RULE, ctypes.c_int(ruleset), _RULE_PATH_BENEATH, rule, 0) != 0:
            raise _error(f"landlock_add_rule for {target}")
    finally:
        if owned:
            os.close(fd)


def _error(what: str) -> LandlockError:
    number = ctypes.get_errno()
    return LandlockError(number, f"{what}: {os.strerror(number)}")


_LIBC: ctypes.CDLL | None = None
_ABI: int | None = None


def _libc() -> ctypes.CDLL | None:
    global _LIBC
    if _LIBC is None:
        try:
            _LIBC = ctypes.CDLL(None, use_errno=True)
        except OSError:
            return None
    return _LIBC
