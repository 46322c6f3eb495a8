"""MCP: an agent starts code in the background, its tool call ends, and it comes back by id.

Both doors: ``kernelexec mcp`` (its own sessions) and ``kernelexec mcp
--server URL`` (a ``kernelexec serve``'s, where the execution also outlives
the MCP server that started it).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from _mcpclient import stdio_mcp, texts
from _serverproc import ServerProcess
from mcp import ClientSession
from mcp.types import CallToolResult
from test_mcp_remote import remote_mcp

# Prints a and b, waits for a file named go in its work dir (the one folder a
# contained kernel shares with the test), prints c.
GATED = (
    "import os, time\nprint('a', flush=True)\nprint('b', flush=True)\n"
    "while not os.path.exists('go'):\n    time.sleep(0.05)\nprint('c')\n'end'"
)


async def _call(client: ClientSession, tool: str, **arguments: Any) -> CallToolResult:
    return await client.call_tool(tool, arguments)


async def _until(client: ClientSession, execution_id: str, session: str, seen: str) -> Any:
    """get_execution from offset 0 until its text shows ``seen``; the last structured answer."""
    deadline = time.monotonic() + 60
    while True:
        got = await _call(client, "get_execution", execution_id=execution_id, session=session)
        assert not got.is_error, texts(got)
        if seen in texts(got):
            return got.structured_content
        assert time.monotonic() < deadline, texts(got)
        await asyncio.sleep(0.1)


@asynccontextmanager
async def _door(kind: str, tmp_path: Path) -> AsyncIterator[tuple[Any, ServerProcess | None]]:
    """Opens MCP clients of one kind: ``open()`` a new one; the server, if remote."""
    if kind == "local":
        yield (lambda: stdio_mcp(tmp_path / "root")), None
        return
    server = ServerProcess(tmp_path / "work")
    try:
        yield (lambda: remote_mcp(server, tmp_path / f"mcp-{time.monotonic_ns()}.log")), server
    finally:
        server.stop()


@pytest.mark.parametrize("kind", ["local", "remote"])
async def test_start_leave_reattach_read_from_an_offset_and_finish(
    kind: str, tmp_path: Path
) -> None:
    async with _door(kind, tmp_path) as (open_client, server):
        async with open_client() as client:
            tools = {t.name for t in (await client.list_tools()).tools}
            assert {"get_execution", "cancel_execution"} <= tools
            started = await _call(client, "execute_code", code=GATED, background=True, timeout=120)
            assert not started.is_error, texts(started)
            sc = started.structured_content
            assert sc is not None and sc["state"] in ("queued", "running")
            execution_id = sc["execution_id"]
            assert execution_id in texts(started)
            if kind == "local":
                # The same MCP server, a new tool call: the first one has long ended.
                flag = tmp_path / "root" / "default" / "go"
                await _reattached(client, execution_id, "default", flag)
                return
            session = (await asyncio.to_thread(server.http.get, "/sessions")).json()["sessions"]
            [session_id] = [s["id"] for s in session]
            flag = tmp_path / "work" / session_id / "go"
        # That MCP server is gone; a new one finds the execution on the server by id.
        async with open_client() as client:
            await _reattached(client, execution_id, session_id, flag)


async def _reattached(client: ClientSession, execution_id: str, session: str, flag: Path) -> None:
    so_far = await _until(client, execution_id, session, "b\n")
    assert so_far["state"] == "running" and so_far["next_offset"] >= 2
    # From the offset it gave: none of what was read already.
    later = await _call(
        client,
        "get_execution",
        execution_id=execution_id,
        session=session,
        offset=so_far["next_offset"],
    )
    assert "a\n" not in texts(later) and "b\n" not in texts(later)
    assert later.structured_content is not None
    assert later.structured_content["state"] == "running"
    flag.touch()
    done = await _call(
        client, "get_execution", execution_id=execution_id, session=session, wait_seconds=60
    )
    # Once ended: what execute_code would have returned, plus the id.
    assert not done.is_error, texts(done)
    assert texts(done).startswith("a\nb\nc\n") and "'end'" in texts(done)
    sc = done.structured_content
    assert sc is not None and sc["state"] == "done" and sc["status"] == "ok"
    assert sc["execution_id"] == execution_id and sc["stdout"] == "a\nb\nc\n"
    direct = await _call(client, "execute_code", code="'end'", session=session)
    assert texts(direct) == "'end'\n" and "'end'\n" in texts(done)


@pytest.mark.parametrize("kind", ["local", "remote"])
async def test_cancel_a_sleeping_execution_and_unknown_ids(kind: str, tmp_path: Path) -> None:
    async with _door(kind, tmp_path) as (open_client, _), open_client() as client:
        session = "s1"
        kept = await _call(client, "execute_code", code="kept = 7", session=session)
        assert not kept.is_error, texts(kept)
        started = await _call(
            client,
            "execute_code",
            code="import time\nprint('in', flush=True)\ntime.sleep(120)",
            session=session,
            background=True,
            timeout=300,
        )
        assert started.structured_content is not None
        execution_id = started.structured_content["execution_id"]
        await _until(client, execution_id, session, "in\n")
        began = time.monotonic()
        cancelled = await _call(
            client, "cancel_execution", execution_id=execution_id, session=session
        )
        assert time.monotonic() - began < 60  # not the 120 s sleep
        sc = cancelled.structured_content
        assert sc is not None and sc["status"] == "cancelled" and sc["state"] == "done"
        assert cancelled.is_error and "in\n" in texts(cancelled)
        after = await _call(client, "execute_code", code="print(kept)", session=session)
        assert texts(after).strip() == "7"  # interrupted, not restarted
        again = await _call(client, "cancel_execution", execution_id=execution_id, session=session)
        assert again.structured_content is not None
        assert again.structured_content["status"] == "cancelled"  # already ended: its result
        unknown = await _call(client, "get_execution", execution_id="0" * 32, session=session)
        assert unknown.is_error and "no execution" in texts(unknown).lower()
        bad = await _call(
            client, "get_execution", execution_id=execution_id, session=session, offset=-1
        )
        assert bad.is_error and "offset" in texts(bad)
