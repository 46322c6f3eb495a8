"""Recovery checkpoints: with ``checkpoint_every``, a kernel that dies gets its variables back.

The kernel dies for real (``os._exit`` in a cell, or SIGKILL from outside
between executions); the next execution runs in a new kernel holding what the
last recovery checkpoint held. A Ray node lost under a session is the same
path (tests/test_ray.py). The kernel attacks the checkpoint too: it cannot
reach or forge it. The server's and MCP's sessions take it as an option.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
from _mcpclient import stdio_mcp, texts
from _serverproc import TOKEN, ServerProcess, wait_for
from conftest import process_gone

from kernelexec import AsyncSession, Client, ConfigurationError, ServerError


async def test_a_kernel_that_dies_mid_execution_comes_back_with_its_variables(
    tmp_path: Path,
) -> None:
    async with AsyncSession(tmp_path, checkpoint_every=1e-6, sandbox=False) as session:
        await session.execute("import json\nx = 41\nclass Point:\n    z = 1\np = Point()")
        died = await session.execute("import os\nos._exit(3)")
        assert died.status == "kernel_died"
        assert "come back in the new kernel" in (died.message or ""), died.message
        after = await session.execute("print(x + 1, p.z, json.dumps([1]))")
        assert after.stdout.strip() == "42 1 [1]", after
        assert "recovery checkpoint" in (after.message or ""), after.message
        # Said in the transcript too, and the kernel went on working.
        await session.flush()
        text = session.notebook_path.read_text()
        assert "its state recovered" in text
        assert (await session.execute("print(x)")).stdout.strip() == "41"


async def test_variables_after_the_last_checkpoint_are_lost_and_a_restart_asked_loads_none(
    tmp_path: Path,
) -> None:
    # Longer than any machine has been up: the first execution checkpoints all the same
    # (it was skipped where time.monotonic(), which counts from boot, was under an hour).
    async with AsyncSession(tmp_path, checkpoint_every=1e9, sandbox=False) as session:
        await session.execute("x = 1")  # the first execution checkpoints
        await session.execute("y = 2")  # not due for 31 years: not in the checkpoint
        # Between executions: the kernel's own process, killed, and gone for good.
        pid = int((await session.execute("import os\nprint(os.getpid())")).stdout)
        supervisor = session.kernel_pid
        os.kill(pid, signal.SIGKILL)
        assert supervisor is not None
        assert wait_for(lambda: process_gone(pid) and process_gone(supervisor), 60)
        after = await session.execute("print(x)\nprint(y)")
        assert after.stdout.strip() == "1" and after.error is not None, after
        assert after.error.ename == "NameError" and "recovery checkpoint" in (after.message or "")
        await session.restart()  # asked for: a fresh kernel
        fresh = await session.execute("x")
        assert fresh.error is not None and fresh.error.ename == "NameError"


async def test_without_checkpoint_every_a_dead_kernels_state_is_gone(tmp_path: Path) -> None:
    async with AsyncSession(tmp_path, sandbox=False) as session:
        await session.execute("x = 1")
        died = await session.execute("import os\nos._exit(3)")
        assert "all earlier state" in (died.message or "")
        assert (await session.execute("x")).error is not None


async def test_the_kernel_can_neither_find_nor_forge_its_recovery_checkpoint(
    tmp_path: Path,
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("not the kernel's")
    work = tmp_path / "work"
    async with AsyncSession(work, checkpoint_every=1e-6) as session:
        await session.execute("x = 41")
        root = session._recovery_root
        assert root is not None and not root.is_relative_to(work)
        assert oct(root.stat().st_mode & 0o777) == "0o700"
        # Where a checkpoint would sit in the work dir, the kernel plants a link to a
        # folder of the host's and a forged manifest: nothing of it is read.
        planted = await session.execute(
            "import os, json\n"
            "os.makedirs('checkpoints', exist_ok=True)\n"
            f"os.symlink({str(outside)!r}, 'checkpoints/recovery')\n"
            "x = 99"
        )
        assert planted.status == "ok"
        await session.execute("import os\nos._exit(1)")
        back = await session.execute("print(x)")
        assert back.stdout.strip() == "99", back  # the latest checkpoint, ours
        probe = await session.execute(
            "import pathlib\nprint(sorted(p.name for p in pathlib.Path('.').rglob('secret.txt')))"
        )
        assert probe.stdout.strip() == "[]", probe
    assert not root.exists()  # removed with the session


def test_checkpoint_every_is_checked() -> None:
    for wrong in (0, -1, True, "60"):
        with pytest.raises(ConfigurationError, match="checkpoint_every"):
            AsyncSession(checkpoint_every=wrong)  # type: ignore[arg-type]


def test_checkpoint_every_is_a_session_option_of_the_server_and_its_client(
    tmp_path: Path,
) -> None:
    server = ServerProcess(tmp_path / "work")
    try:
        with Client(server.url, token=TOKEN) as client:
            for wrong in (0.5, "60", True, 10**6):
                with pytest.raises(ServerError) as refused:
                    client.session(checkpoint_every=wrong)  # type: ignore[arg-type]
                assert refused.value.status == 422, refused.value
                assert "checkpoint_every is seconds from 1" in str(refused.value)
            with client.session(checkpoint_every=1) as session:
                assert server.state(session.id)["options"]["checkpoint_every"] == 1
                session.execute("x = 41")  # the first execution checkpoints
                died = session.execute("import os\nos._exit(3)")
                assert died.status == "kernel_died", died
                after = session.execute("print(x + 1)")
                assert after.stdout.strip() == "42", after
                assert "recovery checkpoint" in (after.message or ""), after.message
    finally:
        server.stop()


async def test_checkpoint_every_is_an_option_of_the_mcp_create_session_tool(
    tmp_path: Path,
) -> None:
    async with stdio_mcp(tmp_path / "root") as client:
        made = await client.call_tool("create_session", {"session": "s", "checkpoint_every": 1})
        assert not made.is_error, texts(made)
        assert json.loads(texts(made))["options"]["checkpoint_every"] == 1
        for code in ("x = 41", "import os\nos._exit(3)"):
            await client.call_tool("execute_code", {"code": code, "session": "s"})
        after = await client.call_tool("execute_code", {"code": "print(x + 1)", "session": "s"})
        assert "42" in texts(after) and "recovery checkpoint" in texts(after), texts(after)
        wrong = await client.call_tool("create_session", {"session": "t", "checkpoint_every": 0})
        assert wrong.is_error and "checkpoint_every is seconds from 1" in texts(wrong)
