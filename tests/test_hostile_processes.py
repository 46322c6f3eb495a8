"""A kernel's code tries to leave processes behind: none outlives its session.

Every way out of the kernel's process group is tried at once: a child in a new
session (``start_new_session=True``), ``setsid -f``, a double-fork daemon,
``nohup`` ignoring SIGTERM and SIGHUP, a plain child, and a fork loop that
keeps making new sessions while the session ends. Each descendant records its
pid in a file and carries a marker in its environment; after the session ends
none of them may be running.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from _pids import kernel_pid
from conftest import SOON, process_gone

from kernelexec import AsyncSession

# Every test here holds for kernels forked from a zygote and for spawned ones.
pytestmark = pytest.mark.usefixtures("kernel_start")

# Each descendant appends its pid to argv[1]; the loop keeps forking children
# that each start a session of their own, until 300 or it is stopped.
DAEMON = """
import os, sys, time
if os.fork():
    os._exit(0)
os.setsid()
if os.fork():
    os._exit(0)
open(sys.argv[1], "a").write(f"{os.getpid()}\\n")
time.sleep(600)
"""
LOOP = """
import os, sys, time
open(sys.argv[1], "a").write(f"{os.getpid()}\\n")
for _ in range(300):
    if os.fork() == 0:
        os.setsid()
        open(sys.argv[1], "a").write(f"{os.getpid()}\\n")
        time.sleep(600)
        os._exit(0)
    time.sleep(0.02)
time.sleep(600)
"""
SPAWN = """
import os, subprocess, sys
os.environ["KX_MARK"] = {mark!r}
pids = {pids!r}
record = f"echo $$ >> {{pids}}; "
subprocess.Popen(["sh", "-c", record + "exec sleep 600"], start_new_session=True)
os.system(f"setsid -f sh -c '{{record}}exec sleep 600'")
subprocess.run([sys.executable, "-c", {daemon!r}, pids], check=True)
os.system(f"nohup sh -c 'trap \\"\\" TERM HUP INT; {{record}}sleep 600' >/dev/null 2>&1 &")
subprocess.Popen(["sh", "-c", record + "exec sleep 600"])
subprocess.Popen([sys.executable, "-c", {loop!r}, pids], start_new_session=True)
"""
# Spawned before the loop's children: everything but the loop's.
OTHERS = 5


class Escapees:
    """The descendants one kernel spawns with ``SPAWN``, and how to find them."""

    def __init__(self, work: Path) -> None:
        self.mark = f"kx-{uuid.uuid4().hex}"
        self.pids_file = work / "pids.txt"
        self.code = SPAWN.format(mark=self.mark, pids=str(self.pids_file), daemon=DAEMON, loop=LOOP)

    def recorded(self) -> list[int]:
        try:
            return [int(line) for line in self.pids_file.read_text().split()]
        except FileNotFoundError:
            return []

    def wait_spawned(self, loop_children: int = 20) -> None:
        """Returns once every kind has started and the loop is busy forking."""
        deadline = time.monotonic() + 60
        while len(self.recorded()) < OTHERS + 1 + loop_children:
            assert time.monotonic() < deadline, f"only {len(self.recorded())} spawned"
            time.sleep(0.05)

    def running(self) -> list[int]:
        """Every process carrying the marker (each descendant does).

        Not the recorded pids: a contained kernel's descendants record their
        pids in its own PID namespace, which are other processes' numbers here.
        """
        alive: set[int] = set()
        needle = f"KX_MARK={self.mark}".encode()
        for name in os.listdir("/proc"):
            if name.isdigit() and not process_gone(int(name)):
                try:
                    environ = Path(f"/proc/{name}/environ").read_bytes()
                except OSError:
                    continue
                if needle in environ.split(b"\0"):
                    alive.add(int(name))
        return sorted(alive)

    def wait_gone(self, within: float = SOON) -> list[int]:
        deadline = time.monotonic() + within
        while (left := self.running()) and time.monotonic() < deadline:
            time.sleep(0.1)
        return left

    def kill_leftovers(self) -> None:
        for pid in self.running():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


@pytest.fixture
def escapees() -> Iterator[Callable[[Path], Escapees]]:
    made: list[Escapees] = []

    def make(work: Path) -> Escapees:
        work.mkdir(parents=True, exist_ok=True)
        made.append(Escapees(work))
        return made[-1]

    yield make
    for one in made:  # a failed test must not leave 300 sleepers behind
        one.kill_leftovers()


async def test_close_ends_every_descendant(
    tmp_path: Path, escapees: Callable[[Path], Escapees]
) -> None:
    tree = escapees(tmp_path)
    session = AsyncSession(tmp_path, timeout=60)
    result = await session.execute(tree.code)
    assert result.status == "ok", result.text
    await asyncio.to_thread(tree.wait_spawned)
    assert len(tree.running()) >= OTHERS + 1
    await session.close()
    # close() returns once the tree is ended: no waiting needed.
    assert tree.running() == []


async def test_restart_ends_every_descendant(
    tmp_path: Path, escapees: Callable[[Path], Escapees]
) -> None:
    tree = escapees(tmp_path)
    async with AsyncSession(tmp_path, timeout=60) as session:
        assert (await session.execute(tree.code)).status == "ok"
        await asyncio.to_thread(tree.wait_spawned)
        await session.restart()
        assert tree.running() == []
        assert (await session.execute("1 + 1")).text.strip() == "2"


async def test_a_kernel_that_dies_takes_its_descendants(
    tmp_path: Path, escapees: Callable[[Path], Escapees]
) -> None:
    # Nobody shut it down: it ended on its own, and its orphans would have
    # gone to init.
    tree = escapees(tmp_path)
    async with AsyncSession(tmp_path, timeout=60) as session:
        assert (await session.execute(tree.code)).status == "ok"
        await asyncio.to_thread(tree.wait_spawned)
        died = await session.execute("import os; os._exit(3)")
        assert died.status == "kernel_died"
        assert "exit status 3" in died.text  # the kernel's own status, through the supervisor
        assert await asyncio.to_thread(tree.wait_gone) == []


async def test_interrupts_still_reach_the_kernel(tmp_path: Path) -> None:
    # SIGINT goes to the process group: the kernel is interrupted, and the
    # supervisor that shares the group ignores it.
    async with AsyncSession(tmp_path, timeout=1.0) as session:
        pid = await kernel_pid(session)
        slept = await session.execute("import time; time.sleep(30)")
        assert slept.status == "timeout" and not slept.restarted
        assert await kernel_pid(session) == pid


OWNER = """
import os, signal, sys
from pathlib import Path
from kernelexec import Session
session = Session(sys.argv[1], timeout=60)
print(session.execute(Path(sys.argv[2]).read_text()).status, flush=True)
sys.stdin.readline()  # the test has seen the tree
if sys.argv[3] == "sigkill":
    os.kill(os.getpid(), signal.SIGKILL)
sys.exit(0)  # interpreter exit, the session never closed
"""


@pytest.mark.parametrize("how", ["sigkill", "exit"])
def test_the_owners_end_ends_every_descendant(
    tmp_path: Path, escapees: Callable[[Path], Escapees], how: str
) -> None:
    tree = escapees(tmp_path / "work")
    code = tmp_path / "spawn.py"
    code.write_text(tree.code)
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER, str(tmp_path / "work"), str(code), how],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert owner.stdin is not None and owner.stdout is not None
    assert owner.stdout.readline().strip() == "ok"
    tree.wait_spawned()
    owner.stdin.write("go\n")
    owner.stdin.flush()
    owner.wait(60)
    assert tree.wait_gone() == []
