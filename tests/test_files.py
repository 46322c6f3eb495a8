"""Files in a work dir, opened with no link followed (``_workdir``), and the server's
file functions on top (the HTTP side is in test_server.py and test_hostile_files.py)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from kernelexec import AsyncSession, FileInfo, FileRefusedError, Session, _workdir
from kernelexec._server._errors import ApiError
from kernelexec._server._files import list_files, write_file
from kernelexec._session._files import LocalAccess
from kernelexec._session._transcript import Transcript, code_cell


@pytest.fixture
def root(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    (work / "sub").mkdir(parents=True)
    (work / "sub" / "a.txt").write_text("a")
    (tmp_path / "secret").write_text("s")
    (work / "out").symlink_to(tmp_path)
    (work / "in").symlink_to(work / "sub")
    (work / "in.txt").symlink_to(work / "sub" / "a.txt")
    return work.resolve()


@pytest.mark.parametrize(
    "raw, reason",
    [
        ("", "invalid"),
        ("..", "invalid"),
        ("../secret", "invalid"),
        ("sub/../../secret", "invalid"),
        ("/etc/passwd", "invalid"),
        ("a\0b", "invalid"),
        pytest.param("x" * 256, "too_long", id="long-name"),
        pytest.param("/".join(["y"] * 2100), "too_long", id="long-path"),
        ("\ud800", "invalid"),
    ],
)
def test_unsafe_paths_are_refused(root: Path, raw: str, reason: str) -> None:
    with pytest.raises(_workdir.Refused) as refused:
        _workdir.open_read(root, raw)
    assert refused.value.reason == reason and str(refused.value)


@pytest.mark.parametrize("raw", ["out/secret", "out", "in/a.txt", "in.txt", "in"])
def test_a_link_is_never_followed_wherever_it_points(root: Path, raw: str) -> None:
    with pytest.raises(_workdir.Refused) as refused:
        _workdir.open_read(root, raw)
    assert refused.value.reason == "link"
    assert "symlink" in str(refused.value)


@pytest.mark.parametrize(
    "raw, reason",
    [("missing.txt", "missing"), ("sub", "not_a_file"), ("sub/a.txt/x", "not_a_folder")],
)
def test_what_is_not_a_file_is_refused(root: Path, raw: str, reason: str) -> None:
    with pytest.raises(_workdir.Refused) as refused:
        _workdir.open_read(root, raw)
    assert refused.value.reason == reason


def test_a_fifo_is_refused_at_once(root: Path) -> None:
    os.mkfifo(root / "pipe")  # opening it for reading would block without O_NONBLOCK
    with pytest.raises(_workdir.Refused) as refused:
        _workdir.open_read(root, "pipe")
    assert refused.value.reason == "not_a_file"


def test_a_work_dir_replaced_by_a_link_is_refused(tmp_path: Path, root: Path) -> None:
    moved = tmp_path / "moved"
    root.rename(moved)
    root.symlink_to(moved)
    with pytest.raises(_workdir.Refused):
        _workdir.open_read(root, "sub/a.txt")
    with pytest.raises(_workdir.Refused):
        _workdir.write(root, "outputs/x.txt", b"x")


def test_own_files_replace_a_planted_link_and_never_write_through_it(
    tmp_path: Path, root: Path
) -> None:
    (root / "outputs").mkdir()
    (root / "outputs" / "0001-1.png").symlink_to(tmp_path / "target.png")
    assert _workdir.write(root, "outputs/0001-1.png", b"png") is None
    assert not (tmp_path / "target.png").exists()
    assert not (root / "outputs" / "0001-1.png").is_symlink()
    assert (root / "outputs" / "0001-1.png").read_bytes() == b"png"


def test_a_folder_in_the_way_is_moved_aside_and_said_so(root: Path) -> None:
    (root / "outputs" / "0002-1.png").mkdir(parents=True)
    (root / "outputs" / "0002-1.png" / "theirs").write_text("kept")
    note = _workdir.write(root, "outputs/0002-1.png", b"png")
    assert note is not None and "moved to outputs/0002-1.png.moved-" in note
    assert (root / "outputs" / "0002-1.png").read_bytes() == b"png"
    [aside] = [p for p in (root / "outputs").iterdir() if ".moved-" in p.name]
    assert (aside / "theirs").read_text() == "kept"  # nothing the session made is lost


@pytest.mark.parametrize("planted", ["link", "file"])
def test_outputs_that_is_not_a_folder_is_moved_aside(
    tmp_path: Path, root: Path, planted: str
) -> None:
    if planted == "link":
        (tmp_path / "elsewhere").mkdir()
        (root / "outputs").symlink_to(tmp_path / "elsewhere")
    else:
        (root / "outputs").write_text("theirs")
    spill, note = _workdir.create(root, "outputs/0003-output.txt")
    with spill:
        spill.write(b"flood")
    assert note is not None and "outputs.moved-" in note
    assert (root / "outputs" / "0003-output.txt").read_bytes() == b"flood"
    assert (root / "outputs").is_dir() and not (root / "outputs").is_symlink()
    if planted == "link":
        assert list((tmp_path / "elsewhere").iterdir()) == []


def test_a_spill_keeps_writing_its_own_file_whatever_the_kernel_does_to_the_name(
    tmp_path: Path, root: Path
) -> None:
    spill, _ = _workdir.create(root, "outputs/0004-output.txt")
    with spill:
        spill.write(b"first ")
        (root / "outputs" / "0004-output.txt").rename(root / "stolen.txt")
        (root / "outputs" / "0004-output.txt").symlink_to(tmp_path / "target.txt")
        spill.write(b"second")
    assert (root / "stolen.txt").read_bytes() == b"first second"
    assert not (tmp_path / "target.txt").exists()


def _open_under(root: Path) -> list[str]:
    """This process's descriptors open on ``root`` or anything in it."""
    found = []
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # closed since the listing
            target = os.readlink(f"/proc/self/fd/{name}")
            if target == str(root) or target.startswith(f"{root}/"):
                found.append(target)
    return found


