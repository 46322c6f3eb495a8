"""A kernel's code hunts for its owner's secrets: it finds none.

Secrets are planted in the environment and on the command line of the process
that owns the kernel (a library program, ``kernelexec serve``, ``kernelexec
mcp``, ``kernelexec gateway``, a library program with a Docker kernel), as
root and as another, unprivileged user. The kernel then reads
``/proc/<pid>/environ`` and ``cmdline`` of every process it can see, the
``environ``, ``maps`` and ``mem`` of each of its ancestors, and tries whatever
token it found against the server's API.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from _nobody import NOBODY, as_nobody
from _serverproc import free_port
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.types import TextContent
from servers import docker_image

import kernelexec
from kernelexec import AsyncSession, DockerBackend, GatewayBackend

# Every test here holds for kernels forked from a zygote and for spawned ones.
# Uncontained kernels, the hard case: each sees its owner and its ancestors in
# /proc, and may drop to another user. A contained kernel sees neither, nor any
# process but its own (tests/test_containment.py).
pytestmark = [pytest.mark.usefixtures("kernel_start"), pytest.mark.uncontained]

# Run inside the kernel. The marker is split so that this code, which the
# owner process holds too, does not count as a find.
PROBE = r"""
import json, os, re, urllib.request
MARK = b"kx" + b"secret"
URL, SCHEME, NEEDLE = {url!r}, {scheme!r}, {needle!r}.encode()

def read(path):
    try:
        with open(path, "rb") as file:
            return file.read(), None
    except OSError as exc:
        return b"", type(exc).__name__

ancestors, pid = [], os.getpid()
while True:
    stat, _ = read(f"/proc/{{pid}}/stat")
    pid = int(stat.rsplit(b")", 1)[1].split()[1]) if stat else 0
    if pid < 1:
        break
    ancestors.append(pid)
found, candidates, cmdlines, visible, needle_seen = [], set(), {{}}, 0, False
for name in filter(str.isdigit, os.listdir("/proc")):
    visible += 1
    for what in ("environ", "cmdline"):
        data, _ = read(f"/proc/{{name}}/{{what}}")
        if what == "cmdline" and (int(name) in ancestors or name == "1"):
            # Head and tail only: a CI runner's ancestor may carry a whole
            # script, and the report must fit a result's text.
            shown = data if len(data) <= 800 else data[:400] + b" ... " + data[-400:]
            cmdlines[int(name)] = shown.replace(b"\0", b" ").decode("utf-8", "replace")
        needle_seen |= bool(NEEDLE) and NEEDLE in data
        if MARK in data:
            secrets = set(re.findall(rb"kx" + rb"secret[-\w]*", data))
            found.append([f"{{name}}/{{what}}", sorted(s.decode() for s in secrets)])
            candidates |= secrets
access = {{}}
for pid in ancestors:
    row = {{what: read(f"/proc/{{pid}}/{{what}}")[1] or "read" for what in ("environ", "maps")}}
    try:
        with open(f"/proc/{{pid}}/mem", "rb") as mem:
            row["mem"] = "opened"
            maps, _ = read(f"/proc/{{pid}}/maps")
            for line in maps.decode().splitlines():
                span, perms = line.split()[:2]
                low, high = (int(x, 16) for x in span.split("-"))
                try:
                    mem.seek(low)
                    chunk = mem.read(min(high - low, 1 << 26))
                except (OSError, ValueError, OverflowError):
                    continue
                row["mem"] = "read"
                if MARK in chunk:
                    secrets = set(re.findall(rb"kx" + rb"secret[-\w]*", chunk))
                    found.append([f"{{pid}}/mem", sorted(s.decode() for s in secrets)])
                    candidates |= secrets
    except OSError as exc:
        row["mem"] = type(exc).__name__
    access[pid] = row
api = {{}}
for token in sorted(candidates)[:50] + [b"no-token"]:
    request = urllib.request.Request(
        URL, headers={{"Authorization": f"{{SCHEME}} {{token.decode()}}"}}
    ) if URL else None
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            api[token.decode()] = reply.status
    except urllib.error.HTTPError as exc:
        api[token.decode()] = exc.code
    except (OSError, ValueError, AttributeError) as exc:
        api[token.decode()] = type(exc).__name__
status, _ = read("/proc/self/status")
caps = dict(re.findall(r"(Cap\w+):\s+(\w+)", status.decode()))
print("PROBE" + json.dumps({{
    "found": found, "ancestors": ancestors, "access": access, "api": api,
    "cmdlines": cmdlines, "visible": visible, "needle_seen": needle_seen,
    "uid": os.getuid(), "caps": caps,
}}))
"""
LIBRARY = """
import json, sys
from kernelexec import Session
backend = None
if sys.argv[3] != "-":
    from kernelexec import DockerBackend
    backend = DockerBackend(image=sys.argv[3])
