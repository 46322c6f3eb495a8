"""session.fork(): a new session with a copy of a live kernel's state, independent from then on."""

# Fixtures from servers.py are imported by name and used as parameters:
# ruff: noqa: F401, F811

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from conftest import SOON, once_it_says, process_gone
from servers import kernel_image

from kernelexec import AsyncSession, DockerBackend, Session, SessionBusyError
from kernelexec._kernel.guard import FD_TABLE_SLOTS, descendants

# Every test here holds for a parent forked from a zygote and for a spawned one.
# A process fork copies an uncontained kernel; a contained one is checkpointed
# and restored instead (tests/test_containment.py forks contained kernels).
pytestmark = [pytest.mark.usefixtures("kernel_start"), pytest.mark.uncontained]

STATE = """
import math, numpy as np
import matplotlib.pyplot as plt
data = np.arange(5)
class Model:
    def __init__(self, k): self.k = k
    def predict(self, x): return self.k * x
model = Model(3)
def make_adder(n):
    return lambda x: x + n
add2 = make_adder(2)
fig, ax = plt.subplots(); ax.set_title("kept")
plt.rcParams["lines.linewidth"] = 7
"""
PROBE = (
    "import json, os\n"
    "print(json.dumps([data.tolist(), model.predict(2), add2(1), math.pi > 3,"
    " ax.get_title(), plt.rcParams['lines.linewidth'], os.getcwd()]))"
)


async def probe(session: AsyncSession) -> list[object]:
    result = await session.execute(PROBE)
    assert result.status == "ok", result.text
    answer: list[object] = json.loads(result.stdout)
    return answer


async def test_a_fork_holds_the_parents_state_and_its_own_files(tmp_path: Path) -> None:
    async with AsyncSession(tmp_path / "parent", timeout=60) as parent:
        assert (await parent.execute(STATE)).status == "ok"
        await parent.execute("open('notes.txt', 'w').write('from the parent')")
        async with await parent.fork(tmp_path / "child") as child:
            assert child.fork_report is not None and child.fork_report.method == "process"
            answer = await probe(child)
            assert answer == [[0, 1, 2, 3, 4], 6, 3, True, "kept", 7, str(tmp_path / "child")]
            # The shell carries on: its count and history are the parent's so far.
            history = await child.execute("print(len(In), In[2][:4])")
            assert history.execution_count == 4 and history.stdout == "5 open\n", history
            assert (tmp_path / "child" / "notes.txt").read_text() == "from the parent"
            assert (await child.execute("print(open('notes.txt').read())")).stdout.strip() == (
                "from the parent"
            )
            # A figure drawn in the fork still comes back as a file.
            plot = await child.execute("plt.figure(); plt.plot([3, 1]); plt.show()")
            assert plot.files and plot.files[0].endswith(".png"), plot
            await child.flush()
        cells = nbformat.read(str(tmp_path / "child" / "transcript.ipynb"), as_version=4).cells
        assert cells[0].cell_type == "markdown" and "Forked" in cells[0].source
        assert str(tmp_path / "parent") in cells[0].source
        codes = [c.source for c in cells if c.cell_type == "code"]
        assert codes[0] == STATE and codes[-1].startswith("plt.figure()")


FD_SIZE = "import re\nprint(re.search(r'FDSize:\\s+(\\d+)', open('/proc/self/status').read())[1])"


async def test_a_kernel_and_its_fork_have_room_for_descriptors_before_threads_start(
    tmp_path: Path,
) -> None:
    # Linux grows a process's table of descriptors as they pass its size (64
    # at first), and while threads share it each growth waits for an RCU grace
    # period: a fork passed 64 as its app made its sockets, and one socket()
    # call took 15 ms. Each kernel grows it at boot, while it has one thread.
    async with AsyncSession(tmp_path / "parent") as parent:
        assert int((await parent.execute(FD_SIZE)).stdout) >= FD_TABLE_SLOTS
        async with await parent.fork(tmp_path / "child") as child:
            assert int((await child.execute(FD_SIZE)).stdout) >= FD_TABLE_SLOTS


