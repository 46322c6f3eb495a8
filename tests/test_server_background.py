"""Background executions over HTTP: started, left, found again by id, streamed, cancelled."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from _serverproc import ServerProcess

COUNT = "import time\nfor i in range(1, 6):\n    print(i, flush=True)\n    time.sleep(0.4)\n'end'"
FLOOD = """\
import threading, time
def flood():
    n = 0
    while True:
        print("x" * 200, n, flush=True)
        n += 1
threading.Thread(target=flood, daemon=True).start()
time.sleep(120)
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    # One server for the module's tests, which leave their sessions: room for all of them
    # when the module runs in one process (the default 8 was too few).
    proc = ServerProcess(tmp_path_factory.mktemp("bg") / "root", "--max-sessions", "32")
    try:
        yield proc
    finally:
        proc.stop()


def _client(server: ServerProcess) -> httpx.Client:
    return httpx.Client(
        base_url=server.url, headers=server.auth, trust_env=False, timeout=httpx.Timeout(120.0)
    )


def _events(
    server: ServerProcess, path: str, headers: dict[str, str] | None = None
) -> list[tuple[str | None, str, Any]]:
    """The SSE events of ``path`` until the stream ends: (id, event, data)."""
    found: list[tuple[str | None, str, Any]] = []
    event_id, name, data = None, "message", []
    with _client(server) as http, http.stream("GET", path, headers=headers) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if line.startswith(":"):
                continue
            if not line:
                if data:
                    found.append((event_id, name, json.loads("\n".join(data))))
                event_id, name, data = None, "message", []
                continue
            field, _, value = line.partition(": ")
            if field == "id":
                event_id = value
            elif field == "event":
                name = value
            elif field == "data":
                data.append(value)
    return found


def _text(events: list[tuple[str | None, str, Any]]) -> str:
    return "".join(d.get("text", "") for _, name, d in events if name == "output")


def _wait_until(predicate: Any, within: float = 60.0) -> None:
    deadline = time.monotonic() + within
    while not predicate():
        assert time.monotonic() < deadline, "not within the bound"
        time.sleep(0.1)


def test_started_then_left_then_reattached_by_id(server: ServerProcess) -> None:
    session_id = server.create()
    base = f"/sessions/{session_id}/executions"
    with _client(server) as first:  # the client that starts it, then goes away
        started = first.post(base, json={"code": COUNT})
        assert started.status_code == 202, started.text
        execution_id = started.json()["id"]
        assert started.headers["location"] == f"{base}/{execution_id}"
        assert started.json()["state"] in ("queued", "running")
    with _client(server) as second:  # a new client, with only the id
        listed = second.get(base).json()["executions"]
        assert [e["id"] for e in listed] == [execution_id]
        done = second.get(f"{base}/{execution_id}", params={"wait": 60}).json()
    assert done["state"] == "done" and done["status"] == "ok"
    assert done["result"]["stdout"] == "1\n2\n3\n4\n5\n"
    assert "'end'" in done["result"]["text"]
    events = _events(server, f"{base}/{execution_id}/events")
    assert _text(events) == "1\n2\n3\n4\n5\n"
    assert [e[0] for e in events] == [str(i) for i in range(len(events))]  # every event an id
    assert events[-1][1] == "result" and events[-1][2]["stdout"] == "1\n2\n3\n4\n5\n"
    # A reader that reconnects after the second event gets only what it missed.
    outputs = [e for e in events if e[1] == "output"]
    missed = _events(
        server, f"{base}/{execution_id}/events", headers={"Last-Event-ID": str(outputs[1][0])}
    )
    assert [e[0] for e in missed] == [e[0] for e in events[2:]]
    assert _text(missed) == _text(events[2:])
    by_offset = _events(server, f"{base}/{execution_id}/events?offset=3")
    assert by_offset == events[3:]


def test_events_stream_live_while_it_runs(server: ServerProcess) -> None:
    session_id = server.create()
    base = f"/sessions/{session_id}/executions"
    execution_id = server.http.post(base, json={"code": COUNT}).json()["id"]
    events = _events(server, f"{base}/{execution_id}/events")
    assert _text(events) == "1\n2\n3\n4\n5\n" and events[-1][1] == "result"


