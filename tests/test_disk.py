"""Disk space as a budget in the library (``_disk``): checkpoints, forks' copies and
restores refuse with ``DiskSpaceError`` before writing what would not fit, and copies keep
a sparse file's holes. Real kernels; the copy itself without one."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from kernelexec import AsyncSession, DiskSpaceError
from kernelexec._workdir import copy

TERABYTE = "with open('huge', 'wb') as f: f.truncate(2**40)"


def test_a_copy_keeps_holes_and_refuses_a_file_over_its_budget(tmp_path: Path) -> None:
    source, target = tmp_path / "a", tmp_path / "b"
    source.mkdir()
    target.mkdir()
    with open(source / "sparse", "wb") as f:
        f.seek(8 << 20)
        f.write(b"end")
        f.truncate(64 << 20)
    assert copy(source, "sparse", target) == 64 << 20
    copied = target / "sparse"
    assert copied.stat().st_size == 64 << 20
    assert copied.stat().st_blocks * 512 < 1 << 20  # the data, not the holes
    with open(copied, "rb") as f:
        f.seek(8 << 20)
        assert f.read(4) == b"end\0"
    with pytest.raises(DiskSpaceError, match="more than the 1,000 left"):
        copy(source, "sparse", target, "again", max_bytes=1000)
    assert not (target / "again").exists()


async def test_a_checkpoint_over_max_bytes_is_refused_and_leaves_nothing(tmp_path: Path) -> None:
    async with AsyncSession(tmp_path / "work", timeout=60) as session:
        await session.execute("big = b'x' * 2_000_000\nsmall = 1")
        with pytest.raises(DiskSpaceError, match=r"variable 'big' .* did not fit"):
            await session.checkpoint(tmp_path / "cp", files=False, max_bytes=1_000_000)
        assert not (tmp_path / "cp").exists()
        assert list((tmp_path / "work").glob(".kernelexec-*")) == []
        saved = await session.checkpoint(tmp_path / "cp", files=False, max_bytes=3_000_000)
        assert sorted(v.name for v in saved.variables) == ["big", "small"]
        assert (await session.execute("len(big)")).text == "2000000\n"


async def test_a_sparse_terabyte_is_refused_by_checkpoint_and_fork_before_writing(
    tmp_path: Path,
) -> None:
    async with AsyncSession(tmp_path / "work", timeout=60) as session:
        await session.execute(TERABYTE)
        started = time.monotonic()
        # No budget given: the disk's own room refuses it.
        with pytest.raises(DiskSpaceError, match=r"1\.0 TiB, but the disk holding"):
            await session.checkpoint(tmp_path / "cp")
        with pytest.raises(DiskSpaceError, match=r"1\.0 TiB, over its budget"):
            await session.fork(tmp_path / "fork", max_bytes=10 << 20)
        assert time.monotonic() - started < 10
        assert not (tmp_path / "cp").exists()
        assert os.listdir(tmp_path / "fork") == []
        assert (await session.execute("1 + 1")).text == "2\n"  # the session is unchanged
