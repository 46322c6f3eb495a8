"""The server's doors and limits under attack (issue 14): each test broke the code before it.

A real ``kernelexec serve`` (or ``kernelexec mcp``) process each time, spoken
to over 127.0.0.1 the way a careless or hostile client (or kernel) would.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
import tracemalloc
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import httpx2
import jsonschema
import pytest
import websocket
from _serverproc import (
    ServerProcess,
    descendants,
    free_port,
    jupyter_message,
    kernels_below,
    peak_growth,
    reply_to,
)
from conftest import process_gone
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import TextContent

from kernelexec._server._sse import OutputQueue

LIMIT = 1024 * 1024  # the servers here run with --max-body-mb 1
DEEP = b"[" * 100_000 + b"]" * 100_000


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = ServerProcess(
        tmp_path_factory.mktemp("hostile") / "work", "--max-body-mb", "1", "--max-sessions", "6"
    )
    yield proc
    assert proc.stop() == 0


@pytest.fixture(scope="module")
def sid(server: ServerProcess) -> str:
    return server.create()


def kernels(server: ServerProcess) -> list[str]:
    return [k["id"] for k in server.http.get("/api/kernels").json()]


def raw_request(port: int, head: str, chunks: Iterator[bytes]) -> tuple[int, dict[str, Any]]:
    """Sends a request by hand (its body may never end); the status and JSON body of the answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        sock.sendall(head.encode("ascii"))
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            for chunk in chunks:
                sock.sendall(chunk)
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_WR)
        answer = b""
        with contextlib.suppress(ConnectionResetError):
            while part := sock.recv(65536):
                answer += part
                headers, _, body = answer.partition(b"\r\n\r\n")
                length = re.search(rb"content-length: (\d+)", headers, re.IGNORECASE)
                if length and len(body) >= int(length.group(1)):
                    break
    headers, _, body = answer.partition(b"\r\n\r\n")
    return int(headers.split()[1]), json.loads(body)


def chunked(total: int, size: int = 256 * 1024) -> Iterator[bytes]:
    """``total`` bytes of JSON-ish filler as HTTP chunks, never ending with the last chunk."""
    sent = 0
    while sent < total:
        yield f"{size:x}\r\n".encode() + b" " * size + b"\r\n"
        sent += size


# -- item 6: every body limit applies to every route; a bad body is a 4xx


def test_a_jupyter_kernel_start_obeys_the_body_limit(server: ServerProcess) -> None:
    before = kernels(server)
    start = f"POST /api/kernels HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {server.token}\r\n"
    declared = f"{start}Content-Length: {200 * 1024 * 1024}\r\n\r\n"
    status, body = raw_request(server.port, declared, iter([b"{}"]))
    assert (status, body["error"]) == (413, "body_too_large")
    assert "--max-body-mb" in body["message"]
    streamed = f"{start}Transfer-Encoding: chunked\r\n\r\n"
    with peak_growth(server.proc.pid) as grown:
        status, body = raw_request(server.port, streamed, chunked(50 * 1024 * 1024))
    assert (status, body["error"]) == (413, "body_too_large")
    assert grown[0] < 20, f"the server grew {grown[0]:.0f} MB reading a refused body"
    assert kernels(server) == before


