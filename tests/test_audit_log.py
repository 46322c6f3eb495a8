"""The audit log against real files, real threads and real processes, and ``kernelexec audit``.

Nothing is mocked: writers share a file from threads and from other
processes, a stuck writer is one whose lock another holder keeps, and a full
disk is a file-size limit (RLIMIT_FSIZE) set in a child process.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import re
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import SOON

from kernelexec._audit import FIELDS, AuditLog, code_fields
from kernelexec._audit._read import log_files
from kernelexec._cli import main
from kernelexec._exceptions import ConfigurationError
from kernelexec._execution._models import Usage

ROOT = Path(__file__).resolve().parent.parent
ENV = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
}
TOKEN = "kx_3vQd0b8c1hM2pXz7N4rKfT9sLw6yGjEaUo5iVnBq-Rc"
SECRET_CODE = "print('the secret recipe')"
SECRET_OUTPUT = "the secret recipe"


def python(code: str, *args: str, **kwargs: Any) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", code, *args], env=ENV, text=True, cwd=ROOT, **kwargs
    )


def every_line(path: Path) -> list[dict[str, Any]]:
    """Every line of the log and its rotated files, oldest first, each checked whole."""
    found = []
    for file in log_files(path):
        data = Path(file).read_bytes()
        assert data == b"" or data.endswith(b"\n"), f"{file} ends in a torn line"
        for number, line in enumerate(data.splitlines(), 1):
            fields = json.loads(line)  # fails the test on a torn or interleaved line
            assert isinstance(fields, dict) and fields["v"] == 1, f"{file}:{number}"
            found.append(fields)
    return found


def execution(tenant: str, number: int, client: int = 0) -> dict[str, Any]:
    return {
        "kind": "execution",
        "tenant": tenant,
        "token_id": f"{tenant}-token",
        "session": f"{tenant}-{client:02d}",
        "execution_id": f"{tenant}-{client:02d}-{number}",
        "language": "python",
        **code_fields(SECRET_CODE),
        "outcome": "ok",
        "usage": {"wall_seconds": 0.01, "peak_rss_bytes": None},
        "bytes_out": len(SECRET_OUTPUT),
    }


def request(tenant: str, number: int, client: int = 0, status: int = 201) -> dict[str, Any]:
    return {
        "kind": "request",
        "tenant": tenant,
        "token_id": f"{tenant}-token",
        "method": "POST",
        "route": "/sessions/{session_id}/execute",
        "path": f"/sessions/{tenant}-{client:02d}/execute?token={TOKEN}",
        "session": f"{tenant}-{client:02d}",
        "execution_id": f"{tenant}-{client:02d}-{number}",
        "status": status,
        "bytes_in": 40,
    }


# -- many writers at once, with many rotations

_WRITER = """
import sys
from kernelexec._audit import AuditLog, code_fields

path, tenant, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
log = AuditLog(path, max_bytes=16384, backups=100_000, queue_size=count + 1)
print("ready", flush=True)
sys.stdin.readline()
for number in range(count):
    log.record({
        "kind": "execution", "tenant": tenant, "token_id": tenant + "-token",
        "session": tenant + "-99", "execution_id": f"{tenant}-99-{number}",
        **code_fields("print('the secret recipe')"), "outcome": "ok", "bytes_out": 18,
    })
