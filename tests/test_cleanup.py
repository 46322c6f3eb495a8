"""However our process ends, no kernel and no child of a kernel is left behind."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _pids import host_pid, kernel_pid
from conftest import once_it_says, process_gone

from kernelexec import AsyncSession

# Opens two sessions whose kernels each start a long-lived child, prints every
# pid, then ends the way the test asks.
OWNER = """
import os, signal, sys
from kernelexec import Session
sessions = [Session(sys.argv[1] + f"/s{i}") for i in range(2)]
pids = []
for s in sessions:
    s.start()
    pids.append(s.execute("import os; os.getpid()").text.strip())
    pids.append(s.execute(
        "import subprocess; subprocess.Popen(['sleep', '600']).pid").text.strip())
print(" ".join(pids), flush=True)
print(" ".join(os.path.dirname(s.connection_info["ip"]) for s in sessions), flush=True)
sys.stdin.readline()  # the test has seen every process alive
how = sys.argv[2]
if how == "exception":
    raise RuntimeError("the agent crashed")
if how == "exit":
    sys.exit(0)
signal.pause()
"""


def wait_gone(pids: list[int], within: float = 15.0) -> list[int]:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        left = [p for p in pids if not process_gone(p)]
        if not left:
            return []
        time.sleep(0.1)
    return left


@pytest.mark.parametrize("how", ["exit", "exception", "sigterm", "sigkill"])
def test_no_kernel_outlives_its_owner(tmp_path: Path, how: str) -> None:
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER, str(tmp_path), how],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert owner.stdout is not None
    line = owner.stdout.readline()
    seen = [int(p) for p in line.split()]
    assert len(seen) == 4, owner.stderr.read() if owner.stderr else line
    # Each session's kernel, then its child, as this machine numbers them.
    pids = [host_pid(pid, tmp_path / f"s{i // 2}") for i, pid in enumerate(seen)]
    sockets = [Path(d) for d in owner.stdout.readline().split()]
    assert len(sockets) == 2 and all(d.is_dir() for d in sockets)
    assert not any(process_gone(p) for p in pids)
    assert owner.stdin is not None
    owner.stdin.write("end\n")
    owner.stdin.flush()
    if how == "sigterm":
        owner.send_signal(signal.SIGTERM)
    elif how == "sigkill":
        owner.send_signal(signal.SIGKILL)
    owner.wait(timeout=60)
    assert wait_gone(pids) == []
    # The kernels' Unix sockets (and, after SIGKILL, their connection files
    # with the key) go with them.
    assert [d for d in sockets if d.exists()] == []


async def test_close_stops_the_kernel_and_its_children(tmp_path: Path) -> None:
    async with AsyncSession(tmp_path) as s:
        kernel = await kernel_pid(s)
        child = int(
            (await s.execute("import subprocess; subprocess.Popen(['sleep', '600']).pid")).text
        )
        child = host_pid(child, s.work_dir)
    assert await asyncio.to_thread(wait_gone, [kernel, child]) == []
    assert os.path.exists(tmp_path / "transcript.ipynb")


async def test_close_during_an_execution_ends_it_and_starts_no_new_kernel(tmp_path: Path) -> None:
    s = AsyncSession(tmp_path, interrupt_grace=0.5)
    kernel = await kernel_pid(s)
    # Closed once the cell runs (it says so), ignoring the interrupt: not after a fixed
    # time, which a loaded machine can pass before the cell even starts.
    task = await once_it_says(
        s,
        "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
        "print('running', flush=True)\ntime.sleep(60)",
    )
    await asyncio.wait_for(s.close(), 30)
    result = await asyncio.wait_for(task, 30)
    assert result.status == "cancelled" and "closed" in result.text
    assert await asyncio.to_thread(wait_gone, [kernel]) == []
    await asyncio.sleep(1.0)
    assert not await s._backend.is_alive()  # no new kernel was started after close


async def test_restart_after_a_death_releases_the_dead_kernel(tmp_path: Path) -> None:
    # auto_restart=False: the caller restarts. Each death + restart used to
    # leave 5 file descriptors and the dead kernel's IPC dir behind.
    def fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    async with AsyncSession(tmp_path, auto_restart=False) as s:
        await s.execute("1")
        ipc_dirs = []
        counts = []
        for _ in range(4):
            info = s.connection_info
            assert info is not None
            ipc_dirs.append(Path(info["ip"]).parent)
            died = await s.execute("import os; os._exit(1)")
            assert died.status == "kernel_died"
            await s.restart()
            assert (await s.execute("1 + 1")).text.strip() == "2"
            # zmq releases a closed socket's own descriptors on its I/O thread,
            # a moment later: wait for the count to settle, not for a leak.
            for _ in range(50):
                if not counts or fds() <= counts[0]:
                    break
                await asyncio.sleep(0.1)
            counts.append(fds())
    assert max(counts[1:]) <= counts[0], f"file descriptors after each restart: {counts}"
    assert [d for d in ipc_dirs if d.exists()] == []