def test_every_route_refuses_a_body_over_the_limit(server: ServerProcess, sid: str) -> None:
    kernel = str(uuid.UUID(hex=sid))
    routes = [
        ("GET", "/health"),
        ("GET", "/sessions"),
        ("POST", "/sessions"),
        ("GET", f"/sessions/{sid}"),
        ("POST", f"/sessions/{sid}/execute"),
        ("POST", f"/sessions/{sid}/interrupt"),
        ("POST", f"/sessions/{sid}/restart"),
        ("GET", f"/sessions/{sid}/files"),
        ("PUT", f"/sessions/{sid}/files/big.bin"),
        ("GET", f"/sessions/{sid}/notebook"),
        ("GET", "/api/kernels"),
        ("POST", "/api/kernels"),
        ("GET", f"/api/kernels/{kernel}"),
        ("POST", f"/api/kernels/{kernel}/interrupt"),
        ("POST", f"/api/kernels/{kernel}/restart"),
        ("DELETE", f"/api/kernels/{kernel}"),
        ("GET", "/no/such/route"),
    ]
    server.execute(sid, "kept = 'still here'")
    before = kernels(server)
    body = b'{"code": "kept = 0"}' + b" " * LIMIT
    for method, path in routes:
        answer = server.http.request(method, path, content=body)
        assert answer.status_code == 413, (method, path, answer.status_code, answer.text[:200])
        assert answer.json()["error"] == "body_too_large"
    # Nothing happened: no new kernel, no restart, no upload, the state is there.
    assert kernels(server) == before
    assert not (server.work_root / sid / "big.bin").exists()
    result = server.execute(sid, "print(kept)")
    assert result["stdout"] == "still here\n" and not result["restarted"]


def test_deep_or_malformed_json_is_a_400_everywhere(server: ServerProcess, sid: str) -> None:
    before = kernels(server)
    for path in ("/sessions", f"/sessions/{sid}/execute", "/api/kernels"):
        answer = server.http.post(path, content=DEEP)
        assert answer.status_code == 400, (path, answer.text[:200])
        assert answer.json()["error"] == "invalid_json" and "too deep" in answer.json()["message"]
    for body in (b"[1]", b"nope", b'{"name": 5}', b'{"name": "cobol"}', b'{"env": []}'):
        answer = server.http.post("/api/kernels", content=body)
        assert answer.status_code == 400, (body, answer.text[:200])
        assert answer.json()["error"] in ("invalid_json", "invalid_request", "unknown_kernel")
    assert kernels(server) == before


# -- item 7: DELETE while a session starts


