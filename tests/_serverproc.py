"""A real ``kernelexec serve`` process on a free loopback port, for the server tests."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
from _pids import host_pid

TOKEN = "test-token-0123456789"
# A class whose pickling takes ``seconds``: a checkpoint (or a suspend) of ``Slow(60)``
# is under way for a minute, long enough to act in the middle of it.
SLOW = (
    "import time\n"
    "class Slow:\n"
    "    def __init__(self, seconds): self.seconds = seconds\n"
    "    def __reduce__(self):\n"
    "        time.sleep(self.seconds)\n"
    "        return (Slow, (0,))\n"
)


def wait_for(condition: Any, seconds: float = 90) -> bool:
    """Polls ``condition`` until it holds (True) or ``seconds`` pass (False)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class ServerProcess:
    """``python -m kernelexec serve --port 0`` with these options, until ``stop()``.

    The server binds a free port itself and prints it: a port chosen free here
    could be taken by another process before the server bound it.
    """

    def __init__(
        self,
        work_root: Path,
        *options: str,
        token: str | None = TOKEN,
        prefix: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        """Starts ``kernelexec serve``; ``prefix`` runs it under another command (a wrapper).

        ``token`` None: no ``--token`` (a server with ``--tenants``), and ``http`` sends none.
        """
        self.work_root = work_root
        self.token = token
        work_root.parent.mkdir(parents=True, exist_ok=True)
        self.log = work_root.parent / f"server-{work_root.name}.log"
        self._log_file = self.log.open("w")
        self.proc = subprocess.Popen(
            [
                *prefix,
                sys.executable,
                "-m",
                "kernelexec",
                "serve",
                "--port",
                "0",
                *(() if token is None else ("--token", token)),
                "--work-root",
                str(work_root),
                *options,
            ],
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            env=None if env is None else dict(env),
            cwd=cwd,
        )
        self.port = self._wait_listening()
        self.url = f"http://127.0.0.1:{self.port}"
        self.http = httpx.Client(
            base_url=self.url,
            headers=self.auth,
            trust_env=False,
            timeout=httpx.Timeout(30.0, read=120.0),
        )
        self._wait_ready()

    @property
    def auth(self) -> dict[str, str]:
        return {} if self.token is None else {"Authorization": f"Bearer {self.token}"}

    def _wait_listening(self) -> int:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            found = re.search(r"serving http://127\.0\.0\.1:(\d+)", self.log.read_text())
            if found:
                return int(found.group(1))
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited: {self.log.read_text()}")
            time.sleep(0.05)
        raise RuntimeError(f"the server did not say where it listens: {self.log.read_text()}")

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited: {self.log.read_text()}")
            try:
                if httpx.get(f"{self.url}/health", trust_env=False).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"the server did not answer: {self.log.read_text()}")

    def create(self, **body: Any) -> str:
        response = self.http.post("/sessions", json=body)
        assert response.status_code == 201, response.text
        session_id: str = response.json()["id"]
        return session_id

    def execute(self, session_id: str, code: str, **body: Any) -> dict[str, Any]:
        response = self.http.post(f"/sessions/{session_id}/execute", json={"code": code, **body})
        assert response.status_code == 200, response.text
        result: dict[str, Any] = response.json()
        return result

    def state(self, session_id: str) -> dict[str, Any]:
        """``GET /sessions/{id}``: the session as the server describes it."""
        found: dict[str, Any] = self.http.get(f"/sessions/{session_id}").json()
        return found

    def kernel_pid(self, session_id: str) -> int:
        """The session's kernel's pid on this machine (not in its own PID namespace)."""
        pid = int(self.execute(session_id, "import os; print(os.getpid())")["stdout"])
        return host_pid(pid, self.work_root / session_id)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 90) -> int:
        self.http.close()
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise
        finally:
            self._log_file.close()


def jupyter_message(
    msg_type: str, content: dict[str, Any], channel: str = "shell"
) -> dict[str, Any]:
    """A request as a Jupyter client sends it over the channels WebSocket (JSON frame)."""
    return {
        "channel": channel,
        "header": {
            "msg_id": uuid.uuid4().hex,
            "msg_type": msg_type,
            "username": "debugger",
            "session": "debug",
            "date": "",
            "version": "5.3",
        },
        "parent_header": {},
        "metadata": {},
        "content": content,
        "buffers": [],
    }


def execute_request(code: str) -> dict[str, Any]:
    """An execute_request as a notebook sends it over the channels WebSocket."""
    return jupyter_message(
        "execute_request",
        {
            "code": code,
            "silent": False,
            "store_history": True,
            "user_expressions": {},
            "allow_stdin": False,
        },
    )


def reply_to(ws: Any, msg: dict[str, Any], msg_type: str) -> dict[str, Any]:
    """Sends ``msg`` on a channels WebSocket; the kernel's ``msg_type`` frame answering it."""
    ws.send(json.dumps(msg))
    while True:
        frame = json.loads(ws.recv())
        parent = frame["parent_header"].get("msg_id")
        if parent == msg["header"]["msg_id"] and frame["msg_type"] == msg_type:
            return frame


def descendants(pid: int) -> set[int]:
    """Every process below ``pid``, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(entry))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def kernels_below(pid: int) -> set[int]:
    """The processes below ``pid`` but its kernel zygotes (which live as long as it does)
    and contained kernels' namespace inits (which live as long as their supervisors).

    A kernel forked from a zygote is the zygote's descendant, and is counted.
    """
    found = descendants(pid)
    left_out = set()
    for child in found:
        try:
            cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
            stat = Path(f"/proc/{child}/stat").read_text()
            status = Path(f"/proc/{child}/status").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid and b"zygote.py" in cmdline:
            left_out.add(child)
        if any(
            line.split()[2:] == ["1"] for line in status.splitlines() if line.startswith("NSpid:")
        ):
            left_out.add(child)  # pid 1 of a PID namespace below this one
    return found - left_out


def peak_mb(pid: int) -> float:
    """``pid``'s peak resident memory (VmHWM), in MB."""
    status = Path(f"/proc/{pid}/status").read_text()
    return int(status.split("VmHWM:")[1].split()[0]) / 1024


@contextlib.contextmanager
def peak_growth(pid: int) -> Iterator[list[float]]:
    """Yields a list that gets the growth of ``pid``'s peak RSS (MB) over the block."""
    # Resetting the peak measures this block only, not a bigger one before it.
    with contextlib.suppress(OSError):
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    grown: list[float] = []
    before = peak_mb(pid)
    yield grown
    grown.append(peak_mb(pid) - before)


__all__ = [
    "SLOW",
    "TOKEN",
    "ServerProcess",
    "descendants",
    "free_port",
    "jupyter_message",
    "peak_growth",
    "signal",
    "wait_for",
]


def raw_request(
    server: ServerProcess, method: str, target: str, body: bytes | None = None
) -> tuple[int, bytes]:
    """A request sent exactly as written: no client normalizes the path."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    try:
        conn.request(method, target, body=body, headers=server.auth)
        response = conn.getresponse()
        try:
            return response.status, response.read()
        except http.client.IncompleteRead as exc:  # a length from one file, bytes of another
            return response.status, exc.partial
    finally:
        conn.close()