with Session(sys.argv[1], timeout=120, backend=backend) as session:
    print(session.execute(open(sys.argv[2]).read()).stdout, flush=True)
"""
SIBLINGS = """
import sys
from kernelexec import Session
with Session(sys.argv[1] + "/a", timeout=120) as a, Session(sys.argv[1] + "/b") as b:
    pid = b.execute("import os; os.getpid()").text.strip()
    key = b.connection_info["key"]
    code = open(sys.argv[2]).read().replace("PID_B", pid).replace("KEY_B", key)
    print(a.execute(code).stdout, flush=True)
"""
SIBLING_PROBE = r"""
import glob, json, os
pid, key = PID_B, "KEY_B".encode()
access = {}
for what in ("environ", "mem", "maps"):
    try:
        with open(f"/proc/{pid}/{what}", "rb") as file:
            file.read(1)
        access[what] = "read"
    except OSError as exc:
        access[what] = type(exc).__name__
holding = []
from jupyter_core.paths import jupyter_runtime_dir
# Where connection files and kernel sockets go: the runtime dir, HOME, /tmp.
paths = glob.glob(os.path.join(os.path.expanduser("~"), "**"), recursive=True)
paths += glob.glob(os.path.join(jupyter_runtime_dir(), "**"), recursive=True)
paths += glob.glob("/tmp/*.json") + glob.glob("/tmp/kernelexec-ipc-*/*")
for path in paths:
    try:
        with open(path, "rb") as file:
            if key in file.read(1 << 20):
                holding.append(path)
    except OSError:
        pass
print("PROBE" + json.dumps({"access": access, "holding": holding}))
"""


class Owner:
    """Secrets to plant, and how to run an owner process as a given user."""

    def __init__(self, base: Path, user: str) -> None:
        self.base = base
        self.user = user
        tag = uuid.uuid4().hex[:12]
        self.env_secrets = {
            "MY_API_KEY": f"kxsecret-env-{tag}",
            "OPENAI_API_KEY": f"kxsecret-openai-{tag}",
            "KERNELEXEC_TOKEN": f"kxsecret-envtoken-{tag}",
        }
        self.argv_token = f"kxsecret-argvtoken-{tag}"
        self.home = base / "home"
        self.home.mkdir()
        self.env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.home),
            "LANG": "C.UTF-8",
            # The kernelexec under test, wherever the owner's cwd is.
            "PYTHONPATH": str(Path(kernelexec.__file__).parent.parent),
            # The module's own choice: uncontained kernels (see pytestmark).
            "KERNELEXEC_SANDBOX": os.environ.get("KERNELEXEC_SANDBOX", ""),
            **self.env_secrets,
        }
        if user == "nobody":
            for path in (base, self.home):
                os.chown(path, NOBODY, NOBODY)

    def argv(self, *command: str) -> list[str]:
        """``command`` run as this owner's user."""
        if self.user != "nobody" or os.geteuid() != 0:
            return list(command)
        setpriv = [
            "setpriv",
            f"--reuid={NOBODY}",
            f"--regid={NOBODY}",
            "--clear-groups",
            "--inh-caps=-all",
        ]
        return as_nobody(list(command), self.base, setpriv)

    def planted(self) -> set[str]:
        return {*self.env_secrets.values(), self.argv_token}


@pytest.fixture(params=["root", "nobody"])
def owner(request: pytest.FixtureRequest) -> Iterator[Owner]:
    if request.param == "root" and os.geteuid() != 0:
        pytest.skip("the root variant needs root; the unprivileged one runs as this user")
    base = Path(tempfile.mkdtemp(prefix="kx-owner-"))
    base.chmod(0o755)
    try:
        yield Owner(base, request.param)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def probe_code(url: str = "", scheme: str = "Bearer", needle: str = "") -> str:
    """The probe; it tries what it finds against ``url`` and looks for ``needle`` anywhere."""
    return PROBE.format(url=url, scheme=scheme, needle=needle)


def report(stdout: str) -> dict[str, Any]:
    for line in stdout.splitlines():
        if line.startswith("PROBE"):
            parsed: dict[str, Any] = json.loads(line[len("PROBE") :])
            return parsed
    raise AssertionError(f"no probe report in: {stdout[-3000:]}")