def test_delete_while_starting_is_a_clean_409_for_the_creator(tmp_path: Path) -> None:
    # The preload holds each kernel's start for seconds: time to DELETE it meanwhile.
    server = ServerProcess(tmp_path / "work", "--preload", "import time; time.sleep(5)")
    try:
        answer: list[httpx.Response] = []
        creator = threading.Thread(
            target=lambda: answer.append(server.http.post("/sessions", json={}))
        )
        creator.start()
        deadline = time.monotonic() + 60
        listed: list[dict[str, Any]] = []
        while not listed and time.monotonic() < deadline:
            listed = server.http.get("/sessions").json()["sessions"]
        [starting] = listed
        assert starting["state"] == "starting"
        deleted = server.http.delete(f"/sessions/{starting['id']}")
        assert deleted.status_code == 200, deleted.text
        creator.join(120)
        [created] = answer
        assert created.status_code == 409, created.text
        assert created.json()["error"] == "session_deleted"
        assert "create a new session" in created.json()["message"]
        assert server.http.get("/sessions").json()["sessions"] == []
        # Its kernel was shut down once its start ended; nothing is left running.
        deadline = time.monotonic() + 60
        while kernels_below(server.proc.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert kernels_below(server.proc.pid) == set()
        assert server.create()  # and the server still works
    finally:
        assert server.stop() == 0
    assert "Traceback" not in server.log.read_text()


# -- item 11: the Jupyter channels and attached consoles cannot end an agent's kernel


def test_shutdown_and_restart_over_the_channels_are_refused(
    server: ServerProcess, sid: str
) -> None:
    server.execute(sid, "kept = 'still here'")
    pid = server.kernel_pid(sid)
    ws = websocket.create_connection(
        f"ws://127.0.0.1:{server.port}/api/kernels/{uuid.UUID(hex=sid)}/channels",
        header=[f"Authorization: Bearer {server.token}"],
        timeout=60,
    )
    try:
        for channel in ("control", "shell"):
            for restart in (False, True):
                request = jupyter_message("shutdown_request", {"restart": restart}, channel)
                reply = reply_to(ws, request, "shutdown_reply")
                assert reply["channel"] == channel
                content = reply["content"]
                assert content["status"] == "error" and content["restart"] == restart
                route = "/restart" if restart else "DELETE /sessions"
                assert route in content["evalue"]
        # A frame nested too deep for JSON does not break the channels either.
        ws.send("[" * 100_000 + "]" * 100_000)
        # `exit` typed into a notebook on the agent's kernel leaves it running too.
        run = jupyter_message(
            "execute_request",
            {"code": "exit", "silent": False, "store_history": True, "allow_stdin": False},
            "shell",
        )
        assert reply_to(ws, run, "execute_reply")["content"]["status"] == "ok"
        time.sleep(1)  # ipykernel ended the kernel 0.1 s after an exit
    finally:
        ws.close()
    assert not process_gone(pid)
    # The agent's own `exit` says so, and leaves the kernel running as well.
    said = server.execute(sid, "exit")
    assert said["status"] == "ok" and "does not end this kernel" in said["stderr"]
    time.sleep(1)
    result = server.execute(sid, "print(kept)")
    assert result["stdout"] == "still here\n" and not result["restarted"]
    assert server.kernel_pid(sid) == pid


def test_exit_in_an_attached_console_leaves_the_agents_kernel_running(
    server: ServerProcess, sid: str
) -> None:
    server.execute(sid, "secret_of_the_agent = 1234")
    pid = server.kernel_pid(sid)
    # As a person would: a console, a look at the agent's state, then `exit`.
    console = subprocess.run(
        [sys.executable, "-m", "kernelexec", "attach", sid, "--url", server.url],
        input="print(secret_of_the_agent + 1)\nmine = 1\nexit\n",
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "KERNELEXEC_TOKEN": server.token},
    )
    assert console.returncode == 0, console.stderr
    assert "1235" in console.stdout
    time.sleep(1)
    assert not process_gone(pid)
    result = server.execute(sid, "print(secret_of_the_agent, mine)")
    assert result["stdout"] == "1234 1\n" and not result["restarted"]


# -- item 11: kernelexec mcp --http needs a token


async def test_mcp_over_http_needs_the_token(tmp_path: Path) -> None:
    port = free_port()  # not --port 0: the code before this change knew no such thing
    log_path = tmp_path / "mcp.log"
    with log_path.open("w") as log:
        proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "kernelexec", "mcp", "--http", "--port", str(port)),
                *("--work-root", str(tmp_path / "root")),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={k: v for k, v in os.environ.items() if k != "KERNELEXEC_TOKEN"},
        )
    try:
        url = f"http://127.0.0.1:{port}/mcp"
        deadline = time.monotonic() + 120
        while "serving" not in log_path.read_text() or not _listening(port):
            assert proc.poll() is None, log_path.read_text()
            assert time.monotonic() < deadline, log_path.read_text()
            await asyncio.sleep(0.2)
        initialize = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "stranger", "version": "1"},
            },
        }
        accept = {"Accept": "application/json, text/event-stream"}
        async with httpx.AsyncClient(trust_env=False, timeout=60) as http:
            for headers in ({}, {"Authorization": "Bearer wrong-token-0123456789"}):
                refused = await http.post(url, json=initialize, headers={**accept, **headers})
                assert refused.status_code == 401, refused.text[:300]
                assert refused.headers["www-authenticate"] == "Bearer"
        found = re.search(r"token (\S+)", log_path.read_text())
        assert found, log_path.read_text()
        token = found.group(1)
        http2 = httpx2.AsyncClient(
            trust_env=False,
            timeout=httpx2.Timeout(30, read=120),
            headers={"Authorization": f"Bearer {token}"},
        )
        async with (
            http2,
            streamable_http_client(url, http_client=http2) as (read, write),
            ClientSession(read, write) as client,
        ):
            await client.initialize()
            result = await client.call_tool("execute_code", {"code": "print(6 * 7)"})
        assert "".join(c.text for c in result.content if isinstance(c, TextContent)) == "42\n"
    finally:
        proc.terminate()
        assert proc.wait(timeout=60) == 0


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


