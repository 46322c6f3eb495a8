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
from conftest import process_gone

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
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert owner.stdout is not None
    line = owner.stdout.readline()
    pids = [int(p) for p in line.split()]
    assert len(pids) == 4, owner.stderr.read() if owner.stderr else line
    assert not any(process_gone(p) for p in pids)
    if how == "sigterm":
        owner.send_signal(signal.SIGTERM)
    elif how == "sigkill":
        owner.send_signal(signal.SIGKILL)
    owner.wait(timeout=60)
    assert wait_gone(pids) == []


async def test_close_stops_the_kernel_and_its_children(tmp_path: Path) -> None:
    async with AsyncSession(tmp_path) as s:
        kernel = int((await s.execute("import os; os.getpid()")).text)
        child = int(
            (await s.execute("import subprocess; subprocess.Popen(['sleep', '600']).pid")).text
        )
    assert await asyncio.to_thread(wait_gone, [kernel, child]) == []
    assert os.path.exists(tmp_path / "transcript.ipynb")
