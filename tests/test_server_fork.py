"""Forks and checkpoints through a real server: HTTP routes, the clients, hostile ids and links."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from _pids import default_fork_method
from _serverproc import ServerProcess, raw_request

from kernelexec import Client, ServerError


def test_fork_carries_state_diverges_is_listed_and_counts(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "work", "--max-sessions", "2", "--idle-timeout", "0")
    try:
        parent = server.create()
        server.execute(parent, "x = [1, 2]\nclass K:\n    v = 7\nopen('f.txt', 'w').write('hi')")
        forked = server.http.post(f"/sessions/{parent}/fork", json={})
        assert forked.status_code == 201, forked.text
        body = forked.json()
        child = body["id"]
        assert child != parent and body["fork_report"]["method"] == default_fork_method()
        assert body["fork_report"]["parent_cells"] == 1 and body["fork_report"]["files"] >= 1
        # State and files carried, then each goes its own way.
        assert server.execute(child, "x.append(3); (x, K.v, open('f.txt').read())")["text"] == (
            "([1, 2, 3], 7, 'hi')\n"
        )
        assert server.execute(parent, "x")["text"] == "[1, 2]\n"
        server.execute(parent, "x.append(99)")
        assert server.execute(child, "x")["text"] == "[1, 2, 3]\n"
        listed = {s["id"] for s in server.http.get("/sessions").json()["sessions"]}
        assert listed == {parent, child}
        # The fork holds a kernel: at --max-sessions 2 a second fork is refused.
        refused = server.http.post(f"/sessions/{parent}/fork")
        assert refused.status_code == 429 and "--max-sessions" in refused.json()["message"]
        server.http.delete(f"/sessions/{child}")
        assert server.http.post(f"/sessions/{parent}/fork").status_code == 201
    finally:
        assert server.stop() == 0


def test_fork_without_waiting_of_a_busy_session_is_409(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "work", "--max-sessions", "3")
    try:
        sid = server.create()
        started = threading.Event()

        def run() -> None:
            started.set()
            server.execute(sid, "import time; time.sleep(8)")

        thread = threading.Thread(target=run)
        thread.start()
        started.wait()
        for _ in range(100):
            if server.http.get(f"/sessions/{sid}").json()["state"] == "busy":
                break
            threading.Event().wait(0.05)
        refused = server.http.post(f"/sessions/{sid}/fork", json={"wait": False})
        assert refused.status_code == 409, refused.text
        assert refused.json()["error"] == "session_busy"
        bad = server.http.post(f"/sessions/{sid}/fork", json={"wait": "no"})
        assert bad.status_code == 400
        waited = server.http.post(f"/sessions/{sid}/fork", json={"wait": True})
        assert waited.status_code == 201, waited.text
        thread.join()
    finally:
        assert server.stop() == 0


def test_checkpoint_then_a_session_from_it_and_the_store_routes(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "work", "--idle-timeout", "0")
    try:
        sid = server.create()
        server.execute(
            sid,
            "import math as m\nnums = list(range(5))\nf = lambda v: v * 2\n"
            "gen = (i for i in nums)\nopen('data.txt', 'w').write('kept')",
        )
        made = server.http.post(f"/sessions/{sid}/checkpoint")
        assert made.status_code == 201, made.text
        checkpoint = made.json()
        names = {v["name"]: v["type"] for v in checkpoint["variables"]}
        assert names == {"nums": "list", "f": "function"}
        assert [s["name"] for s in checkpoint["skipped"]] == ["gen"]
        assert checkpoint["skipped"][0]["reason"]
        assert checkpoint["modules"] == {"m": "math"} and checkpoint["session"] == sid
        assert checkpoint["files"] == 1
        # In the store beside the work dirs, never inside a session's work dir.
        store = tmp_path / "work" / ".checkpoints" / checkpoint["id"]
        assert (store / "manifest.json").is_file()
        assert not list((tmp_path / "work" / sid).rglob("manifest.json"))

        restored = server.http.post("/sessions", json={"checkpoint": checkpoint["id"]})
        assert restored.status_code == 201, restored.text
        report = restored.json()["restore_report"]
        assert report["checkpoint"] == checkpoint["id"]
        assert sorted(report["restored"]) == ["f", "nums"]
        assert [s["name"] for s in report["skipped"]] == ["gen"]
        new = restored.json()["id"]
        assert server.execute(new, "(m.pi > 3, f(21), nums[-1], open('data.txt').read())")[
            "text"
        ] == ("(True, 42, 4, 'kept')\n")

        listed = server.http.get("/checkpoints").json()
        assert [c["id"] for c in listed["checkpoints"]] == [checkpoint["id"]]
        assert server.http.get(f"/checkpoints/{checkpoint['id']}").json()["variables"]
        assert server.http.delete(f"/checkpoints/{checkpoint['id']}").json()["deleted"] is True
        assert not store.exists()
        gone = server.http.get(f"/checkpoints/{checkpoint['id']}")
        assert gone.status_code == 404 and gone.json()["error"] == "checkpoint_not_found"
    finally:
        assert server.stop() == 0


def test_unknown_hostile_and_damaged_checkpoints_are_clear_4xx(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "work", "--idle-timeout", "0")
    try:
        sessions_before = server.http.get("/sessions").json()["sessions"]
        for bad in ("0" * 32, "../x", "..", "%2e%2e", "../../etc", "/tmp", ".checkpoints"):
            refused = server.http.post("/sessions", json={"checkpoint": bad})
            assert refused.status_code == 404, (bad, refused.text)
            assert refused.json()["error"] == "checkpoint_not_found"
        for target in ("/checkpoints/%2e%2e", "/checkpoints/..%2Fx", "/checkpoints/%2E%2E"):
            for method in ("GET", "DELETE"):
                status, _ = raw_request(server, method, target)
                assert status == 404, (method, target)
        assert server.http.get("/sessions").json()["sessions"] == sessions_before  # no kernel

        sid = server.create()
        server.execute(sid, "x = 1")
        checkpoint = server.http.post(f"/sessions/{sid}/checkpoint").json()["id"]
        manifest = tmp_path / "work" / ".checkpoints" / checkpoint / "manifest.json"
        manifest.write_text(manifest.read_text()[:40])
        damaged = server.http.post("/sessions", json={"checkpoint": checkpoint})
        assert damaged.status_code == 422, damaged.text
        assert damaged.json()["error"] == "checkpoint_damaged"
        assert "damaged" in damaged.json()["message"] or "JSON" in damaged.json()["message"]
        assert server.http.get(f"/checkpoints/{checkpoint}").status_code == 422
        listing = server.http.get("/checkpoints").json()
        assert [u["id"] for u in listing["unreadable"]] == [checkpoint]
        assert server.http.delete(f"/checkpoints/{checkpoint}").status_code == 200
        log = server.log.read_text()
    finally:
        assert server.stop() == 0
    assert "Traceback" not in log


# An uncontained kernel can reach the store; a contained one cannot write
# outside its work dir at all (test_containment.py).
@pytest.mark.uncontained
def test_a_kernel_cannot_redirect_the_store_with_a_link(tmp_path: Path) -> None:
    """The store is outside every work dir; a local kernel (the server's user) that
    plants a link at it gets the link moved aside, never written through."""
    server = ServerProcess(tmp_path / "work", "--idle-timeout", "0")
    evil = tmp_path / "evil"
    evil.mkdir()
    try:
        sid = server.create()
        server.execute(sid, "x = 5")
        # Nothing named like the store inside the kernel's own work dir.
        assert (
            server.execute(sid, "import os; sorted(os.listdir('.'))")["text"]
            == "['transcript.ipynb']\n"
        )
        planted = server.execute(
            sid,
            "import os, shutil\n"
            "shutil.rmtree('../.checkpoints', ignore_errors=True)\n"
            f"os.symlink({str(evil)!r}, '../.checkpoints')\n"
            f"os.symlink({str(evil)!r}, 'checkpoints')\n"
            "print(os.path.islink('../.checkpoints'))",
        )
        assert planted["stdout"] == "True\n"
        made = server.http.post(f"/sessions/{sid}/checkpoint")
        assert made.status_code == 201, made.text
        assert list(evil.iterdir()) == []  # nothing written through the link
        store = tmp_path / "work" / ".checkpoints"
        assert store.is_dir() and not store.is_symlink()
        assert (store / made.json()["id"] / "manifest.json").is_file()
        again = server.http.post("/sessions", json={"checkpoint": made.json()["id"]})
        assert again.status_code == 201
        assert server.execute(again.json()["id"], "x")["text"] == "5\n"
    finally:
        assert server.stop() == 0


def test_the_clients_fork_checkpoint_and_restore(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "work", "--idle-timeout", "0")
    try:
        with Client(server.url, token=server.token) as client:
            session = client.session()
            session.execute("y = {'a': 1}")
            fork = session.fork()
            assert fork.fork_report is not None and fork.fork_report.method == default_fork_method()
            assert fork.execute("y['a'] + 1").text == "2\n"
            checkpoint = session.checkpoint()
            assert [v.name for v in checkpoint.variables] == ["y"]
            assert "y (dict)" in checkpoint.text
            restored = client.restore(checkpoint)
            assert restored.restore_report is not None
            assert restored.restore_report.restored == ["y"]
            assert restored.execute("y").text == "{'a': 1}\n"
            assert [c.id for c in client.checkpoints()] == [checkpoint.id]
            client.delete_checkpoint(checkpoint.id)
            try:
                client.checkpoint(checkpoint.id)
            except ServerError as exc:
                assert exc.status == 404
            else:
                raise AssertionError("a deleted checkpoint was found")
    finally:
        assert server.stop() == 0


async def test_the_async_client_forks_and_restores(tmp_path: Path) -> None:
    from kernelexec import AsyncClient

    server = ServerProcess(tmp_path / "work", "--idle-timeout", "0")
    try:
        async with AsyncClient(server.url, token=server.token) as client:
            session = await client.session()
            await session.execute("z = 3")
            fork = await session.fork(wait=False)
            assert fork.fork_report is not None
            assert (await fork.execute("z * 2")).text == "6\n"
            checkpoint = await session.checkpoint(files=False)
            restored = await client.session(checkpoint=checkpoint.id)
            assert restored.restore_report is not None
            assert (await restored.execute("z")).text == "3\n"
    finally:
        assert server.stop() == 0