def test_a_client_gone_from_the_sync_route_leaves_the_execution_reachable(
    server: ServerProcess,
) -> None:
    """The policy: the execution runs on to its end and is found at /executions."""
    session_id = server.create()
    code = (
        "import time\nfor i in range(4):\n    print(i, flush=True); time.sleep(0.5)\nprint('end')"
    )
    body = json.dumps({"code": code}).encode()
    sock = socket.create_connection(("127.0.0.1", server.port))
    sock.sendall(
        f"POST /sessions/{session_id}/execute HTTP/1.1\r\nHost: x\r\n"
        f"Authorization: Bearer {server.token}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    base = f"/sessions/{session_id}/executions"
    _wait_until(lambda: server.http.get(base).json()["executions"])
    sock.close()  # gone mid-execution
    (listed,) = server.http.get(base).json()["executions"]
    assert listed["state"] in ("queued", "running")
    done = server.http.get(f"{base}/{listed['id']}", params={"wait": 60}).json()
    assert done["state"] == "done"
    assert done["result"]["stdout"] == "0\n1\n2\n3\nend\n"
    assert server.execute(session_id, "i")["text"].strip() == "3"


def test_cancel_interrupts_and_a_second_cancel_is_told_it_ended(server: ServerProcess) -> None:
    session_id = server.create()
    server.execute(session_id, "kept = 7")
    base = f"/sessions/{session_id}/executions"
    code = "import time\nprint('started', flush=True)\ntime.sleep(60)"
    execution_id = server.http.post(base, json={"code": code}).json()["id"]
    path = f"{base}/{execution_id}"
    _wait_until(lambda: server.http.get(path).json()["events"] >= 1)
    began = time.monotonic()
    cancelled = server.http.post(f"{path}/cancel")
    assert cancelled.status_code == 200, cancelled.text
    assert time.monotonic() - began < 30  # not the 60 s sleep
    body = cancelled.json()
    assert body["state"] == "done" and body["status"] == "cancelled"
    assert body["result"]["stdout"] == "started\n"
    again = server.http.post(f"{path}/cancel")
    assert again.status_code == 409
    assert again.json()["error"] == "execution_finished"
    assert "already finished" in again.json()["message"]
    assert server.execute(session_id, "kept")["text"].strip() == "7"  # interrupted, not restarted


def test_a_queued_execution_cancelled_never_runs(server: ServerProcess) -> None:
    session_id = server.create()
    base = f"/sessions/{session_id}/executions"
    first = server.http.post(base, json={"code": "import time; time.sleep(3)"}).json()["id"]
    second = server.http.post(base, json={"code": "ran = True"}).json()
    assert second["state"] == "queued"
    body = server.http.post(f"{base}/{second['id']}/cancel").json()
    assert body["status"] == "cancelled" and "before it ran" in body["result"]["message"]
    assert server.http.get(f"{base}/{first}").json()["state"] == "running"
    done = server.http.get(f"{base}/{first}", params={"wait": 60}).json()
    assert done["status"] == "ok"
    assert server.execute(session_id, "'ran' in dir()")["text"].strip() == "False"


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def test_a_thread_printing_forever_costs_bounded_memory_and_cancel_still_works(
    server: ServerProcess,
) -> None:
    session_id = server.create()
    base = f"/sessions/{session_id}/executions"
    before = _rss_mb(server.proc.pid)
    execution_id = server.http.post(base, json={"code": FLOOD}).json()["id"]
    path = f"{base}/{execution_id}"
    # Far more than the server's 1,000,000-character buffer has gone by.
    _wait_until(lambda: server.http.get(path).json()["events"] > 20_000, within=120)
    grown = _rss_mb(server.proc.pid) - before
    assert grown < 300, f"the server grew {grown:.0f} MB"
    # A reader from the start is told what it missed, then gets the newest outputs.
    with _client(server) as http, http.stream("GET", f"{path}/events") as response:
        lines = response.iter_lines()
        head = [next(lines) for _ in range(3)]
    assert head[1] == "event: dropped", head
    assert json.loads(head[2].removeprefix("data: "))["outputs"] > 1000
    cancelled = server.http.post(f"{path}/cancel")
    assert cancelled.status_code == 200 and cancelled.json()["state"] == "done"
    assert cancelled.json()["status"] in ("cancelled", "timeout")
    assert server.execute(session_id, "1 + 1")["text"].strip() == "2"


@pytest.mark.parametrize(
    ("path", "status", "code"),
    [
        ("/executions/0123456789abcdef0123456789abcdef", 404, "execution_not_found"),
        ("/executions/not-an-id", 404, "execution_not_found"),
        ("/executions/..%2F..", 404, None),
        ("/executions/0123456789abcdef0123456789abcdef/events", 404, "execution_not_found"),
        ("/executions/0123456789abcdef0123456789abcdef/cancel", 404, "execution_not_found"),
    ],
)
def test_unknown_executions_are_404(
    server: ServerProcess, path: str, status: int, code: str | None
) -> None:
    session_id = server.create()
    method = "POST" if path.endswith("cancel") else "GET"
    response = server.http.request(method, f"/sessions/{session_id}{path}")
    assert response.status_code == status
    assert set(response.json()) == {"error", "message"}
    if code is not None:
        assert response.json()["error"] == code


def test_bad_wait_and_offset_are_400(server: ServerProcess) -> None:
    session_id = server.create()
    base = f"/sessions/{session_id}/executions"
    execution_id = server.http.post(base, json={"code": "1"}).json()["id"]
    for query in ("wait=-1", "wait=nan", "wait=1e9", "wait=x"):
        response = server.http.get(f"{base}/{execution_id}?{query}")
        assert response.status_code == 400 and response.json()["error"] == "invalid_request"
    for headers, query in (({}, "?offset=-1"), ({"Last-Event-ID": "x"}, ""), ({}, "?offset=1.5")):
        response = server.http.get(f"{base}/{execution_id}/events{query}", headers=headers)
        assert response.status_code == 400 and response.json()["error"] == "invalid_request"
    gone = server.http.get("/sessions/0123456789abcdef0123456789abcdef/executions")
    assert gone.status_code == 404 and gone.json()["error"] == "session_not_found"
