"""A script run in a network namespace of its own, with only loopback up.

For tests whose code, left to its defaults, would reach past this machine: a
Ray cluster announces the machine's address (``_raycluster.py``), E2B's SDK
calls E2B's cloud (``test_e2b.py``). In a new namespace whose only interface is
``lo``, no default can reach anything but 127.0.0.1, whatever a setting missed.

``run_in_netns(script, *args)`` starts ``python script args`` under ``unshare
--net`` (as root), holds the namespace open by a descriptor while it runs,
waits for the JSON answer the script writes to the path given as
``--answer``, then ends (by pid, after a grace) any process still in the
namespace: each is a leak, reported. The script calls ``enter()`` first: it
brings ``lo`` up and refuses to go on with any other interface.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _pids import end_netns
from _readme_shell import loopback_up

__all__ = ["NetnsRun", "enter", "held_namespace", "interfaces", "netns_missing", "run_in_netns"]


def netns_missing() -> str | None:
    """Why a namespace of a test's own cannot be made here (None: it can)."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return "a network namespace of the test's own needs root and unshare"
    probe = subprocess.run(["unshare", "--net", "true"], capture_output=True, timeout=60)
    return None if probe.returncode == 0 else f"unshare --net failed: {probe.stderr.decode()}"


def interfaces() -> list[str]:
    """This namespace's interfaces: if_nameindex asks the kernel through a socket of
    this namespace (/sys/class/net would show the namespace sysfs was mounted in)."""
    return sorted(name for _, name in socket.if_nameindex())


def enter() -> None:
    """In the script, first: ``lo`` up, and no other interface (else it stops here)."""
    loopback_up()
    found = interfaces()
    if found != ["lo"]:
        raise SystemExit(f"the namespace has {found}, not lo alone: refusing to go on")


@dataclass
class NetnsRun:
    """What a script run in a namespace gave back: its JSON answer, the processes left
    in the namespace after it (each killed), and the tail of what it printed."""

    answer: Any
    leaked: list[str] = field(default_factory=list)
    log: str = ""


def run_in_netns(
    script: Path,
    *args: str,
    timeout: float = 300.0,
    grace: float = 10.0,
    env: dict[str, str] | None = None,
) -> NetnsRun:
    """Runs ``script`` with ``args`` and ``--answer PATH`` in a new namespace; its answer.

    Raises:
        AssertionError: the script wrote no answer (it failed or ran past ``timeout``).
    """
    work = Path(tempfile.mkdtemp(prefix="kxnetns-"))
    answer_path, log_path = work / "answer.json", work / "script.log"
    outer = os.readlink("/proc/self/ns/net")
    command = [
        "unshare",
        "--net",
        "--",
        sys.executable,
        str(script),
        *args,
        "--answer",
        str(answer_path),
    ]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env or dict(os.environ)
        )
    leaked: list[str] = []
    timed_out = False
    try:
        with held_namespace(proc, outer) as namespace:
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                timed_out = True  # killed below with the rest of the namespace
            finally:  # an interrupted test too leaves nothing running
                leaked = end_netns(namespace, exclude=(), grace=grace)
            proc.wait(timeout=30)
        tail = log_path.read_text(errors="replace")[-6000:]
        if not answer_path.exists():
            why = f"ran past {timeout:g} s" if timed_out else f"exited {proc.returncode}"
            raise AssertionError(f"the script wrote no answer ({why}):\n{tail}")
        return NetnsRun(json.loads(answer_path.read_text()), leaked, tail)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        shutil.rmtree(work, ignore_errors=True)


@contextlib.contextmanager
def held_namespace(proc: subprocess.Popen[bytes], outer: str) -> Iterator[os.stat_result]:
    """The process's network namespace, held open by a descriptor while the block runs.

    Held, the namespace (and so its inode number) cannot go away and be reused
    by another while processes are looked for in it: a process whose
    ``/proc/<pid>/ns/net`` is this very inode is verifiably in the namespace this
    run made. Waits for ``unshare`` to have made it (it then execs the script).
    """
    deadline = time.monotonic() + 30
    while True:
        path = f"/proc/{proc.pid}/ns/net"
        try:
            if os.readlink(path) != outer:
                fd = os.open(path, os.O_RDONLY)
                break
        except FileNotFoundError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"unshare --net did not make a namespace (exit {proc.poll()})")
        time.sleep(0.005)
    try:
        if os.readlink(f"/proc/self/fd/{fd}") == outer:  # it ended and its pid was reused
            raise AssertionError("the script's namespace could not be held")
        yield os.fstat(fd)
    finally:
        os.close(fd)
