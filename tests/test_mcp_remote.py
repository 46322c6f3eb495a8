"""``kernelexec mcp --server URL``: an MCP client and an HTTP client share a server's sessions.

A real ``kernelexec serve`` on 127.0.0.1 and a real ``kernelexec mcp --server``
spoken to over stdio by the official SDK's client.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from _mcpclient import texts
from _serverproc import ServerProcess, free_port
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.types import CallToolResult, ImageContent

PLOT = "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()"


@asynccontextmanager
async def remote_mcp(server: ServerProcess, log: Path) -> AsyncIterator[ClientSession]:
    """``kernelexec mcp --server`` for ``server``, its token from the environment."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "kernelexec", "mcp", "--server", server.url],
        env={**os.environ, "KERNELEXEC_TOKEN": server.token},
    )
    with log.open("w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write) as client:
                await client.initialize()
                yield client


async def call(client: ClientSession, tool: str, **arguments: object) -> CallToolResult:
    return await client.call_tool(tool, arguments)


@pytest.fixture
def server(tmp_path: Path) -> ServerProcess:
    return ServerProcess(tmp_path / "work", "--max-sessions", "4")


async def test_a_session_made_over_http_is_listed_and_used_over_mcp(
    server: ServerProcess, tmp_path: Path
) -> None:
    try:
        made = server.http.post(
            "/sessions",
            json={"limits": {"max_text_chars": 1000}, "preload": "import math"},
        )
        assert made.status_code == 201, made.text
        sid = made.json()["id"]
        server.execute(sid, "x = 41\nopen('from-http.txt', 'w').write('written over HTTP')")
        async with remote_mcp(server, tmp_path / "mcp.log") as client:
            listed = json.loads(texts(await call(client, "list_sessions")))
            assert [(s["id"], s["options"]["limits"]["max_text_chars"]) for s in listed] == [
                (sid, 1000)
            ]
            # State set over HTTP, seen over MCP; and the session's limits hold there.
            seen = await call(client, "execute_code", code="print(x + 1, math.pi > 3)", session=sid)
            assert texts(seen).strip() == "42 True"
            long = await call(client, "execute_code", code="print('y' * 5000)", session=sid)
            assert len(texts(long)) < 3000
            await call(client, "execute_code", code="y = 'set over MCP'", session=sid)
            files = json.loads(texts(await call(client, "list_files", session=sid)))
            assert "from-http.txt" in {f["path"] for f in files["files"]}
            read = await call(client, "read_file", path="from-http.txt", session=sid)
            assert texts(read) == "written over HTTP"
            plot = await call(client, "execute_code", code=PLOT, session=sid)
            assert [c.mime_type for c in plot.content if isinstance(c, ImageContent)] == [
                "image/png"
            ]
            notebook = json.loads(texts(await call(client, "get_notebook", session=sid)))
            assert any("set over MCP" in "".join(c["source"]) for c in notebook["cells"])
            refused = [
                await call(client, "read_file", path=p, session=sid)
                for p in ("../x", "/etc/passwd", "missing.txt")
            ]
            assert all(r.is_error for r in refused)
        # ... and state set over MCP, seen over HTTP; the session outlived the MCP server.
        assert server.execute(sid, "print(y)")["stdout"] == "set over MCP\n"
    finally:
        assert server.stop() == 0
    assert "Traceback" not in server.log.read_text()


async def test_sessions_made_over_mcp_are_the_servers_with_its_rules(
    server: ServerProcess, tmp_path: Path
) -> None:
    try:
        async with remote_mcp(server, tmp_path / "mcp.log") as client:
            made = await call(
                client,
                "create_session",
                session="agent",
                preload="z = 7",
                limits={"max_outputs": 3},
            )
            assert not made.is_error, texts(made)
            sid = json.loads(texts(made))["id"]
            answer = await call(client, "execute_code", code="print(z * 6)", session="agent")
            assert texts(answer).strip() == "42"
            default = await call(client, "execute_code", code="w = 'default'")
            assert not default.is_error
            # The server's operator decides: no --allow-docker, no container.
            docker = await call(client, "create_session", session="boxed", docker={})
            python = await call(client, "create_session", session="sh", python="/bin/sh")
            bad = await call(client, "create_session", session="big", limits={"max_outputs": 0})
            taken = await call(client, "create_session", session="agent")
            listed = json.loads(texts(await call(client, "list_sessions")))
        assert docker.is_error and "--allow-docker" in texts(docker)
        assert python.is_error and "--allow-python" in texts(python)
        assert bad.is_error and "422" in texts(bad)
        assert taken.is_error and "exists" in texts(taken)
        assert {s.get("name") for s in listed} == {"agent", "default"}
        over_http = server.http.get(f"/sessions/{sid}").json()
        assert set(over_http["options"]) == {"preload", "limits"}
        assert over_http["options"]["preload"] == "z = 7"
        assert over_http["options"]["limits"]["max_outputs"] == 3
        assert server.execute(sid, "print(z)")["stdout"] == "7\n"
        assert len(server.http.get("/sessions").json()["sessions"]) == 2
    finally:
        assert server.stop() == 0


def start_remote(*args: str, token: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "KERNELEXEC_TOKEN"}
    if token is not None:
        env["KERNELEXEC_TOKEN"] = token
    return subprocess.run(
        [sys.executable, "-m", "kernelexec", "mcp", *args],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        env=env,
    )


def test_a_server_that_cannot_be_used_is_one_line_and_exit_2(server: ServerProcess) -> None:
    try:
        cases = [
            (("--server", f"http://127.0.0.1:{free_port()}"), server.token, "does not answer"),
            (("--server", "ftp://127.0.0.1:21"), server.token, "is not a server's URL"),
            (("--server", "127.0.0.1:8765"), server.token, "is not a server's URL"),
            (("--server", server.url), "wrong-token-0123456789", "refused the token"),
            (("--server", server.url), None, "KERNELEXEC_TOKEN"),
            (("--server", server.url, "--http", "--port", "x"), server.token, "port"),
        ]
        for args, token, said in cases:
            run = start_remote(*args, token=token)
            assert run.returncode == 2, (args, run.stderr)
            lines = run.stderr.strip().splitlines()
            assert len(lines) == 1 and said in lines[0], (args, run.stderr)
            assert server.token not in run.stderr
    finally:
        assert server.stop() == 0


async def test_a_venv_session_made_over_http_is_used_over_mcp(tmp_path: Path) -> None:
    venvs = tmp_path / "venvs"
    server = ServerProcess(tmp_path / "work", "--allow-packages", "--venv-root", str(venvs))
    try:
        made = server.http.post(
            "/sessions",
            json={"venv": "tools", "packages": ["rich"], "limits": {"max_text_chars": 1000}},
        )
        assert made.status_code == 201, made.text
        sid = made.json()["id"]
        server.execute(sid, "from rich.text import Text\nt = Text('over http')")
        async with remote_mcp(server, tmp_path / "mcp.log") as client:
            listed = json.loads(texts(await call(client, "list_sessions")))
            assert [(s["id"], s["options"]["venv"]) for s in listed] == [(sid, "tools")]
            used = await call(
                client, "execute_code", code="import sys\nprint(t.plain, sys.prefix)", session=sid
            )
            long = await call(client, "execute_code", code="print('y' * 5000)", session=sid)
        assert texts(used).strip() == f"over http {(venvs / 'tools').resolve()}"
        assert len(texts(long)) < 3000  # the session's limits, over MCP too
    finally:
        assert server.stop() == 0