async def test_parent_and_fork_diverge_both_ways(tmp_path: Path) -> None:
    async with AsyncSession(tmp_path / "parent") as parent:
        await parent.execute("x = 1")
        async with await parent.fork(tmp_path / "child") as child:
            await child.execute("x += 10; y = 'child only'")
            await parent.execute("x += 100")
            assert (await child.execute("print(x)")).stdout == "11\n"
            assert (await parent.execute("print(x)")).stdout == "101\n"
            assert (await parent.execute("y")).error is not None  # NameError in the parent
            pids = [
                (await s.execute("import os; print(os.getpid(), os.getpgid(0))")).stdout.split()
                for s in (parent, child)
            ]
            assert pids[0][0] != pids[1][0] and pids[0][1] != pids[1][1]


async def test_a_busy_parent_is_forked_after_its_execution_unless_told_not_to_wait(
    tmp_path: Path,
) -> None:
    async with AsyncSession(tmp_path / "parent") as parent:
        # Forked while the cell runs (it says so): a fixed wait could end before it began.
        running = await once_it_says(
            parent, "import time; print('running', flush=True); time.sleep(2); done = True"
        )
        with pytest.raises(SessionBusyError, match="wait=True"):
            await parent.fork(tmp_path / "refused", wait=False)
        async with await parent.fork(tmp_path / "child") as child:
            assert running.done() and (await running).status == "ok"
            assert (await child.execute("print(done)")).stdout == "True\n"


async def test_twenty_forks_of_one_parent_are_independent(tmp_path: Path) -> None:
    async with AsyncSession(tmp_path / "parent", timeout=120) as parent:
        await parent.execute("import numpy as np\nbase = list(range(3))")
        forks = [await parent.fork(tmp_path / f"f{i}") for i in range(20)]
        try:
            results = await asyncio.gather(
                *(
                    f.execute(f"base.append({i}); print(base[-1], len(base))")
                    for i, f in enumerate(forks)
                )
            )
            assert [r.stdout for r in results] == [f"{i} 4\n" for i in range(20)]
            draws = await asyncio.gather(*(f.execute("print(np.random.rand())") for f in forks))
            assert len({d.stdout for d in draws}) == 20  # no two forks share a random sequence
            assert (await parent.execute("print(base)")).stdout == "[0, 1, 2]\n"
        finally:
            await asyncio.gather(*(f.close() for f in forks))


async def test_a_forks_interrupt_timeout_and_death_leave_the_parent_alone(tmp_path: Path) -> None:
    async with AsyncSession(tmp_path / "parent", timeout=60) as parent:
        await parent.execute("import os; kept = 'parent'")
        parent_pid = (await parent.execute("print(os.getpid())")).stdout
        async with await parent.fork(tmp_path / "child") as child:
            child.timeout = 1.0
            slept = await child.execute("import time; time.sleep(30)")
            assert slept.status == "timeout"
            assert (await child.execute("print(kept)")).stdout == "parent\n"  # state kept
            died = await child.execute("os._exit(7)")
            assert died.status == "kernel_died" and "exit status 7" in died.text, died.text
            assert (await parent.execute("print(os.getpid(), kept)")).stdout == (
                f"{parent_pid.strip()} parent\n"
            )


async def test_a_fork_of_a_fork_outlives_both(tmp_path: Path) -> None:
    parent = AsyncSession(tmp_path / "a")
    await parent.execute("chain = ['a']")
    child = await parent.fork(tmp_path / "b")
    await child.execute("chain.append('b')")
    grandchild = await child.fork(tmp_path / "c")
    await grandchild.execute("chain.append('c')")
    await parent.close()
    await child.close()
    try:
        last = await grandchild.execute("print(chain)")
        assert last.stdout == "['a', 'b', 'c']\n", last
        assert grandchild.fork_report is not None
        assert grandchild.fork_report.parent_work_dir == str(tmp_path / "b")
    finally:
        await grandchild.close()


