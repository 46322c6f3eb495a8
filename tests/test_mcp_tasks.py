"""MCP Tasks (SEP-2663): a client that declares the extension gets a long execute_code as a task.

The SDK's real ``Client`` over stdio (and streamable HTTP, with tenants),
negotiating protocol 2026-07-28; the client half of the extension is
``_mcptasks.Tasks``. A task is a background execution: it is polled to the
result a call in the foreground would have given, cancelled as
``cancel_execution`` cancels (the session's state kept), and found only by
its own tenant. Clients that do not declare it see no change.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import anyio
import pytest
from _mcpclient import stdio_mcp, texts
from _mcptasks import (
    IDENTIFIER,
    CreatedTask,
    GetTask,
    ResultForTask,
    Task,
    TaskParams,
    Tasks,
    UpdateTask,
    cancel_task,
    get_task,
    http_tasks_client,
    stdio_tasks_client,
)
from _serverproc import ServerProcess
from _tenants import ALL_BUT_ADMIN, write_tenants
from mcp.client.session import ClientSession
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult
from mcp_types.jsonrpc import INVALID_PARAMS, METHOD_NOT_FOUND, MISSING_REQUIRED_CLIENT_CAPABILITY
from test_tenants_mcp import _start

from kernelexec._execution._background import MAX_QUEUED

# Twenty seconds, a line a second; its last value stays in the session.
TWENTY = (
    "import time\nfor i in range(20):\n    print('tick', i, flush=True)\n    time.sleep(1)\n'done'"
)
SLEEPS = "x = 'kept'\nimport time\nprint('sleeping', flush=True)\ntime.sleep(600)"


async def _until_it_printed(session: ClientSession, task_id: str) -> None:
    """Polls until the task's code has run past its first line (it says so in statusMessage)."""
    with anyio.fail_after(120):
        while "1 output" not in ((task := await get_task(session, task_id)).status_message or ""):
            assert task.status == "working", task
            await anyio.sleep(0.2)


@pytest.mark.timeout(240)
async def test_a_twenty_second_cell_runs_as_a_task_polled_to_its_result(tmp_path: Path) -> None:
    tasks = Tasks()
    async with stdio_tasks_client(tmp_path / "root", tasks=tasks) as client:
        assert client.protocol_version == "2026-07-28"
        assert IDENTIFIER in (client.server_capabilities.extensions or {})
        result = await client.call_tool("execute_code", {"code": TWENTY})
        # It came as a task, polled while it worked, to the result a foreground call gives.
        assert len(tasks.created) == 1
        created = tasks.created[0]
        assert created.status == "working" and created.task_id.startswith("default/")
        assert created.ttl_ms is None and created.poll_interval_ms == 1000
        working = [t for t in tasks.polled if t.status == "working"]
        assert working and all(t.task_id == created.task_id for t in tasks.polled)
        assert tasks.polled[-1].status == "completed"
        assert not result.is_error, texts(result)
        assert texts(result) == "".join(f"tick {i}\n" for i in range(20)) + "'done'\n"
        assert result.structured_content is not None
        assert result.structured_content["status"] == "ok"
        # The finished task stays readable, and the session kept the loop's variable.
        again = await get_task(client.session, created.task_id)
        assert again.status == "completed" and again.result == tasks.polled[-1].result
        quick = await client.call_tool("execute_code", {"code": "print(i)"})
        assert texts(quick) == "19\n"
        assert len(tasks.created) == 1  # a quick call is answered at once, not as a task


@pytest.mark.timeout(180)
async def test_a_cancelled_task_stops_and_the_session_keeps_its_state(tmp_path: Path) -> None:
    async with stdio_tasks_client(tmp_path / "root", tasks=Tasks()) as client:
        created = await client.session.call_tool(
            "execute_code", {"code": SLEEPS, "session": "s"}, allow_claimed=True
        )
        assert isinstance(created, CreatedTask), created
        assert created.task_id.startswith("s/")
        await _until_it_printed(client.session, created.task_id)
        ack = await cancel_task(client.session, created.task_id)
        assert (ack.model_extra or {}).get("resultType") == "complete"  # an empty ack
        task = await get_task(client.session, created.task_id)
        assert task.status == "cancelled" and task.result is None, task
        kept = await client.call_tool("execute_code", {"code": "print(x)", "session": "s"})
        assert texts(kept) == "kept\n"
        # The execution behind it is the background one cancel_execution knows.
        execution_id = created.task_id.split("/", 1)[1]
        seen = await client.call_tool(
            "get_execution", {"execution_id": execution_id, "session": "s"}
        )
        assert seen.structured_content is not None
        assert seen.structured_content["status"] == "cancelled", texts(seen)


@pytest.mark.timeout(180)
async def test_bad_task_requests_get_clear_errors(tmp_path: Path) -> None:
    async with stdio_tasks_client(tmp_path / "root", tasks=Tasks()) as client:
        await client.call_tool("execute_code", {"code": "1"})  # the session exists
        for task_id in ("default/" + "0" * 32, "nosuch/" + "0" * 32, "no-slash", "/", "x" * 300):
            with pytest.raises(MCPError) as got:
                await get_task(client.session, task_id)
            assert got.value.error.code == INVALID_PARAMS, (task_id, got.value.error)
            with pytest.raises(MCPError) as got:
                await cancel_task(client.session, task_id)
            assert got.value.error.code == INVALID_PARAMS, (task_id, got.value.error)
        with pytest.raises(MCPError) as got:
            await get_task(client.session, "default/" + "0" * 32)
        assert "Failed to retrieve task" in got.value.error.message
        update = UpdateTask(params={"taskId": "default/" + "0" * 32, "inputResponses": {}})
        with pytest.raises(MCPError) as got:
            await client.session.send_request(update, Task)
        assert got.value.error.code == INVALID_PARAMS
        # SEP-2663 removed tasks/result: the result is in tasks/get's answer.
        with pytest.raises(MCPError) as got:
            await client.session.send_request(ResultForTask(params=TaskParams(taskId="a/b")), Task)
        assert got.value.error.code == METHOD_NOT_FOUND


