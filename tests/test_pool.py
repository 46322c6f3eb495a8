"""The warm kernel pool: ready kernels, never shared, moved to each session's work dir."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from _pids import kernel_pid
from conftest import process_gone

from kernelexec import (
    AsyncSession,
    ConfigurationError,
    KernelPool,
    KernelStartError,
    Limits,
    LocalBackend,
)

# Every test here holds for kernels forked from a zygote and for spawned ones.
pytestmark = pytest.mark.usefixtures("kernel_start")

# The preload records where the kernel started: a pooled kernel started in the
# pool's own dir, a cold one in its session's work dir.
PRELOAD = "import json, statistics, os as _os\n_born_in = _os.getcwd()"
PROBE = "import os\nprint(os.getcwd(), os.environ['PWD'], 'json' in dir(), 'secret' in dir())"
WARM = "print(_born_in != os.getcwd(), os.getcwd())"


@pytest.fixture
async def pool(tmp_path: Path) -> AsyncIterator[KernelPool]:
    # A contained kernel can take a work dir below the pool's work root only.
    async with KernelPool(2, preload=PRELOAD, work_root=tmp_path) as p:
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
        pid_a = await kernel_pid(a)
    async with AsyncSession(tmp_path / "b", pool=pool, preload=PRELOAD) as b:
        second = await b.execute(PROBE)
        assert second.stdout == f"{b.work_dir} {b.work_dir} True False\n"
        assert await kernel_pid(b) != pid_a
    assert process_gone(pid_a)  # used once, then gone: never back in the pool


async def test_a_restart_keeps_the_work_dir_and_the_preload(
    pool: KernelPool, tmp_path: Path
) -> None:
    async with AsyncSession(tmp_path / "s", pool=pool, preload=PRELOAD) as s:
        await s.execute("secret = 1")
        await s.restart()
        after = await s.execute(PROBE)
        assert after.stdout == f"{s.work_dir} {s.work_dir} True False\n"


async def test_a_session_given_only_the_pool_takes_its_configuration_and_a_warm_kernel(
    pool: KernelPool, tmp_path: Path
) -> None:
    async with AsyncSession(tmp_path / "s", pool=pool) as s:
        result = await s.execute("import os\n" + WARM)
        assert result.stdout == f"True {s.work_dir}\n"  # a pooled kernel, moved here
        await s.restart()  # the session's own kernel from now on, with the pool's preload
        assert (await s.execute("'json' in dir()")).text == "True\n"


async def test_a_session_asking_for_another_configuration_is_warned_it_starts_cold(
    pool: KernelPool, tmp_path: Path
) -> None:
    with pytest.warns(UserWarning, match="starts its own kernel, cold") as caught:
        s = AsyncSession(tmp_path / "s", pool=pool, env={"MODE": "s3cret-value"}, preload="")
    warning = str(caught[0].message)
    assert caught[0].filename == __file__  # the caller's line, not kernelexec's
    assert "env with other values for MODE" in warning and "s3cret-value" not in warning
    assert "preload=None (the pool's: 'import json, statistics, os as _os" in warning
    async with s:
        result = await s.execute("import os; print(os.environ['MODE'], 'json' in dir())")
        assert result.stdout == "s3cret-value False\n"
        assert pool.ready == 2  # nothing was taken


async def test_a_session_that_agrees_with_the_pool_is_not_warned(
    pool: KernelPool, tmp_path: Path, recwarn: pytest.WarningsRecorder
) -> None:
    # Said again, the pool's own settings are no mismatch; limits that stay in
    # this process (max_text_chars) are none either.
    async with AsyncSession(
        tmp_path / "s",
        pool=pool,
        preload=PRELOAD,
        kernel_name="python3",
        env={},
        limits=Limits(max_text_chars=5_000),
    ) as s:
        assert (await s.execute("import os\n" + WARM)).stdout == f"True {s.work_dir}\n"
    assert not [w for w in recwarn if "cold" in str(w.message)]


async def test_a_pool_with_its_own_byte_caps_hands_them_to_its_sessions(tmp_path: Path) -> None:
    limits = Limits(max_output_bytes=5_000)
    async with KernelPool(1, preload=PRELOAD, limits=limits, work_root=tmp_path) as pool:
        await pool.wait_ready(120)
        async with AsyncSession(tmp_path / "s", pool=pool) as s:
            assert s.limits == limits
            assert (await s.execute("import os\n" + WARM)).stdout == f"True {s.work_dir}\n"
            result = await s.execute("'c' * 20_000")
        assert result.files == ["outputs/in2-result.txt"], result.message
        assert len(result.outputs[0]["data"]["text/plain"]) <= 5_000


async def test_a_closed_pool_or_a_backend_beside_a_pool_is_said(tmp_path: Path) -> None:
    pool = KernelPool(1)
    with pytest.raises(ConfigurationError, match="backend= or pool=, not both"):
        AsyncSession(tmp_path / "s", pool=pool, backend=LocalBackend())
    await pool.close()
    with pytest.warns(
        UserWarning, match="cold, instead of taking a ready one from its pool: the pool is closed"
    ):
        AsyncSession(tmp_path / "s", pool=pool)


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
        if session.sandbox is not None:
            # A contained kernel's own folder is renamed to the work dir, which
            # that makes again: the code ran there.
            assert result.ok and (session.work_dir / "marker").exists(), result
        else:
            assert f"could not enter its work dir {session.work_dir}" in str(result.message)
        if result.status != "kernel_died" and session.sandbox is None:
            # Or seen dead before the code was sent: the transcript's note of the death
            # made the folder again, and a new kernel ran the code there, saying so.
            assert result.ok and result.restarted, result
            assert (session.work_dir / "marker").exists()
    finally:
        await session.close()
    assert pool._home is not None and not list(pool._home.rglob("marker"))
