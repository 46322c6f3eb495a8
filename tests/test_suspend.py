"""Suspend instead of cull: ``kernelexec serve --idle-timeout`` checkpoints an idle session,
shuts its kernel down, and its next execution restores it. A real server each."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

from _serverproc import SLOW, ServerProcess, wait_for
from conftest import process_gone


def test_an_idle_session_is_suspended_and_its_next_execution_restores_it(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "work", "--idle-timeout", "1", "--max-sessions", "1")
    try:
        sid = server.create()
        server.execute(sid, "import json as j\nx = {'k': [1, 2]}\ngen = (i for i in range(3))")
        pid = server.kernel_pid(sid)
        assert wait_for(lambda: "checkpoint" in server.state(sid).get("message", ""))
        assert server.state(sid)["state"] == "suspended"
        assert wait_for(lambda: process_gone(pid))
        # A suspended session holds no kernel: another may be made meanwhile.
        other = server.create()
        server.http.delete(f"/sessions/{other}")

        result = server.execute(sid, "x['k'].append(3); (j.dumps(x), os.getpid())")
        assert result["status"] == "ok", result
        assert result["text"].startswith("[kernelexec] This session had been suspended")
        assert "Not restored: gen (generator)" in result["message"]
        assert result["restarted"] is True
        resumed = result["resumed"]
        assert sorted(resumed["restored"]) == ["x"] and resumed["modules"] == ["j", "os"]
        assert [s["name"] for s in resumed["skipped"]] == ["gen"]
        assert '{"k": [1, 2, 3]}' in result["text"]
        assert str(pid) not in result["text"]  # a new kernel
        # Said once: the next result is plain, and the checkpoint is gone.
        again = server.execute(sid, "x['k']")
        assert again["text"] == "[1, 2, 3]\n" and "resumed" not in again
        assert server.state(sid)["state"] == "idle"
        assert server.http.get("/checkpoints").json()["checkpoints"] == []
        assert server.kernel_pid(sid) != pid
    finally:
        assert server.stop() == 0


def test_no_suspend_culls_as_before(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "work", "--idle-timeout", "1", "--no-suspend")
    try:
        sid = server.create()
        server.execute(sid, "x = 1")
        assert wait_for(lambda: server.state(sid)["state"] == "culled")
        refused = server.http.post(f"/sessions/{sid}/execute", json={"code": "x"})
        assert refused.status_code == 409 and refused.json()["error"] == "session_culled"
        assert not (tmp_path / "work" / ".checkpoints").exists() or not list(
            (tmp_path / "work" / ".checkpoints").iterdir()
        )
    finally:
        assert server.stop() == 0


def test_a_session_that_cannot_be_checkpointed_is_culled_and_says_why(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "work", "--idle-timeout", "1")
    try:
        sid = server.create()
        # A kernel without cloudpickle cannot be checkpointed.
        server.execute(sid, "import sys; sys.modules['cloudpickle'] = None; x = 1")
        assert wait_for(lambda: server.state(sid)["state"] == "culled")
        refused = server.http.post(f"/sessions/{sid}/execute", json={"code": "x"})
        assert refused.status_code == 409
        message = refused.json()["message"]
        assert "without a checkpoint, all state lost" in message and "cloudpickle" in message
        assert "cloudpickle" in server.state(sid)["message"]
        assert list((tmp_path / "work" / ".checkpoints").iterdir()) == []
    finally:
        assert server.stop() == 0


def test_an_execution_arriving_during_the_suspend_waits_and_keeps_the_kernel(
    tmp_path: Path,
) -> None:
    server = ServerProcess(tmp_path / "work", "--idle-timeout", "1")
    try:
        sid = server.create()
        server.execute(sid, SLOW + "slow = Slow(4)\nkept = 'yes'")
        pid = server.kernel_pid(sid)
        assert wait_for(lambda: server.state(sid)["state"] == "suspended")
        result = server.execute(sid, "kept")
        assert result["status"] == "ok", result
        # The checkpoint was made, but a request came: the kernel was kept, not shut down.
        assert result["text"] == "'yes'\n" and "resumed" not in result
        assert server.kernel_pid(sid) == pid
        assert server.state(sid)["state"] == "idle"
        assert server.http.get("/checkpoints").json()["checkpoints"] == []
    finally:
        assert server.stop() == 0


def test_fork_and_checkpoint_of_a_suspended_session_restore_it_first(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "work", "--idle-timeout", "1", "--max-sessions", "2")
    try:
        sid = server.create()
        server.execute(sid, "v = 10")
        assert wait_for(lambda: "checkpoint" in server.state(sid).get("message", ""))
        forked = server.http.post(f"/sessions/{sid}/fork")
        assert forked.status_code == 201, forked.text
        assert server.execute(forked.json()["id"], "v + 1")["text"] == "11\n"
        # The parent's next execution still says it was resumed.
        result = server.execute(sid, "v")
        assert result["text"].endswith("10\n") and result["resumed"]["restored"] == ["v"]
    finally:
        assert server.stop() == 0


def test_sigterm_while_suspending_exits_promptly_and_leaves_nothing(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "work", "--idle-timeout", "1")
    try:
        sid = server.create()
        server.execute(sid, SLOW + "slow = Slow(60)")
        pid = server.kernel_pid(sid)
        assert wait_for(lambda: server.state(sid)["state"] == "suspended")
        time.sleep(0.5)  # inside the 60 s pickling
        started = time.monotonic()
        code: list[int] = []
        stopper = threading.Thread(target=lambda: code.append(server.stop(signal.SIGTERM)))
        stopper.start()
        stopper.join(60)
        assert code == [0]
        assert time.monotonic() - started < 45  # not the 60 s of the variable
        assert wait_for(lambda: process_gone(pid), 30)
        store = tmp_path / "work" / ".checkpoints"
        assert list(store.iterdir()) == []  # the half-made checkpoint is removed
        assert "Traceback" not in server.log.read_text()
    finally:
        if server.proc.poll() is None:
            server.stop()
