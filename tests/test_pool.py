"""The warm kernel pool: ready kernels, never shared, moved to each session's work dir."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from conftest import process_gone

from kernelexec import AsyncSession, KernelPool, KernelStartError

PRELOAD = "import json, statistics"
PROBE = "import os\nprint(os.getcwd(), os.environ['PWD'], 'json' in dir(), 'secret' in dir())"


@pytest.fixture
async def pool() -> AsyncIterator[KernelPool]:
    async with KernelPool(2, preload=PRELOAD) as p:
        await p.wait_ready(120)
        yield p


async def test_pooled_sessions_are_ready_clean_and_in_their_own_work_dir(
    pool: KernelPool, tmp_path: Path
) -> None:
    async with AsyncSession(tmp_path / "a", pool=pool, preload=PRELOAD) as a:
        assert pool.ready == 1  # taken, a replacement is starting
        first = await a.execute("secret = 42\n" + PROBE)
        assert first.execution_count == 1  # the preload and the move left no trace
        assert first.stdout == f"{a.work_dir} {a.work_dir} True True\n"
        assert (await a.execute("pwd", language="bash")).stdout == f"{a.work_dir}\n"
        pid_a = int((await a.execute("os.getpid()")).text)
    async with AsyncSession(tmp_path / "b", pool=pool, preload=PRELOAD) as b:
        second = await b.execute(PROBE)
        assert second.stdout == f"{b.work_dir} {b.work_dir} True False\n"
        assert int((await b.execute("os.getpid()")).text) != pid_a
    assert process_gone(pid_a)  # used once, then gone: never back in the pool


async def test_a_restart_keeps_the_work_dir_and_the_preload(
    pool: KernelPool, tmp_path: Path
) -> None:
    async with AsyncSession(tmp_path, pool=pool, preload=PRELOAD) as s:
        await s.execute("secret = 1")
        await s.restart()
        after = await s.execute(PROBE)
        assert after.stdout == f"{s.work_dir} {s.work_dir} True False\n"


async def test_a_session_of_another_configuration_starts_cold(
    pool: KernelPool, tmp_path: Path
) -> None:
    async with AsyncSession(tmp_path, pool=pool, env={"MODE": "other"}) as s:
        result = await s.execute("import os; print(os.environ['MODE'], 'json' in dir())")
        assert result.stdout == "other False\n"
        assert pool.ready == 2  # nothing was taken


async def test_the_pool_refills_in_the_background(pool: KernelPool, tmp_path: Path) -> None:
    sessions = [AsyncSession(tmp_path / str(i), pool=pool, preload=PRELOAD) for i in range(3)]
    try:
        await asyncio.gather(*(s.start() for s in sessions))
        for s in sessions:
            assert (await s.execute("'json' in dir()")).text == "True\n"
        await pool.wait_ready(120)
        assert pool.ready == 2
    finally:
        await asyncio.gather(*(s.close() for s in sessions))


async def test_a_failed_preload_is_reported(tmp_path: Path) -> None:
    async with KernelPool(1, preload="import no_such_module_here") as broken:
        with pytest.raises(KernelStartError, match="preload failed: ModuleNotFoundError"):
            await broken.wait_ready(120)
        assert broken.last_error is not None
    with pytest.raises(KernelStartError, match="preload failed: ZeroDivisionError"):
        async with AsyncSession(tmp_path, preload="1/0"):
            pass


async def test_a_kernel_that_cannot_enter_the_work_dir_runs_nothing(
    pool: KernelPool, tmp_path: Path
) -> None:
    session = AsyncSession(tmp_path / "gone", pool=pool, preload=PRELOAD)
    session.work_dir.rmdir()  # the move, queued ahead of the code, must fail
    try:
        result = await session.execute("open('marker', 'w').close()")
    except KernelStartError as exc:  # the kernel was already gone: its restart fails
        assert str(session.work_dir) in str(exc)
    else:
        assert result.status == "kernel_died"
        assert f"could not enter its work dir {session.work_dir}" in str(result.message)
    finally:
        await session.close()
    assert pool._home is not None and not list(pool._home.rglob("marker"))
