"""Disk is a budget: a real server whose work root is a small file system of its own (tmpfs).

A suspend on a nearly full disk keeps the session running with every variable; a
resume, a checkpoint or an upload on a full disk is HTTP 507, never 500; a sparse
terabyte is refused before anything is written, and a sparse file within the budget is
copied sparsely. Free space is measured with ``os.statvfs`` on that file system alone,
so other processes on the machine do not move it.

Mounting needs root: outside CI a non-root run skips; CI runs as root, where a skip
would fail the run.
"""

from __future__ import annotations

import errno
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from _serverproc import ServerProcess, wait_for
from servers import IN_CI

MIB = 1024 * 1024


@pytest.fixture
def small_disk(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Path]:
    """A tmpfs of ``request.param`` MiB (default 16) mounted for the test."""
    if os.geteuid() != 0 and not IN_CI:
        pytest.skip("mounting a small tmpfs needs root (CI runs as root)")
    size = getattr(request, "param", 16)
    mount = tmp_path / "disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}m", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def free(path: Path) -> int:
    stats = os.statvfs(path)
    return stats.f_bavail * stats.f_frsize


def fill(disk: Path, leave: int) -> Path:
    """A file taking all of the disk's free space but ``leave`` bytes (the server writes
    meanwhile, so it stops where the disk does)."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        chunk = b"\0" * (64 * 1024)
        while free(disk) - leave >= len(chunk):
            os.write(fd, chunk)
        if free(disk) > leave:
            os.write(fd, b"\0" * (free(disk) - leave))
    except OSError as exc:
        if exc.errno != errno.ENOSPC:
            raise
    finally:
        os.close(fd)
    return filler


@pytest.mark.parametrize("small_disk", [8], indirect=True)
def test_a_suspend_on_a_nearly_full_disk_keeps_the_session_and_every_variable(
    small_disk: Path,
) -> None:
    server = ServerProcess(small_disk / "work", "--idle-timeout", "1")
    try:
        sid = server.create()
        server.execute(sid, "import os\nbig = b'x' * 16_000_000\nsmall = {'k': 1}")
        pid = server.kernel_pid(sid)
        fill(small_disk, 1 * MIB)
        # Several idle periods: each suspend is tried, finds no room, and keeps the kernel.
        wait_for(lambda: server.log.read_text().count("was not suspended") >= 2, 60)
        time.sleep(1.5)
        result = server.execute(sid, "(len(big), small)")
        assert result["status"] == "ok", result
        assert result["text"] == "(16000000, {'k': 1})\n"
        assert "resumed" not in result and not result["restarted"]
        assert server.kernel_pid(sid) == pid
        log = server.log.read_text()
        assert log.count("was not suspended") >= 2 and "did not fit in the checkpoint" in log
        store = small_disk / "work" / ".checkpoints"
        assert not store.exists() or list(store.iterdir()) == []
        assert list((small_disk / "work" / sid).glob(".kernelexec-*")) == []
    finally:
        assert server.stop() == 0


def test_resume_checkpoint_and_upload_on_a_full_disk_are_507_and_lose_nothing(
    small_disk: Path,
) -> None:
    server = ServerProcess(small_disk / "work", "--idle-timeout", "2")
    try:
        sleeper = server.create()
        server.execute(sleeper, "x = b'y' * 2_000_000")
        assert wait_for(lambda: "checkpoint" in server.state(sleeper).get("message", ""))
        # Made now, so that it is live (resuming needs a little disk, for the kernel's report).
        live = server.create()
        filler = fill(small_disk, 0)
        server.execute(live, "v = 7")
        answers = [
            server.http.post(f"/sessions/{sleeper}/execute", json={"code": "len(x)"}),
            server.http.post(f"/sessions/{live}/checkpoint", json={}),
            server.http.put(f"/sessions/{live}/files/a.bin", content=b"z" * 100_000),
        ]
        for answer in answers:
            assert answer.status_code == 507, answer.text
            assert answer.json()["error"] == "insufficient_storage"
            assert "disk" in answer.json()["message"]
        assert server.state(sleeper)["state"] == "suspended"  # its checkpoint kept
        filler.unlink()
        resumed = server.execute(sleeper, "len(x)")
        assert resumed["text"].endswith("2000000\n") and resumed["resumed"]["restored"] == ["x"]
        assert server.execute(live, "v")["text"] == "7\n"
        assert "Traceback" not in server.log.read_text()
    finally:
        assert server.stop() == 0


@pytest.mark.parametrize("small_disk", [64], indirect=True)
def test_a_sparse_terabyte_is_refused_before_writing_and_a_small_one_is_copied_sparsely(
    small_disk: Path,
) -> None:
    budget = 16
    server = ServerProcess(small_disk / "work", "--session-disk-mb", str(budget))
    try:
        sid = server.create()
        server.execute(sid, "import os\nwith open('huge', 'wb') as f: f.truncate(2**40)")
        before = free(small_disk)
        started = time.monotonic()
        for route in ("checkpoint", "fork"):
            refused = server.http.post(f"/sessions/{sid}/{route}", json={})
            assert refused.status_code == 507, refused.text
            message = refused.json()["message"]
            assert "1.0 TiB" in message and "--session-disk-mb" in message
        assert time.monotonic() - started < 10  # refused, not copied first
        assert before - free(small_disk) < budget * MIB
        assert len(server.http.get("/sessions").json()["sessions"]) == 1
        assert [p.name for p in (small_disk / "work").iterdir() if len(p.name) == 32] == [sid]

        # Within the budget by its length, a sparse file is copied as the holes it is.
        server.execute(
            sid, "os.remove('huge')\nwith open('holes', 'wb') as f: f.truncate(12 << 20)"
        )
        before = free(small_disk)
        fork = server.http.post(f"/sessions/{sid}/fork", json={})
        assert fork.status_code == 201, fork.text
        copy = small_disk / "work" / fork.json()["id"] / "holes"
        assert copy.stat().st_size == 12 << 20 and copy.stat().st_blocks == 0
        checkpoint = server.http.post(f"/sessions/{sid}/checkpoint", json={})
        assert checkpoint.status_code == 201, checkpoint.text
        assert before - free(small_disk) < 1 * MIB
    finally:
        assert server.stop() == 0
