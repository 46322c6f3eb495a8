"""The audit log of a real server after 2 tenants x 20 clients ran a mixed load at once."""

from __future__ import annotations

import json
import threading
from collections import Counter
from pathlib import Path

from test_tenants_server import client, tenants_server

CLIENTS = 20


def test_one_whole_line_per_action_and_nothing_secret_in_it(tmp_path: Path) -> None:
    audit = tmp_path / "audit.jsonl"
    server, _, tokens = tenants_server(
        tmp_path,
        {"red": {}, "blue": {}},
        "--audit-log",
        str(audit),
        "--max-sessions",
        str(2 * CLIENTS),
    )
    done: Counter[tuple[str, str, str, int]] = Counter()  # (tenant, method, route, status)
    executions: Counter[tuple[str, str]] = Counter()  # (tenant, status)
    lock = threading.Lock()
    failures: list[str] = []

    def run(tenant: str, n: int) -> None:
        marker = f"{tenant}{n}"
        with client(server, tokens[tenant]) as http:
            try:
                made = http.post("/sessions", json={})
                session_id = made.json()["id"]
                steps = [("POST", "/sessions", made.status_code)]
                for i in range(2):
                    code = f"print('OUTPUT-' + 'MARK-{marker}-{i}')  # CODE-MARK-{marker}"
                    answer = http.post(f"/sessions/{session_id}/execute", json={"code": code})
                    steps.append(("POST", "/sessions/{session_id}/execute", answer.status_code))
                    with lock:
                        executions[(tenant, answer.json()["status"])] += 1
                put = http.put(f"/sessions/{session_id}/files/f.txt", content=b"FILE-MARK")
                steps.append(("PUT", "/sessions/{session_id}/files/{path:path}", put.status_code))
                http.get(f"/sessions/{session_id}/files")  # a read: no line
                gone = http.delete(f"/sessions/{session_id}")
                steps.append(("DELETE", "/sessions/{session_id}", gone.status_code))
            except Exception as exc:  # reported below, with the tenant and client
                failures.append(f"{marker}: {exc!r}")
                return
            with lock:
                for method, route, status in steps:
                    done[(tenant, method, route, status)] += 1

    threads = [
        threading.Thread(target=run, args=(tenant, n))
        for n in range(CLIENTS)
        for tenant in ("red", "blue")
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    stranger = client(server, "kx_" + "A" * 43).post("/sessions", json={})
    assert stranger.status_code == 401
    server.stop()  # the log is flushed and closed at shutdown
    assert not failures, failures

    raw = audit.read_bytes()
    assert raw.endswith(b"\n")
    lines = raw.split(b"\n")[:-1]
    events = [json.loads(line) for line in lines]  # every line whole, valid JSON
    refused = [e for e in events if e["kind"] == "request" and e["status"] == 401]
    assert len(refused) == 1 and "tenant" not in refused[0]
    assert refused[0]["error"] == "unauthorized" and refused[0]["route"] == "/sessions"
    logged_requests = Counter(
        (e["tenant"], e["method"], e["route"], e["status"])
        for e in events
        if e["kind"] == "request" and e["status"] != 401
    )
    assert logged_requests == done
    assert [e["event"] for e in events if e["kind"] == "server"] == ["start", "stop"]
    logged_executions = Counter(
        (e["tenant"], e["outcome"]) for e in events if e["kind"] == "execution"
    )
    assert logged_executions == executions
    assert sum(executions.values()) == 2 * 2 * CLIENTS
    for event in (e for e in events if e["kind"] != "server" and e.get("status") != 401):
        assert event["door"] == "http"
        assert event["token_id"] in {
            _token_id(tokens["red"]),
            _token_id(tokens["blue"]),
        }
        if event["kind"] == "execution":
            assert len(event["code_sha256"]) == 64 and event["code_bytes"] > 0
            assert event["usage"] is not None and event["bytes_out"] > 0
    text = raw.decode()
    for secret in ("CODE-MARK", "OUTPUT-MARK", "FILE-MARK", tokens["red"], tokens["blue"]):
        assert secret not in text


def _token_id(token: str) -> str:
    from kernelexec._tenants._tokens import token_hash, token_id

    return token_id(token_hash(token))
