"""``kernelexec mcp --http --tenants``: every tool, called by one tenant on another's names."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
from _mcpclient import texts
from _tenants import ALL_BUT_ADMIN, bearer, write_tenants
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client


@asynccontextmanager
async def mcp_as(url: str, token: str) -> AsyncIterator[ClientSession]:
    http = httpx2.AsyncClient(
        trust_env=False, timeout=httpx2.Timeout(30, read=120), headers=bearer(token)
    )
    async with (
        http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as client,
    ):
        await client.initialize()
        yield client


def _start(
    tmp_path: Path, tenants_file: Path, *options: str
) -> tuple[subprocess.Popen[bytes], str, Path]:
    log_path = tmp_path / "mcp.log"
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "kernelexec", "mcp", "--http", "--port", "0"),
            *("--work-root", str(tmp_path / "root"), "--tenants", str(tenants_file)),
            *options,
        ],
        stdout=log_path.open("w"),
        stderr=subprocess.STDOUT,
        env={k: v for k, v in os.environ.items() if k != "KERNELEXEC_TOKEN"},
    )
    deadline = time.monotonic() + 120
    while not (found := re.search(r"serving http://127\.0\.0\.1:(\d+)/mcp", log_path.read_text())):
        assert proc.poll() is None, log_path.read_text()
        assert time.monotonic() < deadline, "the MCP HTTP server did not come up"
        time.sleep(0.2)
    return proc, f"http://127.0.0.1:{found.group(1)}/mcp", log_path


# Bob's value: it has letters outside hex, so no id (32 hex digits) can contain it.
BOBS = "bob-wrote-this"


async def test_no_tool_reaches_another_tenants_sessions(tmp_path: Path) -> None:
    tokens = write_tenants(
        tmp_path / "tenants.toml",
        {"alice": {}, "bob": {"scopes": [s for s in ALL_BUT_ADMIN if s != "fork"]}},
    )
    proc, url, log_path = _start(tmp_path, tmp_path / "tenants.toml")
    try:
        async with mcp_as(url, tokens["alice"]) as alice:
            await alice.call_tool(
                "execute_code", {"code": "x = 1\nopen('a.txt', 'w').write('alice')", "session": "s"}
            )
            made = await alice.call_tool("checkpoint_session", {"session": "s"})
            checkpoint = re.search(r"\b[0-9a-f]{32}\b", texts(made))
            assert checkpoint is not None, texts(made)
            started = await alice.call_tool(
                "execute_code",
                {"code": "import time; time.sleep(60)", "session": "s", "background": True},
            )
            execution = re.search(r"\b[0-9a-f]{32}\b", texts(started))
            assert execution is not None, texts(started)
        # Bob names Alice's session, checkpoint, execution and file in every tool.
        arguments: dict[str, dict[str, Any]] = {
            "execute_code": {"code": f"x = {BOBS!r}", "session": "s"},
            "create_session": {"session": "s"},
            "list_sessions": {},
            "restart_session": {"session": "s"},
            "interrupt_session": {"session": "s"},
            "fork_session": {"session": "s", "new_name": "mine"},
            "checkpoint_session": {"session": "s"},
            "restore_session": {"checkpoint": checkpoint.group(0), "name": "r"},
            "list_variables": {"session": "s"},
            "inspect_variable": {"name": "x", "session": "s"},
            "list_files": {"session": "s"},
            "read_file": {"path": "a.txt", "session": "s"},
            "get_notebook": {"session": "s"},
            "get_execution": {"execution_id": execution.group(0), "session": "s"},
            "cancel_execution": {"execution_id": execution.group(0), "session": "s"},
        }
        async with mcp_as(url, tokens["bob"]) as bob:
            tools = {tool.name for tool in (await bob.list_tools()).tools}
            assert tools == set(arguments), "a tool without arguments here: add it"
            seen: dict[str, str] = {}
            last = ["execute_code", "create_session"]  # Bob's own "s" made after the rest
            for tool in [*sorted(tools - set(last)), *last]:
                result = await bob.call_tool(tool, arguments[tool])
                seen[tool] = texts(result)
            for tool, text in seen.items():
                assert "alice" not in text, (tool, text)  # her file's content, her names
                assert BOBS not in text or tool == "get_notebook", (tool, text)
            assert "'fork' scope" in seen["fork_session"]
            # The file as a resource, by Alice's session name: Bob's door has no such file.
            try:
                answer = str(await bob.read_resource("kernelexec://sessions/s/files/a.txt"))
            except Exception as exc:  # the SDK raises the server's refusal
                answer = str(exc)
            assert "alice" not in answer
            assert checkpoint.group(0) not in seen["list_sessions"]
            assert "x" not in seen["list_variables"].split()
            # Bob's own "s" is his: his x is his.
            assert BOBS in texts(
                await bob.call_tool("execute_code", {"code": "print(x)", "session": "s"})
            )
        async with mcp_as(url, tokens["alice"]) as alice:
            running = await alice.call_tool(
                "get_execution", {"execution_id": execution.group(0), "session": "s", "wait": 0}
            )
            assert "running" in texts(running), texts(running)  # Bob's cancel reached nothing
            await alice.call_tool(
                "cancel_execution", {"execution_id": execution.group(0), "session": "s"}
            )
            after = await alice.call_tool(
                "execute_code", {"code": "print(x, open('a.txt').read())", "session": "s"}
            )
            assert texts(after).strip() == "1 alice"  # not restarted, not changed
    finally:
        proc.terminate()
        assert proc.wait(timeout=60) == 0, log_path.read_text()
    await asyncio.sleep(0)


async def test_mcp_server_url_carries_a_tenants_token_unchanged(tmp_path: Path) -> None:
    from test_mcp_remote import remote_mcp
    from test_tenants_server import client, tenants_server

    server, _, tokens = tenants_server(
        tmp_path, {"agent": {"scopes": [s for s in ALL_BUT_ADMIN if s != "fork"]}, "other": {}}
    )
    try:
        theirs = client(server, tokens["other"]).post("/sessions", json={}).json()["id"]
        server.token = tokens["agent"]  # what remote_mcp hands `kernelexec mcp --server`
        async with remote_mcp(server, tmp_path / "mcp.log") as agent:
            ran = await agent.call_tool("execute_code", {"code": "print(6 * 7)"})
            assert texts(ran).strip() == "42"
            listed = texts(await agent.call_tool("list_sessions", {}))
            assert theirs not in listed
            forked = await agent.call_tool("fork_session", {"session": "default"})
            assert forked.is_error and "'fork' scope" in texts(forked)
            refused = await agent.call_tool("list_variables", {"session": theirs})
            assert refused.is_error
    finally:
        server.token = None
        server.stop()


async def test_a_tenants_live_sessions_and_the_servers_cap_hold_over_mcp(tmp_path: Path) -> None:
    tokens = write_tenants(
        tmp_path / "tenants.toml", {"one": {"quotas": {"live_sessions": 1}}, "two": {}}
    )
    audit = tmp_path / "audit.jsonl"
    proc, url, log_path = _start(
        tmp_path, tmp_path / "tenants.toml", "--max-sessions", "2", "--audit-log", str(audit)
    )
    try:
        async with mcp_as(url, tokens["one"]) as one:
            assert not (await one.call_tool("execute_code", {"code": "1", "session": "a"})).is_error
            refused = await one.call_tool("execute_code", {"code": "1", "session": "b"})
            assert refused.is_error and "live_sessions" in texts(refused)
        async with mcp_as(url, tokens["two"]) as two:
            assert not (await two.call_tool("execute_code", {"code": "1", "session": "a"})).is_error
            full = await two.call_tool("execute_code", {"code": "1", "session": "b"})
            assert full.is_error and "--max-sessions" in texts(full)
    finally:
        proc.terminate()
        assert proc.wait(timeout=60) == 0, log_path.read_text()
    lines = [json.loads(line) for line in audit.read_text().splitlines()]
    ran = [(e["tenant"], e["session"], e["outcome"]) for e in lines if e["kind"] == "execution"]
    # The refused ones are there too: over MCP no other line would tell of them.
    assert sorted(ran) == [
        ("one", "a", "ok"),
        ("one", "b", "failed"),
        ("two", "a", "ok"),
        ("two", "b", "failed"),
    ]
    assert all(e["door"] == "mcp" for e in lines)
    assert {e["tenant"] for e in lines if e["kind"] == "request"} == {"one", "two"}
