"""The zygote's memory, offered to Linux's same-page merging (KSM) where asked.

Loaded by ``zygote.py`` (standard library only). A kernel forked from the
zygote copies each of the zygote's pages it writes, and CPython 3.11 writes a
page by running at all (reference counts, the inline caches of code that
runs): 16 MB of copies in an idle data-stack kernel. Compared page by page
with the zygote's and a sibling kernel's, 4.6 MB of them were identical to
the zygote's page again (counts that went up and back down) and 7.3 MB more
identical to the sibling's (the same start makes the same writes); 4.2 MB
were the kernel's own. KSM merges identical pages of memory marked
``MADV_MERGEABLE`` into one, copy-on-write. The mark is a flag of a mapping,
which a fork copies: every kernel forked from a marked zygote offers the
memory it inherited, and nothing it maps later.

Only where ``KERNELEXEC_SHARE_PAGES=1`` asks (``_environment.share_pages``),
and it does something only where the machine runs KSM
(``/sys/kernel/mm/ksm/run``, which root sets): a process whose page is merged
with another's can tell, by how long a write to it takes, that some process
holds a page identical to one it made (the side channel of memory
deduplication). For the kernels of one user or team, not across tenants.
"""

from __future__ import annotations

import contextlib
import ctypes
from typing import Any

_MADV_MERGEABLE, _MADV_UNMERGEABLE = 12, 13
_NOT_MEMORY = ("[stack]", "[vvar]", "[vvar_vclock]", "[vdso]", "[vsyscall]")
_marked: list[tuple[int, int]] = []  # the ranges marked, which every fork inherits


def mark_mergeable(maps: str = "/proc/self/maps") -> int:
    """Marks this process's private writable mappings mergeable; returns the bytes marked.

    Private writable mappings hold every page a fork can come to copy: the
    heap, the allocators' anonymous arenas, and the data of the loaded
    libraries (libpython's static type objects are written by every count).
    Linux refuses the mark where KSM cannot merge (shared, special or huge
    mappings); those are left as they are.
    """
    madvise = _madvise()
    with contextlib.suppress(OSError), open(maps) as lines:
        for line in lines:
            fields = line.split()
            if fields[1] != "rw-p" or (len(fields) > 5 and fields[5] in _NOT_MEMORY):
                continue
            start, end = (int(bound, 16) for bound in fields[0].split("-"))
            if madvise(start, end - start, _MADV_MERGEABLE) == 0:
                _marked.append((start, end))
    return sum(end - start for start, end in _marked)


def unmark() -> None:
    """Takes the mark off what this fork inherited, in a process that writes little of it.

    A kernel's supervisor and its namespace's init copy some 1.4 MB each of
    the 90 MB they map from the zygote; KSM would read all of it, again and
    again, and keep 64 bytes of bookkeeping per page it reads, to merge that.
    """
    madvise = _madvise()
    for start, end in _marked:
        madvise(start, end - start, _MADV_UNMERGEABLE)
    _marked.clear()


def _madvise() -> Any:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    libc.madvise.restype = ctypes.c_int
    return libc.madvise