def check(found: dict[str, Any], owner: Owner, owner_pid: int | None) -> None:
    """Nothing planted was found, and the owner was closed to every read."""
    # Another test's owner, between its exec and its first line of kernelexec
    # code, may show its own secrets; only this owner's count.
    mine = [(where, secrets) for where, secrets in found["found"] if owner.planted() & {*secrets}]
    assert mine == []
    assert not any(code == 200 for code in found["api"].values()), found["api"]
    assert found["uid"] == (NOBODY if owner.user == "nobody" else os.geteuid())
    if found["uid"] == 0:
        bounding = int(found["caps"]["CapBnd"], 16)
        assert not bounding & (1 << 19), "a root kernel kept CAP_SYS_PTRACE"
    if owner_pid is not None:
        assert owner_pid in found["ancestors"]
        denied = dict.fromkeys(("environ", "maps", "mem"), "PermissionError")
        assert found["access"][str(owner_pid)] == denied
        shown = found["cmdlines"][str(owner_pid)]
        assert owner.argv_token not in shown and "*" * len(owner.argv_token) in shown


def test_a_library_session(owner: Owner) -> None:
    probe = owner.base / "probe.py"
    probe.write_text(probe_code())
    work = owner.base / "work"
    driver = owner.argv(
        sys.executable, "-c", LIBRARY, str(work), str(probe), "-", "--token", owner.argv_token
    )
    proc = subprocess.Popen(driver, env=owner.env, stdout=subprocess.PIPE, text=True)
    out, _ = proc.communicate(timeout=180)
    found = report(out)
    owner_pid = _pid_running(found, "kernelexec import Session")
    check(found, owner, owner_pid)


def test_a_docker_session(tmp_path: Path) -> None:
    owner = Owner(tmp_path, "root" if os.geteuid() == 0 else "user")
    image = docker_image()
    probe = tmp_path / "probe.py"
    marker = f"kx-driver-{uuid.uuid4().hex}"
    probe.write_text(probe_code(needle=marker))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            LIBRARY,
            str(tmp_path / "work"),
            str(probe),
            image,
            marker,
            "--token",
            owner.argv_token,
        ],
        env={**owner.env, **{k: v for k, v in os.environ.items() if k.startswith("DOCKER_")}},
        stdout=subprocess.PIPE,
        text=True,
    )
    out, _ = proc.communicate(timeout=300)
    found = report(out)
    check(found, owner, None)
    # Its own PID namespace: tini as PID 1, and no host process in sight.
    assert "tini" in found["cmdlines"]["1"]
    assert not found["needle_seen"]
    assert found["visible"] < 10


def test_a_serve_session(owner: Owner) -> None:
    probe = probe_code()  # its URL is known only once the server listens
    server = subprocess.Popen(
        owner.argv(
            sys.executable, "-m", "kernelexec", "serve", "--port", "0",
            "--token", owner.argv_token, "--work-root", str(owner.base / "work"),
        ),
        env=owner.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip
    try:
        url = _wait_for_line(server, r"serving (http://\S+) ")
        auth = {"Authorization": f"Bearer {owner.argv_token}"}
        with httpx.Client(base_url=url, headers=auth, trust_env=False, timeout=180) as http:
            session = http.post("/sessions", json={}).json()["id"]
            probe = probe_code(f"{url}/sessions", "Bearer")
            reply = http.post(f"/sessions/{session}/execute", json={"code": probe})
        found = report(reply.json()["stdout"])
        check(found, owner, server.pid)
        assert found["api"]["no-token"] == 401  # the API is there (see check for the rest)
    finally:
        server.terminate()
        server.wait(60)


def test_an_mcp_session(owner: Owner) -> None:
    async def run() -> str:
        command = owner.argv(
            sys.executable, "-m", "kernelexec", "mcp", "--work-root", str(owner.base / "work"),
            "--token", owner.argv_token,
        )  # fmt: skip
        params = StdioServerParameters(command=command[0], args=command[1:], env=owner.env)
        with (owner.base / "mcp-stderr.log").open("w") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write):
                async with ClientSession(read, write) as client:
                    await client.initialize()
                    result = await client.call_tool("execute_code", {"code": probe_code()})
        return "".join(c.text for c in result.content if isinstance(c, TextContent))

    found = report(asyncio.run(run()))
    owner_pid = _pid_running(found, "kernelexec mcp")
    check(found, owner, owner_pid)