# -- item 5: the server's own handling of big outputs stays bounded


def test_a_huge_live_output_is_never_framed() -> None:
    queue = OutputQueue(max_chars=1_000_000)
    huge = {"output_type": "display_data", "data": {"text/plain": "x" * 50_000_000}}
    nan = {"output_type": "display_data", "data": {}, "metadata": {"x": float("nan")}}
    deep: dict[str, Any] = {}
    inner = deep
    for _ in range(5_000):
        inner["a"] = inner = {}
    tracemalloc.start()
    try:
        for output in (huge, nan, {"output_type": "display_data", "data": deep}):
            queue.put(output)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 5_000_000, f"putting the outputs allocated {peak / 1e6:.0f} MB"
    [dropped] = queue.take()
    event = json.loads(dropped.split("data: ", 1)[1])
    assert dropped.startswith("event: dropped") and event["outputs"] == 3
    assert event["chars"] > 50_000_000


def test_a_50_mb_exception_or_result_keeps_the_server_small(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "work")
    try:
        sid = server.create()
        server.execute(sid, "warm = 1")
        for code in ("raise ValueError('x' * 50_000_000)", "'y' * 50_000_000"):
            for route in ("execute", "execute/stream"):
                with peak_growth(server.proc.pid) as grown:
                    answer = server.http.post(f"/sessions/{sid}/{route}", json={"code": code})
                assert answer.status_code == 200
                # Under the result caps (1 MB an output, text 20,000 characters), with room.
                assert len(answer.content) < 5_000_000, (code, route, len(answer.content))
                if route == "execute":
                    result = answer.json()
                else:
                    event, data = answer.text.rstrip("\n").rsplit("\n", 2)[-2:]
                    assert event == "event: result"
                    result = json.loads(data.removeprefix("data: "))
                assert result["status"] == ("error" if code.startswith("raise") else "ok")
                assert grown[0] < 50, f"{route} of {code!r} grew the server {grown[0]:.0f} MB"
    finally:
        assert server.stop() == 0


HOSTILE_DISPLAY = """\
import json, sys
from IPython.display import publish_display_data
session = get_ipython().kernel.session
packer = session.pack
sys.setrecursionlimit(100_000)
deep = {{}}
inner = deep
for _ in range(5_000):
    inner["a"] = inner = {{}}
# Packed by hand, as a kernel's own code can: NaN, which strict JSON has no word
# for, or nesting deeper than the server's decoder goes.
session.pack = lambda o: json.dumps(o, default=str, allow_nan=True).encode()
try:
    publish_display_data({{"text/plain": "hostile"}}, metadata={metadata})
finally:
    session.pack = packer
"""


@pytest.mark.parametrize("route", ["execute", "execute/stream"])
@pytest.mark.parametrize("metadata", ["{'x': float('nan')}", "{'deep': deep}"], ids=["nan", "deep"])
def test_a_message_the_server_cannot_encode_or_decode_still_gets_a_result(
    server: ServerProcess, sid: str, route: str, metadata: str
) -> None:
    code = HOSTILE_DISPLAY.format(metadata=metadata)
    answer = server.http.post(f"/sessions/{sid}/{route}", json={"code": code})
    assert answer.status_code == 200, answer.text[:300]
    if route == "execute":
        result = answer.json()
    else:
        data = answer.text.rstrip("\n").rsplit("\n", 1)[-1]
        result = json.loads(data.removeprefix("data: "))
    assert result["status"] == "ok", result["text"]
    displays = [o for o in result["outputs"] if o["output_type"] == "display_data"]
    if "nan" in metadata:  # sent, with null where NaN was
        assert displays == [
            {
                "output_type": "display_data",
                "data": {"text/plain": "hostile"},
                "metadata": {"x": None},
            }
        ]
    else:  # nested past what the server decodes: dropped, like any malformed message
        assert displays == []
    assert server.execute(sid, "print('fine')")["stdout"] == "fine\n"


