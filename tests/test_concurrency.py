"""Many sessions in one event loop, and many callers on one session: no cross-talk."""

from __future__ import annotations

import asyncio
import subprocess
import sys
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


MANY_SOCKETS = """
import asyncio, resource, sys
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 20000), hard))
from jupyter_client.session import Session
from kernelexec import AsyncSession
from kernelexec._backends._local_process import context
from kernelexec._backends._zmq import KernelSockets

async def main():
    async with AsyncSession(sys.argv[1]) as session:
        await session.execute("1")
        backend = session._backend
        info = backend.connection_info()
        # Three sockets each, as a kernel's: 400 of them is 1,200 sockets (each
        # its own client of the kernel, with its own identity, as another kernel's would be).
        key = info["key"].encode()
        held = [
            KernelSockets(info, Session(key=key), context(), max_message_bytes=64_000_000)
            for _ in range(400)
        ]
        print((await session.execute("print('still answers')")).stdout.strip())
        for sockets in held:
            sockets.close()

asyncio.run(main())
"""


def test_one_process_holds_the_sockets_of_hundreds_of_kernels(tmp_path: Path) -> None:
    # libzmq allows 1,023 sockets per context unless told otherwise: a server
    # with about 340 sessions failed every new one with "Too many open files".
    done = subprocess.run(
        [sys.executable, "-c", MANY_SOCKETS, str(tmp_path / "work")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "still answers"
