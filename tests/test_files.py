"""The server's path confinement, unit by unit (the HTTP side is in test_server.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from kernelexec._server._errors import ApiError
from kernelexec._server._files import list_files, resolve_inside, write_file


@pytest.fixture
def root(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    (work / "sub").mkdir(parents=True)
    (work / "sub" / "a.txt").write_text("a")
    (tmp_path / "secret").write_text("s")
    (work / "out").symlink_to(tmp_path)
    (work / "in").symlink_to(work / "sub")
    return work.resolve()


@pytest.mark.parametrize(
    "raw",
    [
        "",
        "..",
        "../secret",
        "sub/../../secret",
        "/etc/passwd",
        "C:/x",
        "a\\b",
        "a\0b",
        "%2e%2e/secret",
        "%252e%252e/secret",
        "%25252E%25252E/secret",
        "%2fetc",
        "sub/%2e%2e/..",
    ],
)
def test_unsafe_paths_are_refused(root: Path, raw: str) -> None:
    with pytest.raises(ApiError) as refused:
        resolve_inside(root, raw)
    assert refused.value.status == 400 and refused.value.code == "invalid_path"


@pytest.mark.parametrize("raw", ["out/secret", "out", "out/work/../secret"])
def test_symlinks_leading_out_are_refused(root: Path, raw: str) -> None:
    with pytest.raises(ApiError) as refused:
        resolve_inside(root, raw)
    assert refused.value.status in (400, 403)


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("sub/a.txt", "sub/a.txt"),
        ("in/a.txt", "sub/a.txt"),
        ("./sub/a.txt", "sub/a.txt"),
        ("50%.csv", "50%.csv"),
        ("a..b", "a..b"),
        ("new/dir/file", "new/dir/file"),
    ],
)
def test_safe_paths_resolve_inside(root: Path, raw: str, expected: str) -> None:
    assert resolve_inside(root, raw) == root / expected


async def chunks(*parts: bytes) -> AsyncIterator[bytes]:
    for part in parts:
        await asyncio.sleep(0)
        yield part


async def test_upload_is_whole_or_nothing(root: Path) -> None:
    info = await write_file(root, "new/f.bin", chunks(b"ab", b"cd"))
    assert (info.path, info.size) == ("new/f.bin", 4)
    assert (root / "new/f.bin").read_bytes() == b"abcd"

    async def failing() -> AsyncIterator[bytes]:
        yield b"partial"
        raise ApiError(413, "body_too_large", "too big")

    with pytest.raises(ApiError):
        await write_file(root, "new/f.bin", failing())
    assert (root / "new/f.bin").read_bytes() == b"abcd"
    assert [p.name for p in (root / "new").iterdir()] == ["f.bin"]  # no partial file left


async def test_listing_skips_links_that_leave(root: Path) -> None:
    files, truncated = await list_files(root)
    assert [f.path for f in files] == ["sub/a.txt"] and not truncated
