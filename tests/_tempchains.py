"""Folder chains too deep for pytest's own clean-up of its temp dirs.

Hostile tests have kernels nest folders 1,200 and 3,000 deep. pytest removes
its older temp dirs with ``shutil.rmtree``, which recurses: on such a chain it
raises RecursionError, at exit (pytest 9.0) or as the run's failure (9.1 and
later clean up in ``pytest_sessionfinish``). A chain that an interrupted run
left behind (the test's own clean-up never ran) then breaks every later run on
the machine, whichever tests it runs. So each run ends by removing every chain
deeper than ``DEEPER_THAN`` from pytest's temp dirs that no other live pytest
holds, with kernelexec's ``remove_tree``, which never recurses.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import tempfile
from pathlib import Path

import pytest

from kernelexec._workdir import remove_tree

# Deeper than any tree a test keeps (test_files.py's widest is 100 deep), well short of
# the recursion limit, and short enough to walk by path (PATH_MAX).
DEEPER_THAN = 200


def remove_deep_chains(config: pytest.Config) -> None:
    for top in _unheld_temp_dirs(config):
        level = [top]
        for _ in range(DEEPER_THAN):
            level = [folder for parent in level for folder in _folders(parent)]
        for folder in level:
            remove_tree(folder)


def _unheld_temp_dirs(config: pytest.Config) -> list[Path]:
    """This run's temp dirs, earlier runs', and what pytest failed to remove of them."""
    given = config.option.basetemp
    if given:
        return [Path(given)]
    temproot = Path(os.environ.get("PYTEST_DEBUG_TEMPROOT") or tempfile.gettempdir())
    try:
        user = getpass.getuser()
    except (ImportError, OSError, KeyError):
        user = "unknown"  # as pytest names it then
    root = temproot.resolve() / f"pytest-of-{user}"
    return [folder for folder in _folders(root) if not _held_by_another_run(folder)]


def _folders(parent: Path) -> list[Path]:
    with contextlib.suppress(OSError), os.scandir(parent) as entries:
        return [Path(e.path) for e in entries if e.is_dir(follow_symlinks=False)]
    return []


def _held_by_another_run(folder: Path) -> bool:
    # pytest's lock on a numbered dir holds the pid of the run that made it, until it exits.
    try:
        pid = int((folder / ".lock").read_text())
    except (OSError, ValueError):
        return False
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