log.close()
print(log.written, log.dropped, log.failed, log.rotations, flush=True)
"""


def test_threads_and_processes_append_whole_lines_through_many_rotations(tmp_path: Path) -> None:
    path = tmp_path / "audit.log"
    # 2 tenants x 20 clients in this process, through two AuditLog objects (as two
    # servers in one process would), and 3 more processes; a small max_bytes rotates
    # the file many times while they all write.
    logs = [AuditLog(path, max_bytes=16384, backups=100_000) for _ in range(2)]
    clients, each, per_process = 20, 30, 400
    children = [
        python(
            _WRITER,
            str(path),
            f"proc{n}",
            str(per_process),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        for n in range(3)
    ]
    try:
        for child in children:
            assert child.stdout is not None and child.stdout.readline() == "ready\n"
        start = threading.Barrier(2 * clients + 1)

        def client(log: AuditLog, tenant: str, number: int) -> None:
            start.wait()
            for i in range(each):
                log.record(request(tenant, i, number) if i % 2 else execution(tenant, i, number))

        threads = [
            threading.Thread(target=client, args=(logs[n % 2], tenant, n))
            for tenant in ("alice", "bob")
            for n in range(clients)
        ]
        for thread in threads:
            thread.start()
        for child in children:
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
        start.wait()  # all at once: the processes and the 40 clients
        for thread in threads:
            thread.join()
        for log in logs:
            log.close()
        counts = []
        for child in children:
            out, _ = child.communicate(timeout=60)
            assert child.returncode == 0
            counts.append([int(n) for n in out.split()])
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.communicate()

    lines = every_line(path)
    in_process = 2 * clients * each
    assert len(lines) == in_process + 3 * per_process
    assert sum(log.written for log in logs) + sum(c[0] for c in counts) == len(lines)
    assert sum(log.dropped + log.failed for log in logs) == 0
    assert all(c[1:3] == [0, 0] for c in counts)
    ids = [(line["kind"], line["execution_id"]) for line in lines]
    assert len(set(ids)) == len(ids)  # each once: none lost, none doubled by a rotation
    # Every rotation made one file, and none rotated what another had just rotated.
    files = log_files(path)
    rotations = sum(log.rotations for log in logs) + sum(c[3] for c in counts)
    assert rotations == len(files) - 1 > 10
    for file in files:
        assert os.stat(file).st_size <= 16384
        assert stat.S_IMODE(os.stat(file).st_mode) == 0o600
    # What stands for the code and the outputs, never they; no token, even in a path.
    text = "".join(Path(file).read_text() for file in files)
    assert SECRET_OUTPUT not in text and "secret" not in text and TOKEN not in text
    assert code_fields(SECRET_CODE)["code_sha256"] in text
    assert all("?" not in line.get("path", "") for line in lines)


def test_a_writer_whose_file_was_rotated_away_writes_to_the_new_one(tmp_path: Path) -> None:
    path = tmp_path / "audit.log"
    late = AuditLog(path, max_bytes=4000)  # holds the first file open
    with AuditLog(path, max_bytes=4000) as busy:
        for number in range(30):
            busy.record(request("alice", number))
    assert busy.rotations > 0
    late.record(request("bob", 0))
    late.close()
    assert json.loads(path.read_text().splitlines()[-1])["tenant"] == "bob"
    assert len(every_line(path)) == 31  # in 3 or 4 files: backups=5 kept them all


def test_rotation_keeps_only_the_backups_asked_for(tmp_path: Path) -> None:
    path = tmp_path / "audit.log"
    with AuditLog(path, max_bytes=600, backups=2) as log:
        for number in range(40):
            log.record(request("alice", number))
    assert [Path(f).name for f in log_files(path)] == ["audit.log.2", "audit.log.1", "audit.log"]
    numbers = [int(line["execution_id"].rsplit("-", 1)[1]) for line in every_line(path)]
    assert numbers == sorted(numbers) and numbers[-1] == 39  # the newest, in order
    with AuditLog(tmp_path / "none.log", max_bytes=600, backups=0) as log:
        for number in range(40):
            log.record(request("alice", number))
    assert log_files(tmp_path / "none.log") == [str(tmp_path / "none.log")]


# -- what may be logged


@pytest.mark.parametrize("field", ["code", "outputs", "token", "stdout", "v", "time", "tenantt"])
def test_a_field_outside_the_list_is_refused_at_once(tmp_path: Path, field: str) -> None:
    with AuditLog(tmp_path / "audit.log") as log:
        with pytest.raises(ValueError, match=f"no field '{field}'.*code_fields"):
            log.record({"kind": "execution", field: "print(1)"})
    assert (tmp_path / "audit.log").read_text() == ""


def test_values_are_checked_and_made_safe(tmp_path: Path) -> None:
    path = tmp_path / "audit.log"
    with AuditLog(path) as log:
        with pytest.raises(ValueError, match="needs a kind"):
            log.record({"tenant": "alice"})
        with pytest.raises(TypeError, match="'status' takes an integer, not bool"):
            log.record({"kind": "request", "status": True})
        with pytest.raises(TypeError, match=r"'usage\.wall_seconds' takes a number"):
            log.record({"kind": "execution", "usage": {"wall_seconds": "1"}})
        with pytest.raises(ValueError, match="finite"):
            log.record({"kind": "execution", "duration_seconds": float("inf")})
        log.record(
            {
                "kind": "request",
                "tenant": "alice",
                "token_id": None,  # unknown: left out
                "path": f"/api/kernels?token={TOKEN}",
                "message": f"refused {TOKEN} " + "x" * 5000,
                "usage": Usage(0.5, 0.25, 0.0, 1 << 20, 0.0, 0.0, 0),
            }
        )
    [line] = every_line(path)
    assert list(line)[:3] == ["v", "time", "kind"] and set(line) <= set(FIELDS)
    assert "token_id" not in line and line["path"] == "/api/kernels"
    assert line["message"].startswith("refused kx_<redacted> xxx") and len(line["message"]) == 1024
    assert line["usage"]["peak_rss_bytes"] == 1 << 20
    assert time.strftime("%Y-%m-%dT", time.gmtime()) in line["time"] and line["time"][-5] == "."
    assert TOKEN not in path.read_text()
    digest = hashlib.sha256("é = 1".encode()).hexdigest()
    assert code_fields("é = 1") == {"code_sha256": digest, "code_bytes": 6}  # UTF-8 bytes


# -- never in the caller's way


def test_record_never_waits_for_a_stuck_writer(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "audit.log"
    log = AuditLog(path, queue_size=4)
    took: list[float] = []
    with open(f"{path}.lock", "wb") as holder, caplog.at_level(logging.WARNING, "kernelexec"):
        # Another holder of the lock (a wedged process sharing the file): the
        # writer waits on it, and the queue behind it fills.
        fcntl.flock(holder, fcntl.LOCK_EX)
        for number in range(1000):
            started = time.perf_counter()
            log.record(request("alice", number))
            took.append(time.perf_counter() - started)
        assert path.read_text() == ""
    # The holder's file closed: the lock is free again.
    log.close(timeout=10)
    # Microseconds each, really; never the lock's time. A record that waited (even
    # 10 ms, for room in the queue) would make nearly all 1,000 slow; a loaded machine
    # pausing this thread, a few.
    slow = [t for t in took if t >= 0.01]
    assert len(slow) < 100, slow[:10]
    assert 1000 - 2 * 4 - 1 <= log.dropped < 1000
    warnings = [r.getMessage() for r in caplog.records if "dropped" in r.getMessage()]
    assert len(warnings) == 1  # at most one a minute
    lines = every_line(path)
    kept = [line for line in lines if line["kind"] == "request"]
    gaps = [line for line in lines if line["kind"] == "server"]
    assert len(kept) == 1000 - log.dropped and log.written == len(kept) + len(gaps)
    # The gap is on record: "dropped" lines (one per time the writer caught up) count it.
    assert {(line["event"], line["kind"]) for line in gaps} == {("dropped", "server")}
    assert sum(line["count"] for line in gaps) == log.dropped
    assert lines[-1] in gaps


def test_close_is_idempotent_and_a_later_record_is_dropped_not_raised(tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "audit.log")
    log.record(request("alice", 0))
    log.close()
    log.close()
    log.record(request("alice", 1))
    assert (log.written, log.dropped) == (1, 1)


async def test_aclose_from_the_event_loop(tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "audit.log")
    log.record(execution("alice", 0))
    await log.aclose()
    assert len(every_line(tmp_path / "audit.log")) == 1


_FULL = """
import json, resource, sys
from kernelexec._audit import AuditLog
resource.setrlimit(resource.RLIMIT_FSIZE, (2000, 2000))
log = AuditLog(sys.argv[1], max_bytes=None)
for number in range(40):
    log.record({"kind": "request", "tenant": "alice", "status": 201, "message": "x" * 60})
