"""A kernel that forges its fork reply: the host learns a fork from Linux, never from the kernel.

The kernel's code replaces the fork request's handler and answers "ok" with a
pid of its choosing: the owner, the owner's parent, a zygote, another
session's kernel, a process outside every tree. A host that believed it would
end that process's tree as a failed fork. The owner here runs in a process of
its own under a shell, so that a host that did believe it could only hurt
what the test made for it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _serverproc import ServerProcess
from conftest import SOON, process_gone

from kernelexec._kernel.guard import descendants

# Every test here holds for a parent forked from a zygote and for a spawned one.
# A process fork copies an uncontained kernel; a contained one is checkpointed
# and restored instead (tests/test_containment.py forks contained kernels).
pytestmark = [pytest.mark.usefixtures("kernel_start"), pytest.mark.uncontained]

STARTUP_TIMEOUT = 20.0
# A forged reply naming a pid; {connect} makes the kernel itself also
# connect to the owner's hello socket, as a fork would.
FORGE = """
import os, socket, struct
_k = get_ipython().kernel
def _forged(stream, ident, parent, _pid={pid}, _connect={connect}):
    if _connect:
        s = socket.socket(socket.AF_UNIX)
        s.connect(parent["content"]["hello"])
        s.close()
    _k.session.send(stream, "kernelexec_fork_reply", {{"status": "ok", "pid": _pid}}, parent, ident)
_k.shell_handlers["kernelexec_fork_request"] = _forged
"""
OWNER = """
import asyncio, json, os, sys, time
from pathlib import Path
from kernelexec import AsyncSession, KernelStartError
from kernelexec._backends import _zygote

FORGE = {forge!r}
STARTUP = {startup!r}


def state(pid):
    try:
        return Path(f"/proc/{{pid}}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


async def main(root, outside):
    async with AsyncSession(root / "victim") as victim, AsyncSession(
        root / "attacker", startup_timeout=STARTUP
    ) as attacker:
        await victim.execute("kept = 42")
        victim_kernel = int((await victim.execute("import os; print(os.getpid())")).stdout)
        targets = {{
            "owner": os.getpid(),
            "owners parent": os.getppid(),
            "another session's kernel": victim_kernel,
            "outside the tree": outside,
        }}
        for i, zygote in enumerate(_zygote._ZYGOTES.values()):
            targets[f"zygote {{i}}"] = zygote._process.pid
        results = {{}}
        for connect in (False, True):
            for name, pid in targets.items():
                await attacker.execute(FORGE.format(pid=pid, connect=connect))
                began = time.monotonic()
                try:
                    child = await attacker.fork(root / f"fork-{{len(results)}}")
                except KernelStartError as exc:
                    outcome = str(exc)
                else:
                    outcome = "forked"
                    await child.close()
                results[f"{{name}}, connect={{connect}}"] = {{
                    "outcome": outcome,
                    "seconds": time.monotonic() - began,
                    "states": {{n: state(p) for n, p in targets.items()}},
                }}
        kept = (await victim.execute("print(kept)")).stdout.strip()
        print(json.dumps({{"results": results, "kept": kept}}))


asyncio.run(main(Path(sys.argv[1]), int(sys.argv[2])))
"""


def test_a_forged_fork_reply_signals_nothing(tmp_path: Path) -> None:
    outside = subprocess.Popen(["sleep", "600"])
    try:
        script = OWNER.format(forge=FORGE, startup=STARTUP_TIMEOUT)
        # Under a shell that stays (``; true``), so the owner's parent is the shell.
        shell = f'"{sys.executable}" -c "$0" "$1" "$2"; true'
        done = subprocess.run(
            ["sh", "-c", shell, script, str(tmp_path), str(outside.pid)],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        report = json.loads(done.stdout.strip().splitlines()[-1])
        assert report["kept"] == "42"  # the other session's kernel kept its state
        for attack, seen in report["results"].items():
            assert seen["outcome"] != "forked", attack
            assert "no new process" in seen["outcome"], (attack, seen)
            assert seen["seconds"] < STARTUP_TIMEOUT, (attack, seen)
            for target, st in seen["states"].items():
                # Alive and not frozen (end_tree stops what it is about to kill).
                assert st in ("S", "R", "D"), (attack, target, st)
        assert outside.poll() is None
    finally:
        outside.kill()
        outside.wait()


SPAWNING_FORGE = """
import os, socket, subprocess, sys
_k = get_ipython().kernel
def _forged(stream, ident, parent):
    # A new process of the kernel's own connects, and is not a kernel.
    code = "import socket, sys, time; s = socket.socket(socket.AF_UNIX); "
    code += "s.connect(sys.argv[1]); s.close(); time.sleep(600)"
    global _spawned
    _spawned = subprocess.Popen([sys.executable, "-c", code, parent["content"]["hello"]])
    _k.session.send(stream, "kernelexec_fork_reply", {"status": "ok"}, parent, ident)
_k.shell_handlers["kernelexec_fork_request"] = _forged
"""


async def test_a_process_of_the_kernels_own_that_is_no_kernel_is_ended(tmp_path: Path) -> None:
    from kernelexec import AsyncSession, KernelStartError

    async with AsyncSession(tmp_path / "attacker", startup_timeout=8) as attacker:
        await attacker.execute(SPAWNING_FORGE)
        with pytest.raises(KernelStartError, match="did not answer"):
            await attacker.fork(tmp_path / "fork")
        spawned = int((await attacker.execute("print(_spawned.pid)")).stdout)
        # It was the kernel's own new process: the failed fork's clean-up ended it.
        deadline = time.monotonic() + SOON
        while not process_gone(spawned) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert process_gone(spawned)
        assert (await attacker.execute("print(1 + 1)")).stdout == "2\n"


# The server's parent: passes SIGTERM on, so ServerProcess.stop still stops the server.
WRAPPER = (
    "import signal, subprocess, sys; p = subprocess.Popen(sys.argv[1:]); "
    "signal.signal(signal.SIGTERM, lambda *_: p.terminate()); sys.exit(p.wait())"
)


def test_a_forged_fork_reply_over_http_leaves_the_server_and_its_parent(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "root", prefix=[sys.executable, "-c", WRAPPER])
    try:
        http = server.http
        serving = descendants(server.proc.pid)[0]  # the wrapper's one child
        victim = server.create()
        server.execute(victim, "kept = 7")
        attacker = server.create()
        for name, pid in (("the server", serving), ("the server's parent", server.proc.pid)):
            assert server.execute(attacker, FORGE.format(pid=pid, connect=False))["status"] == "ok"
            began = time.monotonic()
            answer = http.post(f"/sessions/{attacker}/fork", json={})
            assert answer.status_code == 503, (name, answer.text)
            assert "no new process" in answer.json()["message"], (name, answer.text)
            assert time.monotonic() - began < SOON, name
            assert server.proc.poll() is None and not process_gone(serving), name
        listed = {s["id"] for s in http.get("/sessions").json()["sessions"]}
        assert listed >= {victim, attacker}
        assert server.execute(victim, "print(kept)")["stdout"] == "7\n"
    finally:
        server.stop()