@pytest.mark.timeout(180)
async def test_clients_that_do_not_declare_tasks_see_no_change(tmp_path: Path) -> None:
    # 2026-07-28 without the extension: answered in the foreground, and tasks/* refused.
    async with stdio_tasks_client(tmp_path / "root") as client:
        assert client.protocol_version == "2026-07-28"
        result = await client.call_tool("execute_code", {"code": "import time; time.sleep(3); 7"})
        assert texts(result) == "7\n"
        request = GetTask(params=TaskParams(taskId="default/" + "0" * 32))
        with pytest.raises(MCPError) as got:
            await client.session.send_request(request, Task)
        assert got.value.error.code == MISSING_REQUIRED_CLIENT_CAPABILITY
    # The 2025 handshake (ClientSession.initialize): no extensions, no tasks/* methods.
    async with stdio_mcp(tmp_path / "old") as old:
        result = await old.call_tool("execute_code", {"code": "import time; time.sleep(3); 8"})
        assert texts(result) == "8\n"
        with pytest.raises(MCPError) as got:
            await old.send_request(request, Task)
        assert got.value.error.code == METHOD_NOT_FOUND


@pytest.mark.timeout(240)
async def test_over_http_a_tenant_finds_only_its_own_tasks(tmp_path: Path) -> None:
    tokens = write_tenants(
        tmp_path / "tenants.toml", {"alice": {}, "bob": {"scopes": list(ALL_BUT_ADMIN)}}
    )
    proc, url, log_path = _start(tmp_path, tmp_path / "tenants.toml")
    try:
        async with (
            http_tasks_client(url, tokens["alice"], Tasks()) as alice,
            http_tasks_client(url, tokens["bob"], Tasks()) as bob,
        ):
            assert alice.protocol_version == "2026-07-28"
            created = await alice.session.call_tool(
                "execute_code", {"code": SLEEPS}, allow_claimed=True
            )
            assert isinstance(created, CreatedTask), created
            # Bob has a "default" session too, and still does not find Alice's task.
            await bob.call_tool("execute_code", {"code": "1"})
            for ask in (get_task, cancel_task):
                with pytest.raises(MCPError) as got:
                    await ask(bob.session, created.task_id)
                assert got.value.error.code == INVALID_PARAMS
            await _until_it_printed(alice.session, created.task_id)
            await cancel_task(alice.session, created.task_id)
            task = await get_task(alice.session, created.task_id)
            assert task.status == "cancelled", task
            # A quick call over HTTP is answered at once, tasks or not.
            quick = await alice.call_tool("execute_code", {"code": "print(x)"})
            assert texts(quick) == "kept\n"
    finally:
        proc.terminate()
        await asyncio.to_thread(proc.wait, 60)
    assert "Traceback" not in log_path.read_text(), log_path.read_text()[-3000:]


@pytest.mark.timeout(240)
async def test_tasks_of_a_running_servers_sessions(tmp_path: Path) -> None:
    # kernelexec mcp --server URL: a task is an execution of the server's session.
    server = ServerProcess(tmp_path / "work")
    try:
        tasks = Tasks()
        options = ("--server", server.url)
        async with stdio_tasks_client(
            tmp_path / "root", *options, tasks=tasks, token=server.token
        ) as client:
            result = await client.call_tool(
                "execute_code", {"code": "import time; time.sleep(3); 5"}
            )
            assert texts(result) == "5\n" and len(tasks.created) == 1
            created = await client.session.call_tool(
                "execute_code", {"code": SLEEPS}, allow_claimed=True
            )
            assert isinstance(created, CreatedTask), created
            await _until_it_printed(client.session, created.task_id)
            await cancel_task(client.session, created.task_id)
            assert (await get_task(client.session, created.task_id)).status == "cancelled"
            kept = await client.call_tool("execute_code", {"code": "print(x)"})
            assert texts(kept) == "kept\n"
            with pytest.raises(MCPError) as got:
                await get_task(client.session, "default/" + "0" * 32)
            assert got.value.error.code == INVALID_PARAMS
    finally:
        server.stop()


@pytest.mark.timeout(240)
async def test_tasks_are_bounded_as_background_executions_are(tmp_path: Path) -> None:
    async with stdio_tasks_client(tmp_path / "root", tasks=Tasks()) as client:
        code = {"code": "import time; time.sleep(600)", "session": "q"}
        ids = []
        for _ in range(MAX_QUEUED):
            started = await client.call_tool("execute_code", code | {"background": True})
            assert started.structured_content is not None, texts(started)
            ids.append(started.structured_content["execution_id"])
        refused = await client.session.call_tool("execute_code", code, allow_claimed=True)
        assert isinstance(refused, CallToolResult) and refused.is_error, refused
        assert "executions not yet ended" in texts(refused)
        # Cancelling one makes room for a task.
        await client.call_tool("cancel_execution", {"execution_id": ids[-1], "session": "q"})
        created = await client.session.call_tool("execute_code", code, allow_claimed=True)
        assert isinstance(created, CreatedTask), created
