"""Running a command as the unprivileged user ``nobody``, with this Python within its reach.

Tests run as root in CI, often with Python under root's 0700 home (pyenv's
``/root/.pyenv``, a venv in ``/root/venv``). ``nobody`` cannot reach it there,
so ``as_nobody`` runs the command in a private mount namespace where a tmpfs
over the home shows only the folders this Python needs: a venv's and its base
interpreter's, which are apart (a venv's ``bin/python`` links to the base
interpreter, and its packages are in the venv). Nothing changes outside that
namespace.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

__all__ = ["NOBODY", "as_nobody", "python_trees"]

NOBODY = 65534

# Each tree is bound aside, the home hidden under a tmpfs, then each tree bound
# back at its own path: $1 the home, $2 the folder for the binds, then the trees
# up to "--", then the command.
_SHOW_TREES = """
home=$1 aside=$2; shift 2; trees=()
while [ "$1" != -- ]; do trees+=("$1"); shift; done; shift
for i in "${!trees[@]}"; do
  mkdir -p "$aside/$i" && mount --bind "${trees[$i]}" "$aside/$i" || exit 1
done
mount -t tmpfs -o mode=755 tmpfs "$home" || exit 1
for i in "${!trees[@]}"; do
  mkdir -p "${trees[$i]}" && mount --bind "$aside/$i" "${trees[$i]}" || exit 1
done
exec "$@"
"""


def python_trees(home: Path) -> list[Path]:
    """The top folders under ``home`` holding this Python: its prefix (a venv's) and its
    base interpreter's, links resolved or not."""
    found: dict[Path, None] = {}
    for path in (sys.prefix, sys.base_prefix, sys.executable):
        for spelling in (Path(os.path.abspath(path)), Path(path).resolve()):
            if home in spelling.parents:
                found[home / spelling.relative_to(home).parts[0]] = None
    return list(found)


def as_nobody(argv: list[str], base: Path, become: list[str]) -> list[str]:
    """``argv`` run through ``become`` (a ``setpriv`` line), this Python in reach.

    Args:
        argv: the command.
        base: a folder outside the home for the namespace's bind mounts.
        become: the command that switches to ``nobody``, put before ``argv``.
    """
    home = Path.home()
    if home == Path("/") or home.stat().st_mode & 0o001:
        return [*become, *argv]  # others may pass through the home: nothing to show
    trees = python_trees(home)
    if not trees:
        return [*become, *argv]
    aside = base / "python-trees"
    aside.mkdir(exist_ok=True)
    return [
        *("unshare", "--mount", "--propagation", "private", "bash", "-c", _SHOW_TREES, "bash"),
        *(str(home), str(aside), *map(str, trees), "--", *become, *argv),
    ]
