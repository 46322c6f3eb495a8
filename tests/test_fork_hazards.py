"""What does not survive fork(): found before a fork, fallen back from, or reported.

A live GNU OpenMP pool (scikit-learn's KMeans runs one, as torch's CPU ops
do) leaves a forked copy hanging on its next parallel operation, deaf to
interrupts; a GPU driver in use leaves the copy's every GPU call failing. A
fork of such a kernel is made by checkpoint and restore instead, and says
why; ``method="process"`` forks anyway and lists the hazard. Threads, the
parent's child processes and listening sockets do not stop a fork: the
report names them.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path

import pytest
from conftest import SOON

from kernelexec import AsyncSession, ConfigurationError, DockerBackend

# A process fork copies an uncontained kernel; a contained one is checkpointed
# and restored instead (tests/test_containment.py forks contained kernels).
pytestmark = [pytest.mark.usefixtures("kernel_start"), pytest.mark.uncontained]

# KMeans' Lloyd iterations are an OpenMP prange (scikit-learn bundles libgomp).
OPENMP = """
import numpy as np
from sklearn.cluster import KMeans
X = np.random.default_rng(0).random((20000, 8))
def parallel_op():
    return KMeans(n_clusters=8, n_init=1, max_iter=5, random_state=0).fit(X).inertia_
first = parallel_op()
"""


# The code disguises libgomp's pool threads as ZeroMQ's, whose running threads are not looked
# at, to have its kernel forked as a process.
DISGUISE = """
import os, threading
python = {t.native_id for t in threading.enumerate()}
for tid in os.listdir('/proc/self/task'):
    if int(tid) not in python:
        with open(f'/proc/self/task/{tid}/comm', 'w') as comm:
            comm.write('ZMQbg/IO/9')
"""


@pytest.mark.parametrize("disguised", [False, True], ids=["plain", "disguised"])
async def test_a_kernel_with_a_live_openmp_pool_is_forked_by_checkpoint(
    tmp_path: Path, disguised: bool
) -> None:
    setup = OPENMP + (DISGUISE if disguised else "")
    async with AsyncSession(tmp_path / "parent", timeout=120) as parent:
        assert (await parent.execute(setup)).status == "ok"
        async with await parent.fork(tmp_path / "child") as child:
            report = child.fork_report
            assert report is not None and report.method == "checkpoint", report
            assert report.reason is not None and "OpenMP" in report.reason
            # The copy answers its next parallel op, with the parent's state.
            again = await child.execute("print(parallel_op() == first)", timeout=120)
            assert again.status == "ok" and again.stdout == "True\n", again
        assert (await parent.execute("print(parallel_op() == first)")).stdout == "True\n"


async def test_method_process_forks_anyway_and_lists_the_hazard(tmp_path: Path) -> None:
    async with AsyncSession(tmp_path / "parent", timeout=120) as parent:
        assert (await parent.execute(OPENMP)).status == "ok"
        async with await parent.fork(tmp_path / "child", method="process") as child:
            report = child.fork_report
            assert report is not None and report.method == "process" and report.reason is None
            assert any("OpenMP" in item for item in report.left_behind), report
            # What the hazard means, seen: the copy's next parallel op hangs,
            # and even the interrupt cannot stop it (the kernel is restarted).
            hung = await child.execute("parallel_op()", timeout=5)
            assert hung.status == "timeout", hung
        # A kernel whose pool is not live (none ran here) forks as a process.
        async with AsyncSession(tmp_path / "quiet") as quiet:
            await quiet.execute("from sklearn.cluster import KMeans")
            async with await quiet.fork(tmp_path / "quiet-child") as copy:
                assert copy.fork_report is not None and copy.fork_report.method == "process"


# A thread of the code's, busy outside the GIL (hashing 64 MB at a time): always on a CPU or
# waiting for one, as a loaded machine leaves the kernel's own threads.
BUSY_THREAD = """
import hashlib, threading
from sklearn.cluster import KMeans  # libgomp loaded; no parallel op, so no pool
busy = True
def hash_on(data=b"x" * 2**26):
    while busy:
        hashlib.sha256(data)
