"""Containment's cost (issue #28): ``python contained.py kernelexec contained N``, JSON out.

One run, contained and uncontained sessions taking turns, so both meet the
same load: each sample of ``ready`` is a cold data-stack session (numpy,
pandas and matplotlib preloaded, no pool) from its creation to the result of
a DataFrame probe, its kernel forked from the zygote (warmed first, untimed);
``roundtrip`` is ``x + 1`` in one live session of each kind; ``fork`` is
``session.fork()`` to the copy's first result (a contained session is
checkpointed and restored, an uncontained one forked as a process). The target:
containment adds at most 5 ms to a start and nothing measurable to a round trip.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from worker import DATASTACK, PROBE, ZYGOTE_WAIT, run_script

ROUND_TRIPS = 10  # per sample of ready: x + 1 in each session of each kind


async def _session(root: Path, name: str, contained: bool) -> Any:
    from kernelexec import AsyncSession

    session = AsyncSession(root / name, preload=DATASTACK, sandbox=contained, timeout=120)
    await session.start()
    return session


async def _warm(root: Path) -> None:
    deadline = time.monotonic() + ZYGOTE_WAIT
    while True:
        session = await _session(root, "warm", False)
        forked = session._backend.forked
        await session.close()
        if forked:
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"no data-stack kernel was forked within {ZYGOTE_WAIT:.0f} s")


async def measure(impl: str, scenario: str, n: int, root: Path) -> dict[str, Any]:
    if impl != "kernelexec" or scenario != "contained":
        raise SystemExit(f"contained.py measures kernelexec's 'contained', not {impl} {scenario}")
    await _warm(root)
    ready: dict[bool, list[float]] = {True: [], False: []}
    trips: dict[bool, list[float]] = {True: [], False: []}
    forks: dict[bool, list[float]] = {True: [], False: []}
    forked = []
    for i in range(n):
        for contained in (i % 2 == 0, i % 2 != 0):  # which goes first alternates
            started = time.perf_counter()
            session = await _session(root, f"{i}-{contained}", contained)
            answer = await session.execute(PROBE)
            ready[contained].append(time.perf_counter() - started)
            assert "(1, 1)" in answer.text, answer.text
            assert (session.sandbox is not None) is contained
            forked.append(int(session._backend.forked))
            await session.execute("x = 1")
            for _ in range(ROUND_TRIPS):
                started = time.perf_counter()
                await session.execute("x + 1")
                trips[contained].append(time.perf_counter() - started)
            started = time.perf_counter()
            copy = await session.fork(root / f"{i}-{contained}-fork")
            answer = await copy.execute("x + 1")
            forks[contained].append(time.perf_counter() - started)
            assert answer.text == "2\n", answer.text
            assert copy.fork_report is not None
            assert copy.fork_report.method == ("checkpoint" if contained else "process")
            await copy.close()
            await session.close()
    return {
        "samples": ready[True],
        "plain": ready[False],
        "roundtrip": trips[True],
        "roundtrip_plain": trips[False],
        "fork": forks[True],
        "fork_plain": forks[False],
        "forked": forked,
    }


if __name__ == "__main__":
    run_script(measure, "kernelexec-bench-contained-")
