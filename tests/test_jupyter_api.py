"""The Jupyter kernels API of `kernelexec serve`: what JupyterLab and jupyter console use."""

from __future__ import annotations

import http.server
import json
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest
import websocket
from _labproc import LabProcess
from _serverproc import ServerProcess, execute_request, free_port, jupyter_message, wait_for
from jupyter_client import BlockingKernelClient

from kernelexec import Session


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    # One server for the module's tests, which keep their sessions: room for all
    # of them on one xdist worker (the default 8 is reached with -n 4).
    proc = ServerProcess(tmp_path_factory.mktemp("jupyter-api") / "root", "--max-sessions", "64")
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def lab(server: ServerProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabProcess]:
    """A JupyterLab whose kernels are the server's (its gateway)."""
    proc = LabProcess(tmp_path_factory.mktemp("lab"), server)
    yield proc
    proc.stop()


def run_over_websocket(
    server: ServerProcess, kernel_id: str, code: str, *, silent: bool = False
) -> tuple[str, str]:
    """Runs code as JupyterLab would; its stdout, and the reply's status."""
    ws = websocket.create_connection(
        f"ws://127.0.0.1:{server.port}/api/kernels/{kernel_id}/channels",
        header=[f"Authorization: token {server.token}"],
        timeout=60,
    )
    try:
        msg = execute_request(code)
        msg["content"]["silent"] = silent
        ws.send(json.dumps(msg))
        stdout, status, idle = "", None, False
        # An aborted request's reply comes alone: no busy, no idle.
        while status is None or not (idle or status == "aborted"):
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


def test_an_agent_session_is_a_kernel_a_person_can_attach_to(
    server: ServerProcess, tmp_path: Path
) -> None:
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
    # A silent request (a frontend's own, completions and the like) is no one's cell.
    assert run_over_websocket(server, session_id, "unseen = 2", silent=True) == ("", "ok")
    # The person's variable is in the agent's kernel, and what they ran is in the agent's
    # transcript, where it ran, marked as theirs: a replay gives the kernel the agent saw.
    ran = server.execute(session_id, "print(mine)")
    assert ran["stdout"] == "1\n" and "secret_of_the_agent)" not in ran["text"]
    notebook = nbformat.reads(server.http.get(f"/sessions/{session_id}/notebook").text, 4)
    nbformat.validate(notebook)
    cells = [c for c in notebook.cells if c.cell_type == "code"]
    assert [c.source for c in cells] == [
        "secret_of_the_agent = 1234",
        "print(secret_of_the_agent)\nmine = 1",
        "print(mine)",
    ]
    by = [c.metadata["kernelexec"].get("by") for c in cells]
    assert by == [None, "attached", None]
    person = cells[1]
    # A reader of the notebook sees whose it is: the note just before it says so.
    note = notebook.cells[notebook.cells.index(person) - 1]
    assert note.cell_type == "markdown" and "by 'default', attached" in note.source
    assert person.metadata["kernelexec"]["who"] == "default"
    assert person.metadata["kernelexec"]["status"] == "ok"
    assert person.outputs[0]["text"] == "1234\n"
    assert "shell.execute_reply" in person.metadata["execution"]
    # A replay runs the person's cell where it ran, so the kernel is the one the agent saw.
    transcript = server.work_root / session_id / "transcript.ipynb"
    with Session.from_transcript(transcript, tmp_path / "replayed") as replayed:
        assert replayed.replay_report is not None and replayed.replay_report.ok
        assert replayed.execute("print(mine)").stdout == "1\n"


def test_closing_a_tab_cannot_end_the_agents_kernel(server: ServerProcess) -> None:
    session_id = server.create()
    pid = server.kernel_pid(session_id)
    # JupyterLab lets go of the kernel (a success, else its exit hangs); the kernel runs on.
    released = server.http.delete(f"/api/kernels/{session_id}")
    assert released.status_code == 200
    assert released.json()["shut_down"] is False
    assert "DELETE /sessions/" in released.json()["message"]
    assert server.kernel_pid(session_id) == pid
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