def test_a_gateway_session(owner: Owner) -> None:
    port = free_port()
    gateway = subprocess.Popen(
        owner.argv(
            sys.executable, "-m", "kernelexec", "gateway", "--port", str(port),
            "--token", owner.argv_token,
        ),
        env=owner.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=owner.base,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    work = owner.base / "work"  # the gateway's kernel starts in it: its user's
    work.mkdir()
    if owner.user == "nobody" and os.geteuid() == 0:
        os.chown(work, NOBODY, NOBODY)
    try:
        _wait_for_gateway(gateway, url, owner.argv_token)

        async def run() -> str:
            backend = GatewayBackend(url, token=owner.argv_token)
            async with AsyncSession(work, backend=backend, timeout=120) as session:
                probe = probe_code(f"{url}/api/kernels", "token")
                return (await session.execute(probe)).stdout

        found = report(asyncio.run(run()))
        check(found, owner, gateway.pid)
        assert found["api"]["no-token"] == 401
    finally:
        gateway.terminate()
        gateway.wait(60)


def test_kernelexec_dumpable_opts_out() -> None:
    # For debugging (py-spy, gdb, core dumps without root): the process stays
    # readable to its own uid, so a kernel of that uid reads its environment.
    base = Path(tempfile.mkdtemp(prefix="kx-owner-"))
    base.chmod(0o755)
    try:
        owner = Owner(base, "nobody")
        owner.env["KERNELEXEC_DUMPABLE"] = "1"
        probe = base / "probe.py"
        probe.write_text(probe_code())
        driver = owner.argv(sys.executable, "-c", LIBRARY, str(base / "work"), str(probe), "-")
        out = subprocess.run(driver, env=owner.env, capture_output=True, text=True, timeout=180)
        found = report(out.stdout)
        owner_pid = _pid_running(found, "kernelexec import Session")
        assert found["access"][str(owner_pid)]["environ"] == "read"
        assert owner.env_secrets["MY_API_KEY"] in {s for _, got in found["found"] for s in got}
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_sibling_kernels_cannot_read_each_other(owner: Owner) -> None:
    # Two sessions of one owner: one kernel cannot read the other's memory or
    # environment, and the other's key is in no file it can find.
    probe = owner.base / "probe.py"
    probe.write_text(SIBLING_PROBE)
    driver = owner.argv(sys.executable, "-c", SIBLINGS, str(owner.base / "work"), str(probe))
    out = subprocess.run(driver, env=owner.env, capture_output=True, text=True, timeout=180)
    found = report(out.stdout + out.stderr)
    assert found["access"] == dict.fromkeys(("environ", "mem", "maps"), "PermissionError")
    assert found["holding"] == []


def _pid_running(found: dict[str, Any], needle: str) -> int:
    """The kernel's nearest ancestor whose command line holds ``needle``."""
    for pid in found["ancestors"]:
        if needle in found["cmdlines"].get(str(pid), ""):
            return int(pid)
    raise AssertionError(f"no ancestor runs {needle!r}: {found['cmdlines']}")


def _wait_for_line(proc: subprocess.Popen[str], pattern: str) -> str:
    assert proc.stdout is not None
    seen = []
    for line in proc.stdout:
        seen.append(line)
        matched = re.search(pattern, line)
        if matched:
            return matched.group(1)
    raise AssertionError(f"the server exited: {''.join(seen)[-3000:]}")


def _wait_for_gateway(proc: subprocess.Popen[str], url: str, token: str) -> None:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stdout.read() if proc.stdout else "exited"
        try:
            reply = httpx.get(
                f"{url}/api/kernelspecs",
                headers={"Authorization": f"token {token}"},
                trust_env=False,
            )
            if reply.status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise AssertionError("the gateway did not answer")


def test_credential_like_options_are_starred_out_in_place() -> None:
    from kernelexec._containment._secrecy import hidden_arguments  # here: the old code has none

    raw = b"python\0-m\0kernelexec\0serve\0--token\0abc123\0--api-key=k3y\0--port\0 80\0"
    hidden = hidden_arguments(raw)
    assert hidden == b"python\0-m\0kernelexec\0serve\0--token\0******\0--api-key=***\0--port\0 80\0"
    assert len(hidden) == len(raw)  # it is written where the original was


def test_docker_gets_kernel_variables_by_name_only(tmp_path: Path) -> None:
    # A value passed on purpose (a key for the agent's code) must not be in
    # the docker command line, which every user of the machine can read.
    backend = DockerBackend(env={"MY_API_KEY": "kxsecret-passed-on-purpose"})
    backend._ipc_dir = tmp_path
    options = backend._run_options(tmp_path, {"OTHER_TOKEN": "kxsecret-env-on-purpose"})
    assert not any("kxsecret" in option for option in options)
    assert {"MY_API_KEY", "OTHER_TOKEN"} <= set(options)
    assert backend._container_env({"OTHER_TOKEN": "x"})["OTHER_TOKEN"] == "x"
