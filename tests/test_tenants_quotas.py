"""Tenants' quotas and request rates on a real ``kernelexec serve --tenants``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _serverproc import wait_for
from test_tenants_server import client, tenants_server

CPU_QUOTA = 3.0


@pytest.fixture(scope="module")
def quota_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    root = tmp_path_factory.mktemp("quotas")
    server, _, tokens = tenants_server(
        root,
        {
            "held": {"quotas": {"live_sessions": 1, "work_dir_bytes": 50_000}},
            "queue": {"quotas": {"queued_executions": 1}},
            "burner": {"quotas": {"cpu_seconds_per_hour": CPU_QUOTA}},
            "attacher": {"quotas": {"cpu_seconds_per_hour": CPU_QUOTA}},
            "daemon": {"quotas": {"cpu_seconds_per_hour": CPU_QUOTA}},
            "brief": {"quotas": {"session_lifetime_seconds": 3}},
            "chatty": {"rate_limit": {"requests": 3, "per_seconds": 60}},
            "free": {},
        },
    )
    clients = {name: client(server, token) for name, token in tokens.items()}
    try:
        yield server, clients
    finally:
        for http in clients.values():
            http.close()
        server.stop()


def _held_session(held: Any) -> str:
    """The one session the "held" tenant may have (tests may run in any order)."""
    listed = held.get("/sessions").json()["sessions"]
    if listed:
        return str(listed[0]["id"])
    made = held.post("/sessions", json={})
    assert made.status_code == 201, made.text
    return str(made.json()["id"])


def _refused(answer: Any, quota: str) -> None:
    assert answer.status_code == 429, answer.text
    assert answer.json()["error"] == "quota_exceeded"
    assert answer.json()["quota"] == quota
    assert quota in answer.json()["message"]


def burn(seconds: float) -> str:
    """Code that spins a CPU for ``seconds`` of its own time."""
    return f"import time\nt = time.process_time()\nwhile time.process_time() - t < {seconds}: pass"


def test_the_session_past_the_live_sessions_quota_is_refused(quota_server: Any) -> None:
    _, clients = quota_server
    held = clients["held"]
    first = _held_session(held)
    _refused(held.post("/sessions", json={}), "live_sessions")
    _refused(held.post(f"/sessions/{first}/fork", json={}), "live_sessions")
    _refused(held.post("/api/kernels", json={"name": "python3"}), "live_sessions")
    # Another tenant is not held to it, and a deleted session frees its place.
    free = clients["free"].post("/sessions", json={})
    assert free.status_code == 201
    assert clients["free"].delete(f"/sessions/{free.json()['id']}").status_code == 200


def test_the_work_dir_quota_refuses_an_upload_and_reports_a_kernel_past_it(
    quota_server: Any,
) -> None:
    _, clients = quota_server
    held = clients["held"]
    session_id = _held_session(held)
    files = f"/sessions/{session_id}/files"
    _refused(held.put(f"{files}/big.bin", content=b"x" * 60_000), "work_dir_bytes")

    def chunks() -> Iterator[bytes]:  # no Content-Length: held to the quota as it comes
        for _ in range(60):
            yield b"y" * 1000

    _refused(held.put(f"{files}/streamed.bin", content=chunks()), "work_dir_bytes")
    listed = {f["path"] for f in held.get(files).json()["files"]}
    assert not listed & {"big.bin", "streamed.bin"}  # nothing of either was kept
    assert held.put(f"{files}/small.bin", content=b"z" * 1000).status_code == 201
    wrote = held.post(
        f"/sessions/{session_id}/execute",
        json={"code": "open('dump.bin', 'wb').write(b'w' * 80_000)"},
    ).json()
    assert wrote["status"] == "ok"  # the code ran; the result says what it did
    assert "work_dir_bytes" in wrote["message"]
    assert "work_dir_bytes" in wrote["text"]
    _refused(held.put(f"{files}/more.bin", content=b"m"), "work_dir_bytes")


def test_an_execution_past_the_queued_executions_quota_is_refused(quota_server: Any) -> None:
    _, clients = quota_server
    queue = clients["queue"]
    session_id = queue.post("/sessions", json={}).json()["id"]
    other = queue.post("/sessions", json={}).json()["id"]
    started = queue.post(
        f"/sessions/{session_id}/executions", json={"code": "import time; time.sleep(30)"}
    )
    assert started.status_code == 202
    # The quota counts every session of the tenant's together.
    refused = queue.post(f"/sessions/{other}/executions", json={"code": "1"})
    _refused(refused, "queued_executions")
    assert int(refused.headers["retry-after"]) >= 1
    cancel = f"/sessions/{session_id}/executions/{started.json()['id']}/cancel"
    assert queue.post(cancel).status_code == 200
    assert queue.post(f"/sessions/{other}/execute", json={"code": "print(1)"}).json()["stdout"] == (
        "1\n"
    )


def test_a_busy_loop_is_stopped_within_a_second_of_passing_the_cpu_quota(
    quota_server: Any,
) -> None:
    _, clients = quota_server
    burner = clients["burner"]
    session_id = burner.post("/sessions", json={}).json()["id"]
    result = burner.post(
        f"/sessions/{session_id}/execute", json={"code": "while True: pass", "timeout": 120}
    ).json()
    assert result["status"] == "quota_exceeded", result
    assert "cpu_seconds_per_hour" in result["message"]
    assert "cpu_seconds_per_hour" in result["text"]
    # The loop alone may not pass the quota by more than a second: the kernel's own
    # start counted too, so it was stopped sooner than that if anything.
    loop = result["usage"]["user_seconds"] + result["usage"]["system_seconds"]
    assert loop <= CPU_QUOTA + 1.0, result["usage"]
    refused = burner.post(f"/sessions/{session_id}/execute", json={"code": "print(1)"})
    assert refused.status_code == 429
    assert refused.json()["quota"] == "cpu_seconds_per_hour"
    assert int(refused.headers["retry-after"]) > 3000  # the hour has to roll on
    # The session lives on with its state; another tenant's run as before.
    assert burner.get(f"/sessions/{session_id}").json()["state"] == "idle"
    free = clients["free"]
    mine = free.post("/sessions", json={}).json()["id"]
    spin = free.post(
        f"/sessions/{mine}/execute",
        json={"code": burn(4)},
    ).json()
    assert spin["status"] == "ok"
    free.delete(f"/sessions/{mine}")


def test_a_session_past_its_lifetime_is_ended_and_says_why(quota_server: Any) -> None:
    _, clients = quota_server
    brief = clients["brief"]
    session_id = brief.post("/sessions", json={}).json()["id"]
    assert wait_for(
        lambda: "session_lifetime_seconds" in brief.get(f"/sessions/{session_id}").text, 30
    )
    answer = brief.post(f"/sessions/{session_id}/execute", json={"code": "1"})
    assert answer.status_code == 410
    assert "session_lifetime_seconds" in answer.json()["message"]
    # Ended sessions hold no place: a new one can be made.
    assert brief.post("/sessions", json={}).status_code == 201


def test_requests_past_the_rate_limit_get_429_with_retry_after(quota_server: Any) -> None:
    _, clients = quota_server
    chatty = clients["chatty"]
    answers = [chatty.get("/sessions") for _ in range(5)]
    assert [a.status_code for a in answers[:3]] == [200, 200, 200]
    limited = answers[3]
    assert limited.status_code == 429
    assert limited.json()["error"] == "rate_limited"
    assert 1 <= int(limited.headers["retry-after"]) <= 20  # one request every 20 s
    # Another tenant has a bucket of its own.
    assert clients["free"].get("/sessions").status_code == 200


def test_a_tenants_allow_list_replaces_the_servers_flags(tmp_path: Path) -> None:
    server, _, tokens = tenants_server(
        tmp_path,
        {"net": {"allow": ["network"]}, "plain": {}},
        "--allow-packages",  # the flag says yes; a tenant's allow list says otherwise
    )
    try:
        net, plain = client(server, tokens["net"]), client(server, tokens["plain"])
        refused = plain.post("/sessions", json={"packages": ["six"]})
        assert refused.status_code == 403, refused.text
        assert net.post("/sessions", json={"packages": ["six"]}).status_code == 403
        made = net.post("/sessions", json={"sandbox": {"network": True}})
        assert made.status_code == 201, made.text
        assert plain.post("/sessions", json={"sandbox": {"network": True}}).status_code == 403
    finally:
        server.stop()


def test_code_sent_over_the_attach_websocket_is_stopped_at_the_cpu_quota_too(
    quota_server: Any,
) -> None:
    """The kernel's channels are raw protocol, around our executions: the host's CPU
    reading still sees the loop, and interrupts it."""
    import uuid

    import websocket
    from _serverproc import execute_request, reply_to

    server, clients = quota_server
    attacher = clients["attacher"]
    session_id = attacher.post("/sessions", json={}).json()["id"]
    ws = websocket.create_connection(
        f"ws://127.0.0.1:{server.port}/api/kernels/{uuid.UUID(hex=session_id)}/channels",
        header=[f"Authorization: {attacher.headers['authorization']}"],
        timeout=60,
    )
    try:
        code = burn(60) + "\nprint('ran to its end')"
        reply = reply_to(ws, execute_request(code), "execute_reply")["content"]
    finally:
        ws.close()
    assert reply["status"] == "error" and reply["ename"] == "KeyboardInterrupt", reply
    refused = attacher.post(f"/sessions/{session_id}/execute", json={"code": "1"})
    assert refused.status_code == 429 and refused.json()["quota"] == "cpu_seconds_per_hour"


def test_a_setsid_child_burning_after_its_execution_ended_is_the_tenants_cpu(
    quota_server: Any,
) -> None:
    """A child that leaves its session and outlives its execution is still in the
    kernel's tree (a contained kernel's PID namespace), so its CPU counts."""
    _, clients = quota_server
    daemon = clients["daemon"]
    session_id = daemon.post("/sessions", json={}).json()["id"]
    started = daemon.post(
        f"/sessions/{session_id}/execute",
        json={
            "code": "import subprocess, sys\n"
            "subprocess.Popen(['setsid', sys.executable, '-c', 'while True: pass'])\n"
            "print('started')"
        },
    ).json()
    assert started["stdout"] == "started\n"

    def refused() -> bool:
        answer = daemon.post(f"/sessions/{session_id}/execute", json={"code": "1"})
        return answer.status_code == 429 and answer.json()["quota"] == "cpu_seconds_per_hour"

    assert wait_for(refused, 60)
    assert daemon.delete(f"/sessions/{session_id}").status_code == 200  # the child with it