def attach_lab(lab: LabProcess, server: ServerProcess, session_id: str, *options: str) -> Any:
    return subprocess.run(
        [*lab.attach_args(server, session_id), *options],
        capture_output=True,
        text=True,
        timeout=120,
    )


def lab_session(lab: LabProcess, path: str) -> dict[str, Any] | None:
    return next((s for s in lab.sessions() if s["path"] == path), None)


def test_attach_lab_makes_the_notebook_on_the_agents_kernel(
    server: ServerProcess, lab: LabProcess
) -> None:
    session_id = server.create()
    opened = attach_lab(lab, server, session_id)
    assert opened.returncode == 0, opened.stderr
    path = f"debug-{session_id[:8]}.ipynb"
    assert opened.stdout == f"{lab.url}/lab/tree/{path}?token={lab.token}\n"
    # The notebook is there, through JupyterLab's contents API: the URL finds it ...
    model = lab.http.get(f"/api/contents/{path}").json()
    assert model["type"] == "notebook"
    assert model["content"]["metadata"]["kernelspec"]["name"] == "python3"
    assert [c["cell_type"] for c in model["content"]["cells"]] == ["markdown", "code"]
    assert session_id in model["content"]["cells"][0]["source"]
    # ... and its session is on the agent's kernel, which the browser then opens.
    bound = lab_session(lab, path)
    assert bound is not None and bound["kernel"]["id"] == str(uuid.UUID(hex=session_id))
    # Attaching again changes nothing and prints the same URL.
    again = attach_lab(lab, server, session_id)
    assert (again.returncode, again.stdout) == (0, opened.stdout), again.stderr
    assert lab.http.get(f"/api/contents/{path}").json()["content"] == model["content"]


def test_attach_lab_keeps_a_notebook_that_is_there(server: ServerProcess, lab: LabProcess) -> None:
    session_id = server.create()
    mine = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print('my notes')")])
    nbformat.write(mine, lab.root / "my notes.ipynb")
    opened = attach_lab(lab, server, session_id, "--notebook", "my notes.ipynb")
    assert opened.returncode == 0, opened.stderr
    assert opened.stdout == f"{lab.url}/lab/tree/my%20notes.ipynb?token={lab.token}\n"
    assert nbformat.read(lab.root / "my notes.ipynb", 4).cells[0].source == "print('my notes')"
    bound = lab_session(lab, "my notes.ipynb")
    assert bound is not None and bound["kernel"]["id"] == str(uuid.UUID(hex=session_id))


class _HtmlPage(http.server.BaseHTTPRequestHandler):
    """A web server that is not JupyterLab: a page for every request."""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.end_headers()
        self.wfile.write(b"<html>not JupyterLab</html>")

    def log_message(self, *args: Any) -> None:
        pass


def test_attach_lab_refuses_what_it_cannot_do(
    server: ServerProcess, lab: LabProcess, tmp_path: Path
) -> None:
    session_id = server.create()
    # A notebook JupyterLab has open on another kernel is not taken from it.
    other = lab.http.post(
        "/api/sessions",
        json={"path": "other.ipynb", "type": "notebook", "kernel": {"name": "python3"}},
    )
    assert other.status_code == 201, other.text
    refused = attach_lab(lab, server, session_id, "--notebook", "other.ipynb")
    assert refused.returncode == 2
    assert "other.ipynb" in refused.stderr and "--notebook" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert lab_session(lab, "other.ipynb")["kernel"]["id"] == other.json()["kernel"]["id"]  # type: ignore[index]
    assert lab.http.delete(f"/api/sessions/{other.json()['id']}").status_code == 204
    # Wrong ids and paths, a JupyterLab not running, a web server that is no JupyterLab.
    nowhere = f"http://127.0.0.1:{free_port()}"
    html = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _HtmlPage)
    threading.Thread(target=html.serve_forever, daemon=True).start()
    try:
        for target, args, said in (
            ("0" * 32, ["--notebook", "x.ipynb"], "no session"),
            ("../../health", ["--notebook", "x.ipynb"], "not a session id"),
            (session_id, ["--notebook", "x.txt"], ".ipynb"),
            (session_id, ["--notebook", "no/such/dir.ipynb"], "no/such/dir.ipynb"),
            (session_id, ["--notebook", "x.ipynb", "--lab", nowhere], "cannot reach JupyterLab"),
            (session_id, ["--notebook", "x.ipynb", "--lab-token", "wrong"], "--lab-token"),
            (
                session_id,
                ["--notebook", "x.ipynb", "--lab", f"http://127.0.0.1:{html.server_port}"],
                "does not answer as JupyterLab does",
            ),
        ):
            done = attach_lab(lab, server, target, *args)
            assert done.returncode == 2, (args, done.stdout)
            assert said in done.stderr and "Traceback" not in done.stderr, done.stderr
            assert done.stdout == ""
    finally:
        html.shutdown()
        html.server_close()
    assert not (lab.root / "x.ipynb").exists()