ESCAPE = """
import ctypes, os, signal, subprocess
sleeper = subprocess.Popen(["setsid", "sleep", "600"])
# Pretend to be the owner: ask this kernel's supervisor to spare the sleeper.
class Value(ctypes.Union):
    _fields_ = [("sival_int", ctypes.c_int), ("sival_ptr", ctypes.c_void_p)]
value = Value(); value.sival_ptr = sleeper.pid
libc = ctypes.CDLL(None, use_errno=True)
sent = libc.sigqueue(os.getppid(), signal.SIGRTMIN + 1, value)
print(sleeper.pid, sent)
"""


async def test_only_the_owner_can_release_a_process_from_the_tree(tmp_path: Path) -> None:
    # The kernel's own code sends its supervisor the owner's "release" signal
    # for an escapee: the Linux kernel stamps the real sender, the supervisor
    # ignores it, and closing the session still ends the escapee.
    session = AsyncSession(tmp_path / "work")
    result = await session.execute(ESCAPE)
    sleeper, sent = (int(v) for v in result.stdout.split())
    assert sent == 0  # delivered, and ignored
    await session.close()
    deadline = time.monotonic() + SOON
    while not process_gone(sleeper) and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    assert process_gone(sleeper)


async def test_closing_a_fork_ends_its_whole_tree(tmp_path: Path) -> None:
    async with AsyncSession(tmp_path / "parent") as parent:
        child = await parent.fork(tmp_path / "child")
        result = await child.execute(
            "import subprocess; print(subprocess.Popen(['setsid', 'sleep', '600']).pid)"
        )
        sleeper = int(result.stdout)
        await child.close()
        deadline = time.monotonic() + SOON
        while not process_gone(sleeper) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert process_gone(sleeper)
        assert (await parent.execute("print('parent fine')")).stdout == "parent fine\n"


def test_the_sync_facade_forks_too(tmp_path: Path) -> None:
    with Session(tmp_path / "parent") as parent:
        parent.execute("word = 'sync'")
        with parent.fork(tmp_path / "child") as child:
            assert child.execute("print(word)").stdout == "sync\n"
            assert child.fork_report is not None and child.fork_report.method == "process"


OWNER = """
import json, os, signal, sys
from kernelexec import Session
parent = Session(sys.argv[1] + "/parent")
parent.execute("import subprocess; subprocess.Popen(['setsid', 'sleep', '600'])")
child = parent.fork(sys.argv[1] + "/child")
child.execute("import subprocess; subprocess.Popen(['setsid', 'sleep', '600'])")
print(json.dumps([parent._async._backend._process.pid, child._async._backend._process.pid]),
      flush=True)
sys.stdin.readline()
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_the_owners_sigkill_ends_forks_too(tmp_path: Path) -> None:
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER, str(tmp_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert owner.stdin is not None and owner.stdout is not None
    supervisors = json.loads(owner.stdout.readline())
    tree = set(supervisors)
    for supervisor in supervisors:
        tree |= set(descendants(supervisor))
    assert len(tree) >= 6  # two supervisors, two kernels, two sleepers at least
    owner.stdin.write("go\n")
    owner.stdin.flush()
    assert owner.wait(60) == -signal.SIGKILL
    deadline = time.monotonic() + 2 * SOON
    while time.monotonic() < deadline and not all(process_gone(pid) for pid in tree):
        time.sleep(0.1)
    assert [pid for pid in tree if not process_gone(pid)] == []


async def test_a_docker_session_is_forked_by_checkpoint_and_restore(
    kernel_image: str, tmp_path: Path
) -> None:
    backend = DockerBackend(image=kernel_image)
    async with AsyncSession(tmp_path / "parent", backend=backend) as parent:
        await parent.execute("import socket\nkept = {'a': [1, 2]}\nsock = socket.socket()")
        async with await parent.fork(tmp_path / "child") as child:
            report = child.fork_report
            assert report is not None and report.method == "checkpoint"
            assert any(line.startswith("sock (socket") for line in report.left_behind), report
            assert isinstance(child._backend, DockerBackend)
            assert (await child.execute("print(kept)")).stdout == "{'a': [1, 2]}\n"