log.close()
print(json.dumps({"written": log.written, "failed": log.failed}))
"""


def test_a_full_disk_loses_lines_whole_and_says_so_once(tmp_path: Path) -> None:
    path = tmp_path / "audit.log"
    child = python(_FULL, str(path), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = child.communicate(timeout=60)
    assert child.returncode == 0, err
    counts = json.loads(out)
    assert counts["written"] + counts["failed"] == 40 and 5 < counts["written"] < 40
    # The line that did not fit was cut off again: only whole lines, under the limit.
    assert len(every_line(path)) == counts["written"] and path.stat().st_size <= 2000
    assert err.count("cannot be written") == 1 and "Traceback" not in err


# -- paths that cannot work


def test_a_path_that_cannot_work_is_refused_naming_the_fix(tmp_path: Path) -> None:
    real = tmp_path / "real.log"
    real.write_text("")
    (tmp_path / "link.log").symlink_to(real)
    with pytest.raises(ConfigurationError, match=r"is a symbolic link.*give the file's own path"):
        AuditLog(tmp_path / "link.log")
    with pytest.raises(ConfigurationError, match="does not exist: make it first"):
        AuditLog(tmp_path / "no" / "audit.log")
    os.mkfifo(tmp_path / "fifo.log")  # refused at once, not waited on for a reader
    with pytest.raises(ConfigurationError, match="not a regular file"):
        AuditLog(tmp_path / "fifo.log")
    (tmp_path / "folder.log").mkdir()
    with pytest.raises(ConfigurationError, match="not a regular file"):
        AuditLog(tmp_path / "folder.log")
    with pytest.raises(ConfigurationError, match="positive size"):
        AuditLog(tmp_path / "audit.log", max_bytes=0)
    if os.geteuid() == 0:
        closed = Path("/sys")  # read-only even to root
    else:
        closed = tmp_path / "closed"
        closed.mkdir(mode=0o500)
    with pytest.raises(ConfigurationError, match="may write"):
        AuditLog(closed / "audit.log")
    assert not (tmp_path / "audit.log").exists()


def test_a_new_log_is_the_owners_alone(tmp_path: Path) -> None:
    before = os.umask(0)
    try:
        AuditLog(tmp_path / "audit.log").close()
    finally:
        os.umask(before)
    for name in ("audit.log", "audit.log.lock"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o600


# -- kernelexec audit


def _mixed_log(path: Path) -> list[str]:
    """18 lines over several files: alice's requests and executions (one timed out),
    bob's refusals (403 and 429). Returns the lines as written, oldest first."""
    with AuditLog(path, max_bytes=2000, backups=50) as log:
        for number in range(6):
            log.record(request("alice", number, client=1))
            ended = execution("alice", number, client=1)
            log.record(ended | {"outcome": "timeout"} if number == 3 else ended)
            if number % 2:
                refused = {"status": 403, "error": "forbidden", "scope": "execute"}
            else:
                refused = {"status": 429, "error": "quota_exceeded", "quota": "live_sessions"}
            log.record(request("bob", number, client=2) | refused)
    return [line for file in log_files(path) for line in Path(file).read_text().splitlines()]


