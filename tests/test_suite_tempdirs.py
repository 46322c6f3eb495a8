"""The suite leaves pytest's temp dirs as pytest can remove them (tests/_tempchains.py)."""

from __future__ import annotations

import getpass
import os
import shutil
import subprocess
import sys
from pathlib import Path

from kernelexec._workdir import remove_tree

REPO = Path(__file__).resolve().parents[1]


def make_chain(top: Path, depth: int) -> None:
    """``top``/d/d/.../d, ``depth`` deep, a folder at a time (os.makedirs recurses)."""
    top.mkdir(parents=True)
    fd = os.open(top, os.O_RDONLY)
    for _ in range(depth):
        os.mkdir("d", dir_fd=fd)
        fd, parent = os.open("d", os.O_RDONLY, dir_fd=fd), fd
        os.close(parent)
    os.close(fd)


def test_a_chain_an_interrupted_run_left_does_not_break_the_next_run(tmp_path: Path) -> None:
    # What a run killed in the middle of test_hostile_files.py leaves: a 3,000-deep chain in
    # a temp dir pytest then failed to remove (it renames it garbage-*, and retries each run),
    # and one in an older numbered dir. pytest's clean-up recursed into them and failed.
    temproot = tmp_path / "temproot"
    left = temproot / f"pytest-of-{getpass.getuser()}"
    make_chain(left / "garbage-left" / "work" / "session", 3000)
    make_chain(left / "pytest-1" / "popen-gw0" / "hostile-files0", 1200)
    try:
        run = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-p",
                "no:cacheprovider",
                "tests/test_files.py::test_a_listing_stops_at_its_limits",
            ],
            cwd=REPO,
            env={**os.environ, "PYTEST_DEBUG_TEMPROOT": str(temproot)},
            capture_output=True,
            text=True,
            timeout=240,
        )
        said = run.stdout + run.stderr
        assert run.returncode == 0, said[-3000:]
        assert "RecursionError" not in said, said[-3000:]
        assert "1 passed" in said, said[-3000:]
        # pytest's clean-up removed what it retries each run; the numbered dir it keeps for
        # now (the newest three stay) is cut short enough for it to remove in its turn.
        assert not (left / "garbage-left").exists()
        shutil.rmtree(left / "pytest-1")
    finally:
        remove_tree(temproot)