threading.Thread(target=hash_on, name="hasher", daemon=True).start()
"""


async def test_a_thread_seen_running_is_not_taken_for_an_openmp_pool(tmp_path: Path) -> None:
    # A thread running at each look counted as a pool's while libgomp was loaded: under
    # CI's load, a quiet kernel's own thread did, and its fork was made by checkpoint.
    async with AsyncSession(tmp_path / "parent", timeout=120) as parent:
        assert (await parent.execute(BUSY_THREAD)).status == "ok"
        async with await parent.fork(tmp_path / "child") as child:
            report = child.fork_report
            assert report is not None and report.method == "process", report
            assert report.reason is None, report
            assert any("'hasher'" in item for item in report.left_behind), report
        await parent.execute("busy = False")


async def test_threads_children_and_listening_sockets_are_reported(tmp_path: Path) -> None:
    async with AsyncSession(tmp_path / "parent") as parent:
        setup = (
            "import socket, subprocess, threading, time\n"
            "worker = threading.Thread(target=time.sleep, args=(600,), name='worker')\n"
            "worker.daemon = True; worker.start()\n"
            "sleeper = subprocess.Popen(['sleep', '600'])\n"
            # A child started by a thread that has ended since: Linux lists a
            # child under the thread that made it, until that thread ends.
            "started = []\n"
            "def make(): started.append(subprocess.Popen(['sleep', '600']))\n"
            "maker = threading.Thread(target=make)\n"
            "maker.start(); maker.join(); orphan = started[0]\n"
            "server = socket.socket(); server.bind(('127.0.0.1', 0)); server.listen()\n"
            "port = server.getsockname()[1]\n"
        )
        assert (await parent.execute(setup)).status == "ok"
        port = (await parent.execute("print(port)")).stdout.strip()
        sleeper = (await parent.execute("print(sleeper.pid)")).stdout.strip()
        orphan = (await parent.execute("print(orphan.pid)")).stdout.strip()
        async with await parent.fork(tmp_path / "child") as child:
            report = child.fork_report
            assert report is not None and report.method == "process", report
            text = " | ".join(report.left_behind)
            assert "'worker'" in text and f"{sleeper} (sleep)" in text, text
            assert f"{orphan} (sleep)" in text and "2 child process(es)" in text, text
            assert f"port {port}" in text, text
            assert len(report.left_behind) == 3, report.left_behind
            # In the copy the thread is gone, as the report said.
            alive = await child.execute("print(worker.is_alive())")
            assert alive.stdout == "False\n"
        await parent.execute("sleeper.kill(); orphan.kill(); server.close()")


async def test_a_quiet_kernel_reports_nothing(tmp_path: Path) -> None:
    async with AsyncSession(tmp_path / "parent") as parent:
        await parent.execute("import numpy, pandas, matplotlib.pyplot as plt; x = 1")
        async with await parent.fork(tmp_path / "child") as child:
            report = child.fork_report
            assert report is not None and report.method == "process"
            assert report.left_behind == () and report.reason is None
            # A fork of a fork still sees only its own, and so on.
            async with await child.fork(tmp_path / "grandchild") as grandchild:
                assert grandchild.fork_report is not None
                assert grandchild.fork_report.left_behind == ()


async def test_an_error_in_a_fork_reads_as_in_its_parent(tmp_path: Path) -> None:
    async with AsyncSession(tmp_path / "parent") as parent:
        await parent.execute("x = 1")
        async with await parent.fork(tmp_path / "child") as child:
            theirs = await parent.execute("1/0")
            ours = await child.execute("1/0")
            assert ours.text == theirs.text, (ours.text, theirs.text)
            assert "BecomeFork" not in json.dumps(ours.to_dict())
            # Nothing is being handled between cells, and a bare raise says so.
            clean = await child.execute("import sys; print(sys.exc_info())")
            assert clean.stdout == "(None, None, None)\n", clean.stdout
            bare = await child.execute("raise")
            assert bare.error is not None and bare.error.ename == "RuntimeError", bare


async def test_unknown_methods_and_process_forks_of_other_kernels_are_refused(
    tmp_path: Path,
) -> None:
    async with AsyncSession(tmp_path / "parent") as parent:
        with pytest.raises(ConfigurationError, match="method='sideways'"):
            await parent.fork(tmp_path / "child", method="sideways")  # type: ignore[arg-type]
        async with await parent.fork(tmp_path / "asked", method="checkpoint") as asked:
            assert asked.fork_report is not None and asked.fork_report.method == "checkpoint"
            assert asked.fork_report.reason is not None
            assert "method='checkpoint'" in asked.fork_report.reason
    docker = AsyncSession(tmp_path / "docker", backend=DockerBackend())
    with pytest.raises(ConfigurationError, match="cannot be forked as a process"):
        await docker.fork(tmp_path / "docker-child", method="process")
    await docker.close()


async def test_a_fork_cancelled_once_its_kernel_runs_leaves_no_kernel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kernelexec._kernel.guard import descendants
    from kernelexec._session import _state

    def cancelled(*_: object) -> None:
        # A cancellation that lands after the new kernel started (the server's
        # client went away, say): produced here at that exact point.
        raise asyncio.CancelledError

    async with AsyncSession(tmp_path / "parent") as parent:
        await parent.execute("x = 1")
        before = set(descendants(os.getpid()))
        monkeypatch.setattr(_state, "_begin_transcript", cancelled)
        with pytest.raises(asyncio.CancelledError):
            await parent.fork(tmp_path / "child")
        deadline = time.monotonic() + SOON
        while set(descendants(os.getpid())) - before and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert set(descendants(os.getpid())) - before == set()
        assert (await parent.execute("print(x)")).stdout == "1\n"
