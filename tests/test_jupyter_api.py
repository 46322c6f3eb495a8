"""The Jupyter kernels API of `kernelexec serve`: what JupyterLab and jupyter console use."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest
import websocket
from _serverproc import ServerProcess, jupyter_message
from jupyter_client import BlockingKernelClient


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = ServerProcess(tmp_path_factory.mktemp("jupyter-api") / "root")
    yield proc
    proc.stop()


def run_over_websocket(server: ServerProcess, kernel_id: str, code: str) -> tuple[str, str]:
    """Runs code as JupyterLab would; its stdout, and the reply's status."""
    ws = websocket.create_connection(
        f"ws://127.0.0.1:{server.port}/api/kernels/{kernel_id}/channels",
        header=[f"Authorization: token {server.token}"],
        timeout=60,
    )
    try:
        msg = jupyter_message(
            "execute_request",
            {
                "code": code,
                "silent": False,
                "store_history": True,
                "user_expressions": {},
                "allow_stdin": False,
            },
        )
        ws.send(json.dumps(msg))
        stdout, status, idle = "", None, False
        while status is None or not idle:
            reply = json.loads(ws.recv())
            if reply["parent_header"].get("msg_id") != msg["header"]["msg_id"]:
                continue  # the agent's traffic, or another client's
            if reply["msg_type"] == "stream":
                stdout += reply["content"]["text"]
            elif reply["msg_type"] == "execute_reply":
                status = reply["content"]["status"]
            elif reply["msg_type"] == "status":
                idle = reply["content"]["execution_state"] == "idle"
        return stdout, status
    finally:
        ws.close()


def test_an_agent_session_is_a_kernel_a_person_can_attach_to(server: ServerProcess) -> None:
    session_id = server.create()
    server.execute(session_id, "secret_of_the_agent = 1234")
    kernels = server.http.get("/api/kernels", headers={"Authorization": f"token {server.token}"})
    assert kernels.status_code == 200
    # kernel ids are the session ids in UUID form, which jupyter_server's routes require
    assert str(uuid.UUID(hex=session_id)) in [k["id"] for k in kernels.json()]
    specs = server.http.get("/api/kernelspecs").json()
    assert specs["default"] in specs["kernelspecs"]

    stdout, status = run_over_websocket(server, session_id, "print(secret_of_the_agent)\nmine = 1")
    assert (stdout, status) == ("1234\n", "ok")
    # the person's variable is in the agent's kernel, but not in the agent's transcript
    assert server.execute(session_id, "print(mine)")["stdout"] == "1\n"
    notebook = nbformat.reads(server.http.get(f"/sessions/{session_id}/notebook").text, 4)
    assert all("secret_of_the_agent)" not in c.source for c in notebook.cells)


def test_closing_a_tab_cannot_end_the_agents_kernel(server: ServerProcess) -> None:
    session_id = server.create()
    assert server.http.delete(f"/api/kernels/{session_id}").status_code == 403
    assert server.execute(session_id, "1 + 1")["text"] == "2\n"
    started = server.http.post("/api/kernels", json={"name": "python3"})
    assert started.status_code == 201
    kernel_id = started.json()["id"]
    assert server.http.delete(f"/api/kernels/{kernel_id}").status_code == 204


def test_the_channels_need_the_token(server: ServerProcess) -> None:
    session_id = server.create()
    with pytest.raises(websocket.WebSocketBadStatusException):
        websocket.create_connection(
            f"ws://127.0.0.1:{server.port}/api/kernels/{session_id}/channels", timeout=30
        )
    assert (
        server.http.get("/api/kernels", headers={"Authorization": "token wrong"}).status_code == 401
    )


def test_attach_prints_a_working_console_command(server: ServerProcess) -> None:
    session_id = server.create()
    server.execute(session_id, "answer = 42")
    pid = server.kernel_pid(session_id)
    attach = subprocess.Popen(
        [
            *(sys.executable, "-m", "kernelexec", "attach", session_id),
            *("--url", server.url, "--token", server.token, "--print"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert attach.stdout is not None
        command = attach.stdout.readline().strip()
        assert command.startswith("jupyter console --existing "), attach.stderr.read()
        connection_file = Path(command.split("--existing ", 1)[1].split()[0])
        info = json.loads(connection_file.read_text())
        assert oct(connection_file.stat().st_mode & 0o777) == "0o600"
        # The console talks to attach's stand-in on 127.0.0.1, with a key of its own:
        # the kernel's key never leaves the server.
        assert info["ip"] == "127.0.0.1" and info["transport"] == "tcp"
        client = BlockingKernelClient()
        client.load_connection_info(info)
        client.start_channels()
        printed: list[str] = []

        def hook(msg: dict[str, Any]) -> None:
            if msg["msg_type"] == "stream":
                printed.append(msg["content"]["text"])

        try:
            reply = client.execute_interactive("print(answer)", timeout=60, output_hook=hook)
            # What a console does on `exit` or Ctrl-D with --existing: asks the kernel to stop.
            client.shutdown()
            refused = client.get_control_msg(timeout=60)
        finally:
            client.stop_channels()
        assert reply["content"]["status"] == "ok" and printed == ["42\n"]
        assert refused["msg_type"] == "shutdown_reply"
        assert refused["content"]["status"] == "error"
    finally:
        attach.send_signal(signal.SIGINT)
        assert attach.wait(60) == 0
    assert not connection_file.exists()  # it holds the stand-in's key: gone with it
    assert server.kernel_pid(session_id) == pid
