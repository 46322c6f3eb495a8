"""Server limits and shutdown: max sessions, idle culling, SIGTERM. A real process each."""

from __future__ import annotations

import json
import signal
import threading
from pathlib import Path
from typing import Any

import httpx
import nbformat
from _serverproc import ServerProcess, descendants, wait_for
from conftest import process_gone


def test_429_at_max_sessions(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "work", "--max-sessions", "2", "--idle-timeout", "0")
    try:
        first, _ = server.create(), server.create()
        refused = server.http.post("/sessions", json={})
        assert refused.status_code == 429
        body = refused.json()
        assert body["error"] == "too_many_sessions" and "--max-sessions" in body["message"]
        assert len(server.http.get("/sessions").json()["sessions"]) == 2
        server.http.delete(f"/sessions/{first}")
        server.create()  # a slot is free again
        assert server.http.post("/sessions", json={}).status_code == 429
    finally:
        assert server.stop() == 0


def test_a_session_slower_to_start_than_the_idle_timeout_is_idle_only_from_its_start(
    tmp_path: Path,
) -> None:
    server = ServerProcess(tmp_path / "work", "--idle-timeout", "1", "--no-suspend")
    try:
        # Its kernel takes 3 s to start, three idle timeouts.
        sid = server.create(preload="import time; time.sleep(3)")
        assert server.execute(sid, "print('first')")["stdout"] == "first\n"
    finally:
        assert server.stop() == 0


def test_idle_session_is_culled_and_reported(tmp_path: Path) -> None:
    # --no-suspend: culled as before (test_suspend.py has the suspending default).
    server = ServerProcess(
        tmp_path / "work", "--idle-timeout", "1", "--max-sessions", "1", "--no-suspend"
    )
    try:
        sid = server.create()
        server.execute(sid, "open('made.txt', 'w').write('kept')")
        pid = server.kernel_pid(sid)
        assert wait_for(lambda: server.http.get(f"/sessions/{sid}").json()["state"] == "culled")
        assert wait_for(lambda: process_gone(pid))
        listed = server.http.get("/sessions").json()["sessions"]
        assert [(s["id"], s["state"]) for s in listed] == [(sid, "culled")]

        for route in ("execute", "execute/stream", "interrupt", "restart"):
            refused = server.http.post(f"/sessions/{sid}/{route}", json={"code": "1"})
            assert refused.status_code == 409, route
            assert refused.json()["error"] == "session_culled"
            assert "create a new session" in refused.json()["message"]
        # Files and transcript are kept and still served.
        assert server.http.get(f"/sessions/{sid}/files/made.txt").content == b"kept"
        notebook = nbformat.reads(server.http.get(f"/sessions/{sid}/notebook").text, 4)
        assert len([c for c in notebook.cells if c.cell_type == "code"]) == 2
        # A culled session holds no kernel, so it does not count against --max-sessions.
        server.create()
    finally:
        assert server.stop() == 0


def test_sigterm_interrupts_closes_and_leaves_no_kernel(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "work")
    busy, idle = server.create(timeout=300), server.create()
    server.execute(idle, "print('recorded')")
    kernels = {server.kernel_pid(busy), server.kernel_pid(idle)}
    children = descendants(server.proc.pid)
    assert kernels <= children

    answer: list[dict[str, Any]] = []
    started = threading.Event()

    def run_forever() -> None:
        with httpx.Client(
            base_url=server.url,
            headers=server.auth,
            trust_env=False,
            timeout=httpx.Timeout(30, read=300),
        ) as http:
            code = "import time\nprint('go', flush=True)\nwhile True:\n    time.sleep(0.05)"
            with http.stream(
                "POST", f"/sessions/{busy}/execute/stream", json={"code": code}
            ) as response:
                for line in response.iter_lines():
                    started.set()
                    if line.startswith("data: "):
                        answer.append(json.loads(line[6:]))

    reader = threading.Thread(target=run_forever)
    reader.start()
    assert started.wait(60)
    assert server.stop(signal.SIGTERM) == 0
    reader.join(60)
    assert not reader.is_alive()
    assert answer[-1]["status"] == "cancelled", answer[-1]
    assert "The session was closed while this code ran." in answer[-1]["message"]
    assert all(process_gone(pid) for pid in children | kernels)
    assert "stopped; every kernel is shut down" in server.log.read_text()
    # Transcripts were flushed: both sessions' cells are on disk.
    for sid, code in ((busy, "while True"), (idle, "print('recorded')")):
        notebook = nbformat.read(server.work_root / sid / "transcript.ipynb", as_version=4)
        nbformat.validate(notebook)
        assert any(code in c.source for c in notebook.cells)


def test_sigint_exits_0_too(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "work")
    sid = server.create()
    pid = server.kernel_pid(sid)
    assert server.stop(signal.SIGINT) == 0
    assert process_gone(pid)


def test_generated_token_is_printed_and_required(tmp_path: Path) -> None:
    import subprocess
    import sys

    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kernelexec",
            "serve",
            "--port",
            "0",
            "--work-root",
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline() for _ in range(2)]
        # --port 0: the server picks a free port and prints it.
        url = lines[0].split("serving ", 1)[1].split()[0]
        assert url.startswith("http://127.0.0.1:") and not url.endswith(":0")
        token = lines[1].split("token ", 1)[1].strip()
        assert len(token) >= 32
        assert wait_for(lambda: _up(url))
        assert httpx.get(f"{url}/sessions", trust_env=False).status_code == 401
        ok = httpx.get(
            f"{url}/sessions", headers={"Authorization": f"Bearer {token}"}, trust_env=False
        )
        assert ok.status_code == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0


def _up(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", trust_env=False).status_code == 200
    except httpx.TransportError:
        return False


def test_non_loopback_host_without_token_is_refused(tmp_path: Path) -> None:
    import subprocess
    import sys

    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "kernelexec",
            "serve",
            "--host",
            "0.0.0.0",
            "--work-root",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 2 and "--token" in proc.stderr


def test_a_port_in_use_is_a_clear_error(tmp_path: Path) -> None:
    import socket
    import subprocess
    import sys

    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        proc = subprocess.run(
            [sys.executable, "-m", "kernelexec", "serve", "--port", str(port), "--token", "t" * 16],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp_path,
        )
    assert proc.returncode == 2
    assert f"cannot listen on 127.0.0.1:{port}: Address already in use" in proc.stderr
    assert "choose another port" in proc.stderr and "Traceback" not in proc.stderr


async def test_the_listening_socket_gives_connections_without_nagle() -> None:
    # asyncio turns on TCP_NODELAY only for sockets whose proto says TCP; a
    # socket without it made every HTTP round trip wait ~40 ms for a delayed ACK.
    import asyncio
    import socket

    from kernelexec._server._serve import _listen

    accepted: asyncio.Queue[int] = asyncio.Queue()

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        await accepted.put(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
        writer.close()

    server = await asyncio.start_server(on_connect, sock=_listen("127.0.0.1", 0))
    async with server:
        port = server.sockets[0].getsockname()[1]
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        assert await asyncio.wait_for(accepted.get(), 30) != 0
        writer.close()
