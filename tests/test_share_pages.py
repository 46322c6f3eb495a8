"""Same-page merging: ``KERNELEXEC_SHARE_PAGES=1`` offers a zygote's kernels' memory to KSM.

Real KSM, real kernels: the test turns the machine's KSM on (it needs root, as
an administrator would) for its own duration, scanning fast, and puts the
settings back. A kernel's count of merged pages is Linux's own
(``/proc/PID/ksm_merging_pages``).
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from _pids import kernel_pid
from _serverproc import ServerProcess, descendants
from conftest import warm_zygote

from kernelexec import AsyncSession
from kernelexec._backends import _zygote

KSM = Path("/sys/kernel/mm/ksm")
SETTINGS = ("pages_to_scan", "sleep_millisecs", "run")  # "run" last: put back after the rest


@pytest.fixture
def ksm() -> Iterator[None]:
    """The machine's KSM off at first (the test turns it on), its settings put back after.

    One such test at a time, across pytest-xdist's workers: KSM is the machine's.
    """
    if os.geteuid() != 0 or not (KSM / "run").exists():
        pytest.skip("turning KSM on needs root and a kernel built with it")
    with open(Path(tempfile.gettempdir()) / "kernelexec-tests-ksm.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        saved = {name: (KSM / name).read_text().strip() for name in SETTINGS}
        (KSM / "run").write_text("0")
        try:
            yield
        finally:
            (KSM / "run").write_text("0")
            for name in SETTINGS:
                (KSM / name).write_text(saved[name])


def merged(pid: int) -> int:
    return int(Path(f"/proc/{pid}/ksm_merging_pages").read_text())


def marked_mergeable(pid: int) -> bool:
    """Whether any of the process's mappings is marked mergeable ("mg" in its VmFlags)."""
    smaps = Path(f"/proc/{pid}/smaps").read_text()
    return any(" mg" in line for line in smaps.splitlines() if line.startswith("VmFlags:"))


async def forked_session(path: Path) -> AsyncSession:
    session = AsyncSession(path)
    await session.start()
    assert session._backend.forked, "the zygote was warmed first"  # type: ignore[attr-defined]
    return session