def test_attach_lab_refuses_a_jupyterlab_with_kernels_of_its_own(
    server: ServerProcess, tmp_path: Path
) -> None:
    # Such a JupyterLab would start a kernel of its own under the agent's kernel id.
    plain = LabProcess(tmp_path / "plain", None)
    try:
        session_id = server.create()
        refused = attach_lab(plain, server, session_id)
        assert refused.returncode == 2
        assert "--GatewayClient.url" in refused.stderr and server.url in refused.stderr
        assert plain.http.get("/api/kernels").json() == []
        assert plain.sessions() == []
        assert list(plain.root.iterdir()) == []
    finally:
        plain.stop()


def open_channels(lab: LabProcess, kernel_id: str) -> websocket.WebSocket:
    """A browser tab's connection to a kernel, through JupyterLab (and so to the server)."""
    ws = websocket.create_connection(
        f"ws://127.0.0.1:{lab.port}/api/kernels/{kernel_id}/channels",
        header=[f"Authorization: token {lab.token}"],
        timeout=60,
    )
    ws.send(json.dumps(jupyter_message("kernel_info_request", {})))
    while json.loads(ws.recv())["msg_type"] != "kernel_info_reply":
        pass
    return ws


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_jupyterlab_using_the_server_stops_and_leaves_the_agents_kernel(
    server: ServerProcess, tmp_path: Path, sig: signal.Signals
) -> None:
    session_id = server.create()
    pid = server.kernel_pid(session_id)
    gateway_lab = LabProcess(tmp_path / "lab", server)
    tabs: list[websocket.WebSocket] = []
    try:
        assert attach_lab(gateway_lab, server, session_id).returncode == 0
        # A notebook of the person's own: JupyterLab starts its kernel on the server.
        own = gateway_lab.http.post(
            "/api/sessions",
            json={"path": "mine.ipynb", "type": "notebook", "kernel": {"name": "python3"}},
        )
        assert own.status_code == 201, own.text
        own_kernel = own.json()["kernel"]["id"]
        assert own_kernel in [k["id"] for k in server.http.get("/api/kernels").json()]
        tabs = [open_channels(gateway_lab, k) for k in (str(uuid.UUID(hex=session_id)), own_kernel)]

        assert gateway_lab.exit_code_after(sig, within=30) is not None, gateway_lab.log.read_text()
        # The agent's kernel runs on, untouched; the kernel JupyterLab started is gone
        # and no longer holds one of the server's sessions.
        assert server.kernel_pid(session_id) == pid
        kernels = [k["id"] for k in server.http.get("/api/kernels").json()]
        assert str(uuid.UUID(hex=session_id)) in kernels and own_kernel not in kernels
        sessions = [s["id"] for s in server.http.get("/sessions").json()["sessions"]]
        assert own_kernel.replace("-", "") not in sessions
    finally:
        for tab in tabs:
            tab.close()
        gateway_lab.stop()


