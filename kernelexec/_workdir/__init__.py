"""Files in a work dir, opened without ever following a link.

The kernel runs untrusted code and owns its work dir (a Docker kernel's is
bind-mounted from the host): any name there may be a symlink it planted to a
host path, and it can swap a folder for a link between a check and a use. So
nothing here checks a name and then opens it. A path is walked one name at a
time from a handle on the work dir: each folder is opened with
``O_DIRECTORY|O_NOFOLLOW`` relative to the folder before, the file itself with
``O_NOFOLLOW``, so every step happens inside a folder we hold and a link
anywhere fails the open instead of being followed. (``openat2`` with
``RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS`` does the walk in one call, but only on
Linux 5.6+ and through ctypes; our paths have one to three names, so the walk
costs a syscall or two per file, and it works on macOS as well.)

Files kernelexec writes (saved outputs, spills, the transcript) are made under
a random name with ``O_CREAT|O_EXCL|O_NOFOLLOW`` in the folder we hold, then
renamed into place relative to it. A rename replaces a link rather than writing
through it, so a link the kernel planted at such a name is gone and the file is
where the result says, and what the link pointed to is untouched. What a rename
cannot replace (a folder planted at the file's name, a link or a file planted
at ``outputs/``) is moved aside, renamed ``<name>.moved-<hex>`` beside it, and
the caller's note says so: kernelexec's output always lands under its own name,
and nothing the session made is deleted. A link met on the way to a file
someone asked to read or upload is refused instead: that file is not
kernelexec's to repair.

``_open.py`` walks a path and opens what is there; ``_write.py`` makes
kernelexec's own files and copies; ``_lease.py`` asks whether anyone else has a
file open; ``_upload.py`` takes a file someone sends;
``_tree.py`` lists and removes whole trees; ``_reading.py`` reads an opened file
from a coroutine. Callers use this package as one
namespace (``_workdir.open_read``), which is why it re-exports them.
"""

from ._lease import alone
from ._open import Refused, locate, open_folder, open_in, open_read, parts_of, read_kept
from ._reading import Reading
from ._tree import Entry, Listing, list_tree, remove_in, remove_tree
from ._upload import Upload
from ._write import (
    copy,
    copy_data,
    copy_range,
    create,
    exchange,
    own_folder,
    previous_of,
    put_in_place,
    temp_file,
    write,
    write_all,
)

__all__ = [
    "Entry",
    "Listing",
    "Reading",
    "Refused",
    "Upload",
    "alone",
    "copy",
    "copy_data",
    "copy_range",
    "create",
    "exchange",
    "list_tree",
    "locate",
    "open_folder",
    "open_in",
    "open_read",
    "own_folder",
    "parts_of",
    "previous_of",
    "put_in_place",
    "read_kept",
    "remove_in",
    "remove_tree",
    "temp_file",
    "write",
    "write_all",
]
