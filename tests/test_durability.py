"""A result is handed out only once its transcript cell is in the file."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat

from kernelexec import AsyncSession


def _code_sources(path: Path) -> list[str]:
    notebook = json.loads(path.read_text(encoding="utf-8"))
    return ["".join(c["source"]) for c in notebook["cells"] if c["cell_type"] == "code"]


async def test_every_result_finds_its_cell_already_in_the_file(tmp_path: Path) -> None:
    async with AsyncSession(tmp_path) as session:
        for i in range(20):
            result = await session.execute(f"print({i})")
            assert result.ok
            # Read at once, before yielding to the event loop: nothing may still be pending.
            assert _code_sources(session.notebook_path)[-1] == f"print({i})", i
        refused = await session.execute("puts 1", language="ruby")
        assert not refused.ok
        notebook = json.loads(session.notebook_path.read_text(encoding="utf-8"))
        assert notebook["cells"][-1]["cell_type"] == "raw"
        await session.restart()
        notebook = json.loads(session.notebook_path.read_text(encoding="utf-8"))
        assert "restarted on request" in "".join(notebook["cells"][-1]["source"])


def test_a_process_killed_right_after_a_result_keeps_every_cell(tmp_path: Path) -> None:
    # SIGKILL of our own process the moment the last result is in hand.
    script = (
        "import os, signal, kernelexec\n"
        f"s = kernelexec.Session({str(tmp_path)!r})\n"
        "for i in range(8):\n"
        "    s.execute(f'x = {i}\\nprint(x)')\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], timeout=180, capture_output=True)
    assert done.returncode == -9, done.stderr.decode()[-2000:]
    path = tmp_path / "transcript.ipynb"
    nbformat.validate(nbformat.read(path, as_version=4))
    assert _code_sources(path) == [f"x = {i}\nprint(x)" for i in range(8)]


async def test_the_work_dir_can_be_removed_as_soon_as_a_result_returns(tmp_path: Path) -> None:
    for attempt in range(10):
        work = tmp_path / f"w{attempt}"
        async with AsyncSession(work) as session:
            await session.execute("import matplotlib.pyplot as plt\nplt.plot([1, 2]); plt.show()")
            shutil.rmtree(work)  # nothing of ours may still be writing into it
            await asyncio.sleep(0.2)  # a late write would recreate the dir and the notebook
            assert not work.exists()
