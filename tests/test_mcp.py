"""``kernelexec mcp`` through the official SDK's own clients (stdio and streamable HTTP)."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx2
import pytest
from _mcpclient import stdio_mcp, texts
from _serverproc import TOKEN
from conftest import until
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult, ImageContent, ResourceLink

from kernelexec._mcp._files import FileRefused, where
from kernelexec._session._files import LocalAccess

TOOLS = {
    "execute_code",
    "create_session",
    "list_sessions",
    "restart_session",
    "interrupt_session",
    "list_files",
    "read_file",
    "get_notebook",
    "fork_session",
    "checkpoint_session",
    "restore_session",
    "list_variables",
    "inspect_variable",
    "get_execution",
    "cancel_execution",
}
PLOT = "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()\nprint('plotted')"


async def call(client: ClientSession, tool: str, **arguments: object) -> CallToolResult:
    return await client.call_tool(tool, arguments)


async def test_stdio_client_lists_tools_and_gets_text_and_an_image_of_a_plot(
    tmp_path: Path,
) -> None:
    async with stdio_mcp(tmp_path / "root") as client:
        listed = await client.list_tools()
        assert {tool.name for tool in listed.tools} == TOOLS
        execute = next(t for t in listed.tools if t.name == "execute_code")
        assert {"code", "language", "session", "timeout"} <= set(execute.input_schema["properties"])
        result = await call(client, "execute_code", code=PLOT)
    assert not result.is_error
    assert "plotted" in texts(result)
    images = [c for c in result.content if isinstance(c, ImageContent)]
    assert len(images) == 1 and images[0].mime_type == "image/png"
    assert base64.b64decode(images[0].data)[:8] == b"\x89PNG\r\n\x1a\n"
    assert result.structured_content is not None
    assert result.structured_content["status"] == "ok"
    assert "outputs" not in result.structured_content  # base64 stays out of the summary


async def test_sessions_keep_state_apart_and_can_be_restarted(tmp_path: Path) -> None:
    async with stdio_mcp(tmp_path / "root") as client:
        await call(client, "execute_code", code="x = 'default x'")
        await call(client, "execute_code", code="x = 'other x'", session="other")
        assert texts(await call(client, "execute_code", code="print(x)")).strip() == "default x"
        shell = await call(
            client,
            "execute_code",
            code="echo $((40 + 2)) in $PWD",
            language="bash",
            session="other",
        )
        assert texts(shell).strip() == f"42 in {(tmp_path / 'root' / 'other').resolve()}"
        infos = json.loads(texts(await call(client, "list_sessions")))
        assert [(i["id"], i["executions"]) for i in infos] == [("default", 2), ("other", 2)]
        restarted = await call(client, "restart_session", session="other")
        assert not restarted.is_error
        gone = await call(client, "execute_code", code="print(x)", session="other")
        unknown = await call(client, "restart_session", session="nope")
        bad_name = await call(client, "execute_code", code="1", session="../up")
    assert gone.is_error and "NameError" in texts(gone)
    assert unknown.is_error and "no session 'nope'" in texts(unknown)
    assert bad_name.is_error and "bad session name" in texts(bad_name)


async def test_errors_timeouts_and_interrupts(tmp_path: Path) -> None:
    # The default session's work dir, where the sleeping cell says it has begun.
    begun = tmp_path / "root" / "default" / "begun"
    async with stdio_mcp(tmp_path / "root") as client:
        failed = await call(client, "execute_code", code="print(undefined_variable)")
        await call(client, "execute_code", code="kept = 1")
        timed = await call(client, "execute_code", code="import time; time.sleep(30)", timeout=2)
        running = asyncio.ensure_future(
            call(
                client,
                "execute_code",
                code="import time; open('begun', 'w').close(); time.sleep(60)",
            )
        )
        # Interrupted once the cell runs: a fixed wait could end before it began.
        assert await until(begun.exists)
        started = time.monotonic()  # its 60 s sleep begins
        interrupted = await call(client, "interrupt_session")
        stopped = await running
        after = await call(client, "execute_code", code="print(kept)")
    assert failed.is_error and "NameError" in texts(failed) and "status: error" in texts(failed)
    assert timed.is_error and "Timed out after 2 s" in texts(timed)
    assert not interrupted.is_error
    assert stopped.is_error and "KeyboardInterrupt" in texts(stopped)
    # Had the interrupt not reached the kernel, the sleep would have run its 60 s.
    assert time.monotonic() - started < 30
    assert texts(after).strip() == "1"


async def test_large_images_come_as_resource_links_the_client_can_read(tmp_path: Path) -> None:
    code = (
        "import numpy as np\nfrom PIL import Image\n"
        "Image.fromarray(np.random.default_rng(0).integers(0, 255, (300, 300, 3), 'uint8'))"
    )
    async with stdio_mcp(tmp_path / "root") as client:
        result = await call(client, "execute_code", code=code)
        links = [c for c in result.content if isinstance(c, ResourceLink)]
        assert not [c for c in result.content if isinstance(c, ImageContent)]
        assert len(links) == 1 and links[0].mime_type == "image/png"
        assert links[0].size is not None and links[0].size > 64 * 1024
        read = await client.read_resource(links[0].uri)
    saved = tmp_path / "root" / "default" / links[0].name
    blob = getattr(read.contents[0], "blob", "")
    assert base64.b64decode(blob) == saved.read_bytes()


async def test_files_and_notebook(tmp_path: Path) -> None:
    outside = tmp_path / "secret.txt"
    outside.write_text("not for the agent")
    async with stdio_mcp(tmp_path / "root") as client:
        await call(
            client,
            "execute_code",
            code=(
                "import os\nopen('notes.txt', 'w').write('hello file')\n"
                f"os.symlink({str(outside)!r}, 'leak.txt')"
            ),
        )
        listed = json.loads(texts(await call(client, "list_files")))
        text = await call(client, "read_file", path="notes.txt")
        refusals = [
            await call(client, "read_file", path=p)
            for p in ("../secret.txt", str(outside), "leak.txt", "missing.txt")
        ]
        notebook = await call(client, "get_notebook")
    paths = {f["path"] for f in listed["files"]}
    assert {"notes.txt", "transcript.ipynb"} <= paths
    assert "leak.txt" not in paths  # a symlink leading out is not listed, as over HTTP
    assert texts(text) == "hello file"
    assert all(r.is_error for r in refusals)
    assert "not for the agent" not in "".join(texts(r) for r in refusals)
    cells = json.loads(texts(notebook))["cells"]
    assert any("notes.txt" in "".join(c["source"]) for c in cells)


async def test_where_refuses_what_leads_out(tmp_path: Path) -> None:
    (tmp_path / "in.txt").write_text("x")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "link").symlink_to(tmp_path.parent)
    files = LocalAccess(tmp_path)
    assert await where(files, "in.txt") == str((tmp_path / "in.txt").resolve())
    for path in (
        "",
        "/etc/passwd",
        "../in.txt",
        "sub/../../x",
        "sub/link/x",
        "sub",
        "a\x00b",
        "sub\\..\\..\\x",
    ):
        with pytest.raises(FileRefused):
            await where(files, path)


async def test_streamable_http(tmp_path: Path) -> None:
    log_path = tmp_path / "http.log"
    log = log_path.open("w")
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "kernelexec", "mcp", "--http", "--port", "0"),
            *("--work-root", str(tmp_path / "root")),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "KERNELEXEC_TOKEN": TOKEN},
    )
    try:
        deadline = time.monotonic() + 120
        while not (
            found := re.search(r"serving http://127\.0\.0\.1:(\d+)/mcp", log_path.read_text())
        ):
            assert proc.poll() is None, log_path.read_text()
            assert time.monotonic() < deadline, "the MCP HTTP server did not come up"
            await asyncio.sleep(0.2)
        assert "token" not in log_path.read_text()  # given, so not printed
        http = httpx2.AsyncClient(
            trust_env=False,
            timeout=httpx2.Timeout(30, read=120),
            headers={"Authorization": f"Bearer {TOKEN}"},
        )
        async with (
            http,
            streamable_http_client(f"http://127.0.0.1:{found.group(1)}/mcp", http_client=http) as (
                read,
                write,
            ),
            ClientSession(read, write) as client,
        ):
            await client.initialize()
            assert {t.name for t in (await client.list_tools()).tools} == TOOLS
            result = await call(client, "execute_code", code="print(6 * 7)")
        assert texts(result).strip() == "42"
    finally:
        proc.terminate()
        assert proc.wait(timeout=60) == 0  # SIGTERM is a clean stop
        log.close()