def test_a_flood_in_a_persons_cell_is_capped_in_the_agents_transcript(
    server: ServerProcess,
) -> None:
    """The kernel is the adversary: what it prints for a person's cell lands in the agent's
    transcript under the session's caps (200,000 stream characters by default), as an
    agent's would, not whole."""
    session_id = server.create()
    flood = "for i in range(300_000): print(i)"  # about 2 MB of text
    stdout, status = run_over_websocket(server, session_id, flood)
    assert status == "ok" and len(stdout) > 1_900_000  # the person saw it all, live
    server.execute(session_id, "1")  # the transcript is written before a result is given
    transcript = server.work_root / session_id / "transcript.ipynb"
    notebook = nbformat.read(transcript, as_version=4)
    (cell,) = [c for c in notebook.cells if c.cell_type == "code" and c.source == flood]
    kept = "".join(o.get("text", "") for o in cell.outputs)
    assert len(kept) < 250_000 and "299999\n" in kept, len(kept)
    assert transcript.stat().st_size < 400_000


BUSY = "import time; print('asleep', flush=True); time.sleep(600)"


def test_a_connection_flooding_the_kernel_with_executions_is_refused_past_a_bound(
    server: ServerProcess,
) -> None:
    """Each execution waiting for its reply is held by the bridge, to be recorded: past
    MAX_WAITING of them one more is refused at once with an error reply, not sent on."""
    from kernelexec._server._attached import MAX_WAITING

    session_id = server.create()
    ws = websocket.create_connection(
        f"ws://127.0.0.1:{server.port}/api/kernels/{session_id}/channels",
        header=[f"Authorization: token {server.token}"],
        timeout=60,
    )
    try:
        # Long enough that only the interrupt below ends it, however loaded the machine.
        busy = execute_request(BUSY)
        ws.send(json.dumps(busy))
        queued = [execute_request(f"n = {i}") for i in range(MAX_WAITING)]
        for msg in queued:
            ws.send(json.dumps(msg))
        refused_id = queued[-1]["header"]["msg_id"]  # the one past the bound
        asleep = False

        def heard(msg: dict[str, Any]) -> None:
            nonlocal asleep
            asleep |= (
                msg["msg_type"] == "stream"
                and msg["parent_header"].get("msg_id") == busy["header"]["msg_id"]
            )

        while True:
            reply = json.loads(ws.recv())
            heard(reply)
            if reply["parent_header"].get("msg_id") == refused_id:
                break
        assert reply["msg_type"] == "execute_reply", reply
        assert reply["content"]["ename"] == "TooManyWaiting", reply
        assert f"{MAX_WAITING:,} executions" in reply["content"]["evalue"]
        # An interrupt stops what the kernel runs when it comes: on a loaded machine
        # the sleep may not have started yet (the kernel still starting), and would
        # then run its 600 s. So only once it has said it sleeps.
        while not asleep:
            heard(json.loads(ws.recv()))
        # The kernel is interrupted: the sleep stops, and what was queued behind it is
        # aborted (ipykernel's way); the connection works on.
        assert server.http.post(f"/api/kernels/{session_id}/interrupt").status_code == 204
        # Read until the last one sent has its reply and each that ran has its idle too:
        # on a loaded machine some reach the kernel after it dropped its queue and run,
        # and one closed before its idle would be recorded "detached".
        sent = {m["header"]["msg_id"] for m in [busy, *queued[:-1]]}
        last_sent, replied, ran, idle = queued[-2]["header"]["msg_id"], False, set(), set()
        while not (replied and ran <= idle):
            reply = json.loads(ws.recv())
            parent = reply["parent_header"].get("msg_id")
            if parent not in sent:
                continue
            if reply["msg_type"] == "execute_reply":
                replied = replied or parent == last_sent
                content = reply["content"]
                if content["status"] != "aborted" and content.get("ename") != "Aborted":
                    ran.add(parent)  # an aborted one's reply comes alone, with no idle
            elif reply["msg_type"] == "status" and reply["content"]["execution_state"] == "idle":
                idle.add(parent)
    finally:
        ws.close()
    # ipykernel aborts what reaches it while it drops the queue; then the next one runs.
    tries, deadline = 0, time.monotonic() + 120
    while True:
        tries += 1
        stdout, status = run_over_websocket(server, session_id, "print('after')")
        if status != "aborted" or time.monotonic() > deadline:
            break
    assert (stdout, status) == ("after\n", "ok")
    # (The server's notebook route waits for the transcript's writes.)
    notebook = nbformat.reads(server.http.get(f"/sessions/{session_id}/notebook").text, 4)
    attached = [
        c
        for c in notebook.cells
        if c.cell_type == "code" and c.metadata.get("kernelexec", {}).get("by") == "attached"
    ]
    # Every execution sent on is a cell: the sleep, the queued ones (which the kernel
    # aborted, or ran if they reached it after it dropped its queue, as on a loaded
    # machine), each try; the refused one was never sent, and is none.
    assert len(attached) == 1 + (MAX_WAITING - 1) + tries, (len(attached), tries)
    sources = [c.source for c in attached]
    assert f"n = {MAX_WAITING - 1}" not in sources
    assert sorted(sources[:-tries]) == sorted([BUSY, *(f"n = {i}" for i in range(MAX_WAITING - 1))])
    statuses = [c.metadata["kernelexec"]["status"] for c in attached]
    assert statuses[-1] == "ok" and set(statuses) <= {"error", "aborted", "ok"}, statuses[-3:]
    assert statuses.count("error") == 1 and "aborted" in statuses  # the interrupted sleep


