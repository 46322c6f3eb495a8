"""Many sessions in one event loop, and many callers on one session: no cross-talk."""

from __future__ import annotations

import asyncio
from pathlib import Path

from kernelexec import AsyncSession

SESSIONS, EXECUTIONS = 20, 50


async def test_many_sessions_in_parallel_keep_their_own_state(tmp_path: Path) -> None:
    # Twenty kernels booting at once on a shared 2-core machine, next to other tests.
    sessions = [
        AsyncSession(tmp_path / f"s{i}", timeout=120, startup_timeout=180) for i in range(SESSIONS)
    ]
    await asyncio.gather(*(s.start() for s in sessions))
    try:

        async def drive(index: int, session: AsyncSession) -> list[str]:
            await session.execute(f"me = {index}\ncount = 0")
            seen = []
            for _ in range(EXECUTIONS):
                result = await session.execute("count += 1\nprint(me, count)")
                assert result.ok, result.text
                seen.append(result.stdout)
            return seen

        outcomes = await asyncio.gather(*(drive(i, s) for i, s in enumerate(sessions)))
    finally:
        await asyncio.gather(*(s.close() for s in sessions))
    for index, seen in enumerate(outcomes):
        assert seen == [f"{index} {n}\n" for n in range(1, EXECUTIONS + 1)]


async def test_executions_on_one_session_run_first_come_first_served(
    session: AsyncSession,
) -> None:
    await session.execute("order = []")
    calls = [
        session.execute(f"import time; time.sleep(0.02); order.append({n}); print({n})")
        for n in range(12)
    ]
    results = await asyncio.gather(*calls)
    assert [r.stdout for r in results] == [f"{n}\n" for n in range(12)]
    assert (await session.execute("order")).text == f"{list(range(12))}\n"
