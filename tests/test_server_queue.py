"""A session's queue is bounded: executions not yet ended, and the request bytes they hold.

A real server each: 60 executions of 15 MB queued behind a sleeping cell are refused past
the cap (429 with Retry-After) and the server's memory stays bounded; one body alone over
the byte cap is 413.
"""

from __future__ import annotations

import json
from pathlib import Path

from _serverproc import ServerProcess

MB = 1_000_000


def rss(pid: int) -> int:
    """The process's resident memory now, in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_sixty_15mb_executions_behind_a_sleeping_cell_are_refused_past_the_cap(
    tmp_path: Path,
) -> None:
    server = ServerProcess(tmp_path / "work")
    try:
        sid = server.create()
        server.execute(sid, "1")
        before = rss(server.proc.pid)
        sleeping = server.http.post(
            f"/sessions/{sid}/executions", json={"code": "import time; time.sleep(300)"}
        )
        assert sleeping.status_code == 202
        body = json.dumps({"code": "x = 1\n#" + "a" * (15 * MB)}).encode()
        answers = [
            server.http.post(
                f"/sessions/{sid}/executions",
                content=body,
                headers={"Content-Type": "application/json"},
            )
            for _ in range(60)
        ]
        grown = rss(server.proc.pid) - before
        statuses = [a.status_code for a in answers]
        # The default cap, 64 MiB of request bytes a session's executions hold: four.
        assert statuses == [202] * 4 + [429] * 56
        refused = answers[-1]
        assert int(refused.headers["Retry-After"]) >= 1
        assert refused.json()["error"] == "queue_full"
        assert "--max-queued-mb" in refused.json()["message"]
        assert grown < 200 * MB, f"the server grew by {grown / MB:.0f} MB"
        listed = server.http.get(f"/sessions/{sid}/executions").json()["executions"]
        listed = [e for e in listed if e["state"] != "done"]  # the first "1" has ended
        assert [e["state"] for e in listed] == ["running"] + ["queued"] * 4
        for execution in listed:  # room again once they end
            server.http.post(f"/sessions/{sid}/executions/{execution['id']}/cancel")
        assert server.execute(sid, "x = 2; x")["text"] == "2\n"
    finally:
        assert server.stop() == 0


def test_the_count_cap_is_429_for_every_route_and_one_body_over_the_byte_cap_is_413(
    tmp_path: Path,
) -> None:
    server = ServerProcess(tmp_path / "work", "--max-queued", "3", "--max-queued-mb", "1")
    try:
        sid = server.create()
        started = [
            server.http.post(f"/sessions/{sid}/executions", json={"code": code})
            for code in ("import time; time.sleep(300)", "1", "2")
        ]
        assert [s.status_code for s in started] == [202, 202, 202]
        for route in ("executions", "execute", "execute/stream"):
            refused = server.http.post(f"/sessions/{sid}/{route}", json={"code": "3"})
            assert refused.status_code == 429, refused.text
            assert refused.json()["error"] == "queue_full" and "Retry-After" in refused.headers
        too_big = server.http.post(
            f"/sessions/{sid}/executions", json={"code": "#" + "a" * (2 * 1024 * 1024)}
        )
        assert too_big.status_code == 413, too_big.text
        assert too_big.json()["error"] == "execution_too_large"
        assert "--max-queued-mb" in too_big.json()["message"]
        server.http.post(f"/sessions/{sid}/executions/{started[0].json()['id']}/cancel")
        assert server.execute(sid, "4")["text"] == "4\n"
    finally:
        assert server.stop() == 0