async def test_a_sharing_zygotes_kernels_merge_their_identical_pages(
    ksm: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("KERNELEXEC_ZYGOTE", "1")
    monkeypatch.setattr(_zygote, "_SAID", set())
    monkeypatch.setenv("KERNELEXEC_SHARE_PAGES", "0")
    await asyncio.to_thread(warm_zygote, again=True)
    alone = await forked_session(tmp_path / "alone")

    # Asked while the machine does not merge: said, and the pages marked all the same.
    monkeypatch.setenv("KERNELEXEC_SHARE_PAGES", "1")
    with caplog.at_level(logging.WARNING, logger="kernelexec"):
        await asyncio.to_thread(warm_zygote, again=True)
    assert "KERNELEXEC_SHARE_PAGES=1, but this machine does not merge pages" in caplog.text
    sharing = [await forked_session(tmp_path / f"sharing{i}") for i in range(3)]
    try:
        for i, session in enumerate([alone, *sharing]):
            await session.execute(f"x = {i}\nrows = [str(n) for n in range(10_000)]")
        pids = [await kernel_pid(session) for session in sharing]
        alone_pid = await kernel_pid(alone)
        assert all(marked_mergeable(pid) for pid in pids)
        assert not marked_mergeable(alone_pid)
        # A supervisor writes little of what it maps: KSM would read it all for nothing.
        supervisors = [session._backend._process.pid for session in sharing]  # type: ignore[attr-defined]
        assert not any(marked_mergeable(pid) for pid in supervisors)
        assert [merged(pid) for pid in pids] == [0, 0, 0]

        (KSM / "pages_to_scan").write_text("2000")
        (KSM / "sleep_millisecs").write_text("20")
        (KSM / "run").write_text("1")
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and min(merged(pid) for pid in pids) < 100:
            await asyncio.sleep(0.5)
        counts = [merged(pid) for pid in pids]
        print(f"merged pages per sharing kernel: {counts}")
        assert min(counts) >= 100, counts  # hundreds of pages each, within seconds here
        assert merged(alone_pid) == 0  # never offered, never merged

        # Merged pages are copy-on-write: every kernel's state is its own.
        for i, session in enumerate([alone, *sharing]):
            result = await session.execute("x, len(rows)")
            assert result.text == f"({i}, 10000)\n", result
        await sharing[0].execute("x = 'changed'")
        assert (await sharing[1].execute("x")).text == "2\n"
    finally:
        for session in [alone, *sharing]:
            await session.close()


ATTACK_KSM = """\
import os
said = []
for name, value in (("run", "2"), ("pages_to_scan", "10000"), ("sleep_millisecs", "0")):
    try:
        with open("/sys/kernel/mm/ksm/" + name, "w") as f:
            f.write(value)
        said.append(name + " written")
    except OSError:
        said.append(name + " refused")
print(os.geteuid(), said)
"""


async def test_a_sharing_kernel_cannot_change_the_machines_merging(
    ksm: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Root on the host, uid 0 in its namespace: a contained kernel still may not turn
    # merging off for everyone (run 2 unmerges every page) or make ksmd burn a core.
    monkeypatch.setenv("KERNELEXEC_SHARE_PAGES", "1")
    before = {name: (KSM / name).read_text() for name in SETTINGS}
    async with AsyncSession(tmp_path) as session:
        result = await session.execute(ATTACK_KSM)
    assert result.stdout.strip().endswith(
        "['run refused', 'pages_to_scan refused', 'sleep_millisecs refused']"
    ), result
    assert {name: (KSM / name).read_text() for name in SETTINGS} == before


def test_a_server_with_share_pages_marks_its_forked_kernels(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "work", "--share-pages", "--max-sessions", "64")
    try:
        deadline = time.monotonic() + 90
        marked: list[int] = []
        while not marked and time.monotonic() < deadline:
            # The first kernels start cold while the zygote imports.
            sid = server.create()
            assert server.execute(sid, "1 + 1")["text"] == "2\n"
            # Not the zygote (the server's child, marked itself): its forks, marked by it.
            marked = [
                pid
                for pid in descendants(server.proc.pid)
                if _marked(pid) and _parent(pid) != server.proc.pid
            ]
        assert marked, "no forked kernel of the server was offered to KSM"
    finally:
        assert server.stop() == 0


def _parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError):
        return 0


def _marked(pid: int) -> bool:
    try:
        return marked_mergeable(pid)
    except OSError:
        return False  # gone meanwhile


@pytest.mark.parametrize("how", ["flag", "variable"])
def test_share_pages_is_refused_beside_tenants(tmp_path: Path, how: str) -> None:
    # KSM merges across every process: tenants' kernels would learn of each other's pages.
    tenants = tmp_path / "tenants.toml"
    tenants.write_text("")
    flag = ["--share-pages"] if how == "flag" else []
    env = {**os.environ, "KERNELEXEC_SHARE_PAGES": "1" if how == "variable" else "0"}
    done = subprocess.run(
        [sys.executable, "-m", "kernelexec", "serve", "--tenants", str(tenants), *flag],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 2, done
    assert "not with --tenants" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


# bench/worker.py's wait for merges, on real KSM (the bench turns it on as these tests do).
SETTLE = """\
import asyncio, mmap
from bench.worker import _full_scans, settle_merging

# Something for ksmd to scan (it sleeps while nothing is offered): private, as KSM
# merges no shared mapping.
memory = mmap.mmap(-1, 4 << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
memory.madvise(mmap.MADV_MERGEABLE)
memory.write(b"x" * (4 << 20))
asyncio.run(asyncio.sleep(4))  # a few scans in: the next call comes in the middle of one
before = _full_scans()
asyncio.run(settle_merging([], within=60.0))
print(_full_scans() - before)
"""


def test_the_benchs_settle_waits_for_two_whole_scans(ksm: None) -> None:
    # The shared idle rows of a full run read 13.9 MB of USS where 7.3 MB was
    # right: the settle counted the scan under way when it began as one of its
    # two, and returned after one full scan and part of another.
    # A full scan every 1.5 s: slower than the settle's 1 s check, as a scan is
    # with hundreds of kernels (minutes); a fast one hides the miscount.
    (KSM / "pages_to_scan").write_text("100000")
    (KSM / "sleep_millisecs").write_text("1500")
    (KSM / "run").write_text("1")
    proc = subprocess.run(
        [sys.executable, "-c", SETTLE],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)},
    )
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stdout) >= 3