def test_the_audit_command_filters_and_passes_over_damaged_lines(tmp_path: Path) -> None:
    path = tmp_path / "audit.log"
    written = _mixed_log(path)
    assert len(log_files(path)) > 2
    # A line a crash cut off in an older file, and one no writer would write.
    older = Path(log_files(path)[1])
    lines = older.read_text().splitlines(keepends=True)
    older.write_text("".join([lines[0], '{"v":1,"time":"2025-06-0\n', *lines[1:]]))
    with path.open("a") as tail:
        tail.write('{"v":1,"kind":"requ')

    proc = subprocess.run(
        [sys.executable, "-m", "kernelexec", "audit", "audit.log", "--tenant", "alice", "--json"],
        cwd=tmp_path,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [line for line in written if '"tenant":"alice"' in line]
    assert proc.stderr.splitlines() == [
        f"kernelexec audit: {older.name}:2: not JSON (a torn or damaged line), skipped",
        f"kernelexec audit: audit.log:{len(path.read_text().splitlines())}: "
        "cut off before its end (a torn line), skipped",
    ]

    proc = subprocess.run(
        [sys.executable, "-m", "kernelexec", "audit", str(path), "--status", "timeout,4xx"],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0 and "Traceback" not in proc.stderr
    header, *rows = proc.stdout.splitlines()
    assert header.split() == ["TIME", "KIND", "TENANT", "TOKEN", "SESSION", "STATUS", "WHAT"]
    [timeout] = [row for row in rows if " timeout " in row]
    assert "  execution  alice  " in timeout and "alice-01-3, code " in timeout
    refused = [row for row in rows if "403 forbidden" in row or "429 quota_exceeded" in row]
    assert len(refused) == 6 and len(rows) == 7
    assert all(
        "  request    bob  " in row and "POST /sessions/{session_id}/" in row for row in refused
    )


def _audit(capsys: pytest.CaptureFixture[str], *args: str) -> list[dict[str, Any]]:
    assert main(["audit", *args, "--json"]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_the_audit_command_s_filters(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "audit.log"
    _mixed_log(path)
    log = str(path)
    assert {line["tenant"] for line in _audit(capsys, log, "--session", "bob")} == {"bob"}
    assert len(_audit(capsys, log, "--kind", "execution")) == 6
    assert len(_audit(capsys, log, "--status", "403", "--status", "429")) == 6
    assert len(_audit(capsys, log, "--status", "201", "--tenant", "bob")) == 0
    assert len(_audit(capsys, log, "--since", "2000-01-01")) == 18
    assert _audit(capsys, log, "--since", "2999-01-01T00:00:00+02:00") == []
    with pytest.raises(SystemExit) as exit_:
        main(["audit", log, "--since", "yesterday"])
    assert exit_.value.code == 2 and "'yesterday' is not a time" in capsys.readouterr().err
    assert main(["audit", str(tmp_path / "none.log")]) == 2
    assert capsys.readouterr().err == (
        f"kernelexec: no audit log at {tmp_path / 'none.log'}: give the file the server's "
        "--audit-log names\n"
    )
    (tmp_path / "audit.log.99").mkdir()  # not a file: said in one line, no traceback
    assert main(["audit", log]) == 2
    assert capsys.readouterr().err.startswith(f"kernelexec: cannot read {log}.99 (Is a directory)")


# -- the documentation's account of the format

GUIDE = ROOT / "docs" / "guides" / "audit.md"


def test_the_guide_lists_every_field_and_its_examples_are_lines_the_log_takes(
    tmp_path: Path,
) -> None:
    text = GUIDE.read_text()
    rows = re.findall(r"^\| `(\w+)` \| (\w+) \|", text, re.M)
    assert [name for name, _ in rows] == list(FIELDS)
    assert {name: kind for name, kind in rows} == {name: kind for name, (kind, _) in FIELDS.items()}
    examples = re.findall(r"```json\n(.*?)\n```", text, re.S)
    assert len(examples) >= 3
    with AuditLog(tmp_path / "audit.log") as log:
        for example in examples:
            fields = json.loads(example)
            log.record({k: v for k, v in fields.items() if k not in ("v", "time")})
    for example, line in zip(examples, every_line(tmp_path / "audit.log"), strict=True):
        assert list(line)[2:] == list(json.loads(example))[2:]  # in the order the log writes


def test_close_gives_up_on_a_writer_stuck_past_its_timeout(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "audit.log"
    log = AuditLog(path, queue_size=1)
    with open(f"{path}.lock", "wb") as holder, caplog.at_level(logging.WARNING, "kernelexec"):
        fcntl.flock(holder, fcntl.LOCK_EX)
        log.record(request("alice", 0))
        waited = time.monotonic() + 10
        while log._queue.qsize() and time.monotonic() < waited:
            time.sleep(0.01)  # until the writer holds it, waiting on the lock
        log.record(request("alice", 1))  # the queue is full now
        started = time.monotonic()
        log.close(timeout=0.3)  # a server's shutdown is not held up for good
        # The lock is held right here: a close that waited for it would never return.
        assert time.monotonic() - started < SOON
        assert "its writer is stuck" in caplog.text
    log.close(timeout=10)  # the lock free again: what it held is written after all
    assert [line["execution_id"] for line in every_line(path)] == ["alice-00-0", "alice-00-1"]
    assert (log.written, log.dropped) == (2, 0)