# -- item 10: a PUT without a body; paths the schema forbids


def test_a_put_without_a_body_is_refused(server: ServerProcess, sid: str) -> None:
    missing = server.http.put(f"/sessions/{sid}/files/empty.txt")
    assert missing.status_code == 400 and missing.json()["error"] == "missing_body"
    assert not (server.work_root / sid / "empty.txt").exists()
    empty = server.http.put(
        f"/sessions/{sid}/files/empty.txt",
        content=b"",
        headers={"Content-Type": "application/octet-stream"},
    )
    assert empty.status_code == 201 and empty.json()["size"] == 0


def test_the_schema_states_the_paths_the_server_refuses(server: ServerProcess, sid: str) -> None:
    schema = server.http.get("/openapi.json").json()
    [path] = [
        p
        for p in schema["paths"]["/sessions/{session_id}/files/{path}"]["parameters"]
        if p["name"] == "path"
    ]
    allowed = ["a.txt", "outputs/0001-1.png", "100%.txt", "a%zz", "...", "x/.hidden"]
    refused = ["a\\b", "../up", "a/./b", "/etc/passwd", "C:x", "%2e%2e/x", "a//b", "a/", "a\x00b"]
    for raw in allowed:
        jsonschema.validate(raw, path["schema"])
    for raw in refused:
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(raw, path["schema"])
        # Encoded once, as a client would, dots too (or httpx would resolve "..").
        encoded = quote(raw, safe="/").replace(".", "%2E")
        answer = server.http.put(f"/sessions/{sid}/files/{encoded}", content=b"x")
        assert answer.status_code == 400, (raw, answer.status_code, answer.text[:200])
        assert answer.json()["error"] == "invalid_path"
    stream = schema["paths"]["/sessions/{session_id}/execute/stream"]["post"]
    events = stream["responses"]["200"]["content"]["text/event-stream"]
    assert events["itemSchema"] == {"$ref": "#/components/schemas/Event"}


# -- item 5, MCP: read_file of a huge file


async def test_mcp_read_file_of_a_huge_file_reads_only_its_head(tmp_path: Path) -> None:
    root = tmp_path / "root"
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "kernelexec", "mcp", "--work-root", str(root)]
    )
    with (tmp_path / "mcp-stderr.log").open("w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write) as client:
                await client.initialize()
                sparse = "import os\nwith open('big.txt', 'w') as f:\n    f.truncate(400 * 2**20)"
                made = await client.call_tool("execute_code", {"code": sparse})
                assert not made.is_error
                server_pid = _mcp_server_pid(root)
                with peak_growth(server_pid) as grown:
                    answer = await client.call_tool("read_file", {"path": "big.txt"})
                text = "".join(c.text for c in answer.content if isinstance(c, TextContent))
                assert len(text) < 101_000
                assert "kernelexec://sessions/default/files/big.txt" in text
                assert f"{400 * 2**20:,} bytes" in text
                assert grown[0] < 50, f"read_file grew the MCP server {grown[0]:.0f} MB"
                with peak_growth(server_pid) as grown:
                    with pytest.raises(Exception, match="--max-file-mb"):
                        await client.read_resource("kernelexec://sessions/default/files/big.txt")
                # Refused before any of it is read (not after reading the 32 MB allowed).
                assert grown[0] < 10, f"reading the resource grew the server {grown[0]:.0f} MB"


def _mcp_server_pid(root: Path) -> int:
    for pid in descendants(os.getpid()):
        with contextlib.suppress(OSError):
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if b"mcp" in argv and str(root).encode() in argv:
                return pid
    raise AssertionError("no kernelexec mcp process below this one")
