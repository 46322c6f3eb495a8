"""Background executions in the library: ``AsyncSession.execute(..., background=True)``."""

from __future__ import annotations

import asyncio
import time

import pytest

from kernelexec import AsyncSession, Execution, ExecutionEvent, QueueFullError, SessionBusyError
from kernelexec._execution._background import MAX_QUEUED, MAX_QUEUED_CODE, _Log

COUNT = "import time\nfor i in range(1, 6):\n    print(i, flush=True)\n    time.sleep(0.3)\n'end'"
SLEEP = "import time\ntime.sleep(60)"


def _text(events: list[ExecutionEvent]) -> str:
    return "".join(str(e.data.get("text", "")) for e in events if e.kind == "output")


async def _until_running(execution: Execution, within: float = 30.0) -> None:
    deadline = time.monotonic() + within
    while execution.state != "running":
        assert time.monotonic() < deadline, f"still {execution.state} after {within:g} s"
        await asyncio.sleep(0.05)


async def test_returns_at_once_then_waits(session: AsyncSession) -> None:
    execution = await session.execute(COUNT, background=True)
    assert isinstance(execution, Execution)
    assert not execution.done() and execution.state in ("queued", "running")
    assert await execution.wait(0.01) is None or execution.done()
    result = await execution.wait(60)
    assert result is not None and result.ok
    assert result.stdout == "1\n2\n3\n4\n5\n" and "'end'" in result.text
    assert execution.state == "done" and execution.result is result
    assert execution.cancel() is False  # finished: nothing to cancel
    # It is a cell like any other: in the transcript, and the session goes on.
    assert (await session.execute("i")).text.strip() == "5"


async def test_events_from_the_start_and_from_a_middle_offset(session: AsyncSession) -> None:
    execution = await session.execute(COUNT, background=True)
    live: list[ExecutionEvent] = []
    async for event in execution.events():
        live.append(event)
        if len(live) == 1:
            assert not execution.done()  # the events come while it runs
    assert execution.done()
    assert _text(live) == "1\n2\n3\n4\n5\n"
    assert [e.offset for e in live] == list(range(len(live)))
    # A reader that comes back after the second event gets only what it missed.
    again = [e async for e in execution.events(offset=live[1].offset + 1)]
    assert again == live[2:]
    assert _text(again) == "".join(_text([e]) for e in live[2:])
    whole = [e async for e in execution.events(0)]
    assert whole == live  # and from 0, everything, after the end too


async def test_cancel_interrupts_a_running_execution(session: AsyncSession) -> None:
    await session.execute("kept = 7")
    execution = await session.execute(f"print('started', flush=True)\n{SLEEP}", background=True)
    await _until_running(execution)
    async for _ in execution.events():
        break  # the cell has printed: it is in its sleep
    began = time.monotonic()
    assert execution.cancel() is True
    result = await execution.wait(30)
    assert result is not None and result.status == "cancelled"
    assert result.stdout == "started\n"
    assert "interrupted" in (result.message or "")
    assert time.monotonic() - began < 20  # not the 60 s sleep
    # The kernel was interrupted, not restarted: its state is there.
    after = await session.execute("kept")
    assert after.ok and after.text.strip() == "7"


async def test_a_second_execution_queues_and_a_queued_one_can_be_cancelled(
    session: AsyncSession,
) -> None:
    first = await session.execute(
        "import time\nprint('first', flush=True)\ntime.sleep(2)", background=True
    )
    second = await session.execute("print('second')", background=True)
    third = await session.execute("ran_third = True", background=True)
    await _until_running(first)
    assert second.state == "queued" and third.state == "queued"
    assert third.cancel() is True
    cancelled = await third.wait(30)
    assert cancelled is not None and cancelled.status == "cancelled"
    assert "before it ran" in (cancelled.message or "")
    assert not first.done()  # cancelling a queued one left the running one alone
    done_second = await second.wait(60)
    done_first = first.result
    assert done_first is not None and done_first.ok and done_first.stdout == "first\n"
    assert done_second is not None and done_second.stdout == "second\n"
    assert second.started is not None and first.finished is not None
    assert second.started >= first.finished  # ISO 8601 UTC text sorts in time order
    probe = await session.execute("'ran_third' in dir()")
    assert probe.text.strip() == "False"