def test_a_persons_interrupt_stops_their_cell_while_the_agents_waits_behind_it(
    server: ServerProcess,
) -> None:
    """JupyterLab's interrupt is for the cell that runs: a person's, here, with the agent's
    execution sent to the kernel and waiting behind it. The session's own interrupt waits
    for its execution to begin; this one must not, or the person's cell runs on."""
    session_id = server.create()
    ws = websocket.create_connection(
        f"ws://127.0.0.1:{server.port}/api/kernels/{session_id}/channels",
        header=[f"Authorization: token {server.token}"],
        timeout=60,
    )
    agent: list[dict[str, Any]] = []
    try:
        busy = execute_request(BUSY)
        ws.send(json.dumps(busy))
        while True:  # asleep: only the interrupt ends it
            msg = json.loads(ws.recv())
            if (
                msg["msg_type"] == "stream"
                and msg["parent_header"].get("msg_id") == (busy["header"]["msg_id"])
            ):
                break
        waiting = threading.Thread(
            target=lambda: agent.append(server.execute(session_id, "print('agent')"))
        )
        waiting.start()
        assert wait_for(lambda: server.state(session_id)["state"] == "busy", 60)
        assert server.http.post(f"/api/kernels/{session_id}/interrupt").status_code == 204
        while True:
            msg = json.loads(ws.recv())
            if (
                msg["msg_type"] == "execute_reply"
                and msg["parent_header"].get("msg_id") == (busy["header"]["msg_id"])
            ):
                break
        assert msg["content"]["status"] == "error", msg["content"]
        assert msg["content"]["ename"] == "KeyboardInterrupt", msg["content"]
        waiting.join(120)
    finally:
        ws.close()
    # The agent's, queued behind the person's cell when it failed, is aborted by the kernel
    # (ipykernel's way with a cell that stops on error), or runs if it came just after.
    assert agent, "the agent's execution did not end"
    ended = agent[0]
    assert (ended["status"], ended["stdout"]) == ("ok", "agent\n") or (
        ended["status"] == "error" and ended["error"]["ename"] == "Aborted"
    ), ended


def test_a_kernel_cannot_hide_a_persons_cell_by_forging_its_reply(server: ServerProcess) -> None:
    """The kernel is the adversary: code in it publishes an "aborted" reply to the person's
    request, which would say the cell never ran. It is recorded all the same, marked."""
    session_id = server.create()
    forge = (
        "k = get_ipython().kernel\n"
        "k.session.send(k.iopub_socket, 'execute_reply', {'status': 'aborted'}, "
        "parent=k.get_parent())\n"
        "hidden = 'ran all the same'"
    )
    run_over_websocket(server, session_id, forge)
    assert server.execute(session_id, "print(hidden)")["stdout"] == "ran all the same\n"
    notebook = nbformat.reads(server.http.get(f"/sessions/{session_id}/notebook").text, 4)
    (cell,) = [c for c in notebook.cells if c.cell_type == "code" and c.source == forge]
    assert cell.metadata["kernelexec"]["by"] == "attached", cell.metadata
    assert cell.metadata["kernelexec"]["status"] == "aborted", cell.metadata
