"""Background executions from the HTTP clients: started, left, found again by id, cancelled."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pytest
from _serverproc import ServerProcess

from kernelexec import (
    AsyncClient,
    AsyncRemoteExecution,
    Client,
    ExecutionEvent,
    ExecutionResult,
    RemoteExecution,
    ServerError,
)

COUNT = "import time\nfor i in range(1, 6):\n    print(i, flush=True)\n    time.sleep(0.4)\n'end'"
SLEEP = "import time\nprint('started', flush=True)\ntime.sleep(120)"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = ServerProcess(tmp_path_factory.mktemp("client-bg") / "root")
    try:
        yield proc
    finally:
        proc.stop()


def _text(events: list[ExecutionEvent]) -> str:
    return "".join(str(e.data.get("text", "")) for e in events if e.kind == "output")


def _started_elsewhere(server: ServerProcess, code: str) -> tuple[str, str]:
    """A session and a background execution started by another process, which then exits."""
    script = textwrap.dedent(
        f"""
        import json, sys
        from kernelexec import Client
        with Client({server.url!r}, token={server.token!r}) as client:
            session = client.session(timeout=120)
            execution = session.execute(sys.stdin.read(), background=True)
            print(json.dumps([session.id, execution.id, execution.state]))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], input=code, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    session_id, execution_id, state = json.loads(done.stdout)
    assert state in ("queued", "running")  # it answered at once, before the cell ended
    return session_id, execution_id


def test_a_client_that_left_is_replaced_by_one_that_reattaches_by_id(
    server: ServerProcess,
) -> None:
    session_id, execution_id = _started_elsewhere(server, COUNT)
    with Client(server.url, token=server.token) as client:
        session = client.attach(session_id)
        execution = session.execution(execution_id)
        assert isinstance(execution, RemoteExecution) and execution.id == execution_id
        assert [e.id for e in session.executions()] == [execution_id]
        first: list[ExecutionEvent] = []
        for event in execution.events():
            first.append(event)
            if len(first) == 2:
                break  # this reader goes away too, mid-stream
        assert [e.offset for e in first] == [0, 1]
        rest = list(execution.events(offset=first[-1].offset + 1))
        assert _text(first + rest) == "1\n2\n3\n4\n5\n"
        assert [e.offset for e in first + rest] == list(range(len(first) + len(rest)))
        result = execution.wait(60)
        assert isinstance(result, ExecutionResult) and result.ok
        assert result.stdout == "1\n2\n3\n4\n5\n" and "'end'" in result.text
        assert execution.state == "done" and execution.done() and execution.result == result
        # The same result the server holds, read the same way as a synchronous execute's.
        raw = server.http.get(f"/sessions/{session_id}/executions/{execution_id}").json()
        assert ExecutionResult.from_dict(raw["result"]) == result
        # After the end: the events are still there from any offset, and read() ends at once.
        assert execution.read(2) == (first + rest)[2:]
        assert execution.read(10_000) == []
        assert execution.cancel() is False  # finished: nothing to cancel
        assert session.execute("i").text.strip() == "5"  # a cell like any other


def test_cancel_from_a_new_client_interrupts_the_kernel(server: ServerProcess) -> None:
    with Client(server.url, token=server.token) as first:
        session = first.session(timeout=120)
        session.execute("kept = 7")
        started = session.execute(SLEEP, background=True)
        assert started.wait(0.5) is None  # still running: None, no exception
    with Client(server.url, token=server.token) as second:
        execution = second.attach(session.id).execution(started.id)
        for event in execution.events():
            assert _text([event]) == "started\n"
            break  # it has printed: it is in its sleep
        assert not execution.done()
        assert execution.cancel() is True
        assert execution.state == "done" and execution.status == "cancelled"
        result = execution.wait(0)
        assert result is not None and result.status == "cancelled"
        assert result.stdout == "started\n"
        assert execution.cancel() is False
        after = second.attach(session.id).execute("kept")
        assert after.ok and after.text.strip() == "7"  # interrupted, not restarted
        second.attach(session.id).close()


def test_unknown_ids_and_a_listener_in_the_background_are_refused(server: ServerProcess) -> None:
    with Client(server.url, token=server.token) as client, client.session() as session:
        with pytest.raises(ServerError) as refused:
            session.execution("0" * 32)
        assert refused.value.status == 404 and refused.value.code == "execution_not_found"
        with pytest.raises(ServerError) as bad:
            session.execution("../../health")
        assert bad.value.status == 404
        with pytest.raises(TypeError, match="events"):
            session.execute("1", background=True, on_output=print)  # type: ignore[call-overload]
        assert session.executions() == [] or all(e.state == "done" for e in session.executions())


async def test_async_client_reattaches_streams_and_cancels(server: ServerProcess) -> None:
    async with AsyncClient(server.url, token=server.token) as first:
        session = await first.session(timeout=120)
        counting = await session.execute(COUNT, background=True)
        assert isinstance(counting, AsyncRemoteExecution)
        assert counting.state in ("queued", "running")
    async with AsyncClient(server.url, token=server.token) as second:
        again = await second.attach(session.id)
        execution = await again.execution(counting.id)
        seen: list[ExecutionEvent] = []
        async for event in execution.events():
            seen.append(event)
            break
        rest = [e async for e in execution.events(seen[-1].offset + 1)]
        assert _text(seen + rest) == "1\n2\n3\n4\n5\n"
        result = await execution.wait(60)
        assert result is not None and result.stdout == "1\n2\n3\n4\n5\n"
        assert await execution.done()
        sleeping = await again.execute(SLEEP, background=True)
        listed = await again.executions()
        assert [e.id for e in listed] == [counting.id, sleeping.id]
        async for _ in sleeping.events():
            break
        assert await sleeping.cancel() is True
        cancelled = await sleeping.wait(30)
        assert cancelled is not None and cancelled.status == "cancelled"
        assert await sleeping.cancel() is False
        await again.close()


def test_wait_where_the_server_allows_only_short_waits(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    # --max-timeout 0.5: a ?wait= over that is refused (400); wait() takes shorter ones.
    proc = ServerProcess(tmp_path_factory.mktemp("short") / "root", "--max-timeout", "0.5")
    try:
        with Client(proc.url, token=proc.token) as client, client.session() as session:
            execution = session.execute("import time\ntime.sleep(0.3)\n6 * 7", background=True)
            result = execution.wait(60)
            assert result is not None and result.ok and result.text.strip() == "42"
    finally:
        proc.stop()