async def test_cancelled_at_once_it_never_runs_and_says_so(session: AsyncSession) -> None:
    """A cancel before the execution's task took a step (found trying the README's example)."""
    run = await session.execute("ran = True", background=True)
    assert run.cancel() is True
    result = await asyncio.wait_for(run.wait(), 30)
    assert result is not None and result.status == "cancelled", result
    assert run.state == "done" and run.done()
    assert "nothing ran" in result.text
    assert (await session.execute("print('ran' in dir())")).stdout == "False\n"


async def test_close_with_one_running(tmp_path: object) -> None:
    session = AsyncSession(timeout=120, interrupt_grace=2)
    await session.start()
    running = await session.execute(SLEEP, background=True)
    queued = await session.execute("print('never')", background=True)
    await _until_running(running)
    began = time.monotonic()
    await session.close()
    assert time.monotonic() - began < 30
    result = await running.wait(30)
    # Interrupted by the close, as a synchronous execution would be, and said so.
    assert result is not None and result.status == "cancelled", result
    assert result.message is not None and "closed while this code ran" in result.message
    never = await queued.wait(30)
    assert never is not None and never.status == "cancelled" and never.stdout == ""


async def test_a_full_queue_refuses_with_queue_full_error_and_has_room_once_one_ends(
    session: AsyncSession,
) -> None:
    running = await session.execute(SLEEP, background=True)
    queued = [await session.execute(f"n = {i}", background=True) for i in range(MAX_QUEUED - 1)]
    with pytest.raises(QueueFullError, match="32 executions not yet ended") as refused:
        await session.execute("n = 'one too many'", background=True)
    assert isinstance(refused.value, SessionBusyError) and refused.value.retry_after > 0
    running.cancel()
    await running.wait(30)
    assert (await session.execute("'room again'", background=True)) is not None
    for execution in queued:
        await execution.wait(30)
    big = "#" + "a" * (MAX_QUEUED_CODE // 2)
    first = await session.execute(SLEEP, background=True)
    held = await session.execute(big, background=True)
    with pytest.raises(QueueFullError, match="characters of code"):
        await session.execute(big, background=True)  # the first two hold half and a bit
    first.cancel()
    held.cancel()


async def test_on_output_also_gets_the_outputs(session: AsyncSession) -> None:
    seen: list[str] = []
    execution = await session.execute(
        "print('a')\nprint('b')", background=True, on_output=lambda live: seen.append(live.text)
    )
    result = await execution.wait(60)
    assert result is not None and "".join(seen) == "a\nb\n" == result.stdout


def test_the_log_stays_bounded_and_says_what_a_late_reader_missed() -> None:
    log = _Log(max_chars=10_000)
    for i in range(100_000):
        log.add({"output_type": "stream", "name": "stdout", "text": f"{i}\n"})
    assert log.end == 100_000
    kept = log.since(log.first)
    assert sum(len(e.data["text"]) + 100 for e in kept) <= 10_000
    assert kept[-1].data["text"] == "99999\n"
    late = log.since(0)
    assert late[0].kind == "dropped" and late[0].data["outputs"] == log.first
    assert late[0].offset == log.first - 1 and late[1:] == kept
    # One output bigger than the whole log, or not strict JSON, is a dropped event in its place.
    log.add({"output_type": "stream", "name": "stdout", "text": "x" * 20_000})
    log.add({"output_type": "execute_result", "data": {"application/json": float("nan")}})
    last = log.since(log.end - 2)
    assert [e.kind for e in last] == ["dropped", "dropped"]
    assert last[0].data == {"outputs": 1, "chars": 20_000}