def test_a_listing_walks_deep_chains_skips_links_and_says_so(root: Path) -> None:
    fd = os.open(root, os.O_RDONLY)
    for _ in range(1200):
        os.mkdir("d", dir_fd=fd)
        fd, parent = os.open("d", os.O_RDONLY, dir_fd=fd), fd
        os.close(parent)
    os.close(os.open("deep.txt", os.O_WRONLY | os.O_CREAT, dir_fd=fd))
    os.close(fd)
    (root / "loop").symlink_to("loop")
    os.mkfifo(root / "pipe")
    try:
        listing = _workdir.list_tree(root)
        # Every handle closed: none left open on the tree. (Not a count of this process's
        # descriptors: another thread of the test process may open or close one meanwhile.)
        assert _open_under(root) == []
        deep = "/".join(["d"] * 1200 + ["deep.txt"])
        assert [f.path for f in listing.files] == [deep, "sub/a.txt"]
        assert not listing.truncated
        assert listing.skipped == [
            "symlinks, never followed: 4",
            "neither files nor folders (pipes, sockets): 1",
        ]
        assert _workdir.open_read(root, deep).read() == b""
    finally:
        _workdir.remove_tree(root / "d")  # pytest's own clean-up would recurse 1,200 deep


def test_a_wide_deep_tree_holds_few_handles(root: Path) -> None:
    # Every level has a second folder still to visit, so each level's handle
    # would be held; past max_open they are closed and reopened when needed.
    fd = os.open(root, os.O_RDONLY)
    for _ in range(100):
        os.mkdir("s", dir_fd=fd)
        os.mkdir("t", dir_fd=fd)
        os.close(os.open("t/f", os.O_WRONLY | os.O_CREAT, dir_fd=fd))
        fd, parent = os.open("s", os.O_RDONLY, dir_fd=fd), fd
        os.close(parent)
    os.close(fd)
    listing = _workdir.list_tree(root, max_open=8)
    assert len([f for f in listing.files if f.path.endswith("t/f")]) == 100


def test_a_listing_stops_at_its_limits(root: Path) -> None:
    for i in range(30):
        (root / f"f{i:02d}").write_text("x")
    assert _workdir.list_tree(root, max_files=10).truncated
    assert len(_workdir.list_tree(root, max_files=10).files) == 10
    assert _workdir.list_tree(root, max_entries=10).truncated


async def chunks(*parts: bytes) -> AsyncIterator[bytes]:
    for part in parts:
        await asyncio.sleep(0)
        yield part


async def test_upload_is_whole_or_nothing(root: Path) -> None:
    info = await write_file(LocalAccess(root), root, "new/f.bin", chunks(b"ab", b"cd"))
    assert (info.path, info.size) == ("new/f.bin", 4)
    assert (root / "new/f.bin").read_bytes() == b"abcd"

    async def failing() -> AsyncIterator[bytes]:
        yield b"partial"
        raise ApiError(413, "body_too_large", "too big")

    with pytest.raises(ApiError):
        await write_file(LocalAccess(root), root, "new/f.bin", failing())
    assert (root / "new/f.bin").read_bytes() == b"abcd"
    assert [p.name for p in (root / "new").iterdir()] == ["f.bin"]  # no partial file left


@pytest.mark.parametrize(
    "raw, status",
    [("out/x", 403), ("in.txt", 403), ("sub", 409), ("sub/a.txt/x", 409), ("x" * 300, 409)],
)
async def test_upload_refuses_links_and_folders(root: Path, raw: str, status: int) -> None:
    with pytest.raises(ApiError) as refused:
        await write_file(LocalAccess(root), root, raw, chunks(b"x"))
    assert refused.value.status == status
    assert (root / "sub" / "a.txt").read_text() == "a"
    assert not [p for p in root.rglob("*.tmp")]


async def test_upload_over_the_transcript_is_refused(root: Path) -> None:
    with pytest.raises(ApiError) as refused:
        await write_file(
            LocalAccess(root),
            root,
            "transcript.ipynb",
            chunks(b"{}"),
            notebook=root / "transcript.ipynb",
        )
    assert refused.value.status == 409 and "transcript" in refused.value.message


async def test_listing_skips_links_and_says_so(root: Path) -> None:
    files, truncated, skipped = await list_files(LocalAccess(root))
    assert [f.path for f in files] == ["sub/a.txt"] and not truncated
    assert skipped == ["symlinks, never followed: 3"]


async def test_the_transcript_replaces_a_link_at_its_name(tmp_path: Path, root: Path) -> None:
    outside = tmp_path / "host.ipynb"
    outside.write_text('{"cells": [{"cell_type": "code", "source": "SECRET"}], "metadata": {}}')
    transcript = Transcript(root / "transcript.ipynb", work_dir=root)
    now = time.time()
    cell = code_cell(
        "x = 1", [], execution_count=1, started=now, finished=now, kernelexec={}, failed=False
    )
    transcript.add(cell)
    await transcript.flush()
    (root / "transcript.ipynb").unlink()
    (root / "transcript.ipynb").symlink_to(outside)
    transcript.add({**cell, "source": "y = 2"})
    await transcript.flush()
    written = (root / "transcript.ipynb").read_text()
    assert "y = 2" in written and "SECRET" not in written
    assert not (root / "transcript.ipynb").is_symlink()
    assert outside.read_text().count("SECRET") == 1
    assert [p.name for p in root.iterdir() if ".broken-" in p.name]  # the link, moved aside


async def test_a_sessions_files_api_lists_downloads_and_uploads_and_refuses_links(
    tmp_path: Path,
) -> None:
    async with AsyncSession(tmp_path / "w") as session:
        await session.execute(
            "import os\nos.makedirs('a', exist_ok=True)\n"
            "open('a/b.txt', 'w').write('from the kernel')\nos.symlink('/etc/passwd', 'leak')"
        )
        listed = {f.path: f for f in await session.files()}
        assert isinstance(listed["a/b.txt"], FileInfo) and listed["a/b.txt"].size == 15
        assert "leak" not in listed and "transcript.ipynb" in listed
        assert await session.download("a/b.txt") == b"from the kernel"
        sent = await session.upload("in/data.csv", "x,y\n1,2\n")
        assert (sent.path, sent.size) == ("in/data.csv", 8)
        seen = await session.execute("print(open('in/data.csv').read(), end='')")
        assert seen.stdout == "x,y\n1,2\n"
        for path, reason in (("leak", "link"), ("../x", "invalid"), ("nope", "missing")):
            with pytest.raises(FileRefusedError) as refused:
                await session.download(path)
            assert refused.value.reason == reason, refused.value
        with pytest.raises(FileRefusedError) as reserved:
            await session.upload("transcript.ipynb", b"{}")
        assert reserved.value.reason == "reserved"
        with pytest.raises(FileRefusedError):
            await session.upload("leak", b"through the link?")
    assert not (tmp_path / "w" / "leak").resolve().read_bytes().startswith(b"through")


def test_the_sync_facade_has_the_files_api_too(tmp_path: Path) -> None:
    with Session(tmp_path / "s") as session:
        session.upload("hello.txt", b"hi")
        assert session.execute("print(open('hello.txt').read())").stdout == "hi\n"
        assert [f.path for f in session.files()] == ["hello.txt", "transcript.ipynb"]
        assert session.download("hello.txt") == b"hi"
