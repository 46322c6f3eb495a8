"""A contained kernel's code attacks its host: files, network, processes; nothing gives.

Each attack runs inside a kernel contained with ``sandbox=True``, started each
way a kernel comes to be: spawned, forked from a zygote, a ``session.fork()``
copy and a session restored from a checkpoint. The host plants what the
kernel must not reach (a secret in ``$HOME``, another session's work dir, a
checkpoint store, a port listening on 127.0.0.1 standing in for ``serve``) and
the kernel reports, as JSON, what each attempt raised. The kernel never tries
an address other than 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from _serverproc import ServerProcess
from conftest import warm_zygote

from kernelexec import (
    AsyncSession,
    ConfigurationError,
    ExecutionResult,
    KernelPool,
    Sandbox,
    Session,
)
from kernelexec._backends import _zygote
from kernelexec._backends._local import LocalBackend
from kernelexec._containment._hints import containment_note
from kernelexec._containment._platform import support
from kernelexec._kernel.guard import descendants

pytestmark = pytest.mark.skipif(
    not support().ok, reason=f"this machine cannot contain a kernel: {support().why_not()}"
)

KINDS = ["spawned", "forked", "fork-copy", "restored"]


@dataclass
class Host:
    """What the host planted for the kernel to go after."""

    secret: Path  # in $HOME
    neighbour: Path  # another session's work dir, a file in it
    store: Path  # a checkpoint store, a file in it
    outside: Path  # a folder outside the work dir, a file in it
    port: int  # listening on 127.0.0.1
    sockets: list[str]  # Unix sockets listening in $HOME and the temp dir (an agent's, tmux's)


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Host]:
    root = tmp_path_factory.mktemp("host")
    secret = Path.home() / f".kernelexec-test-secret-{uuid.uuid4().hex}"
    secret.write_text("kx-home-secret")
    secret.chmod(0o600)
    for name in ("neighbour", "store", "outside"):
        (root / name).mkdir()
        (root / name / "file").write_text(f"kx-{name}-secret")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    agents = []
    for folder in (Path.home(), root):
        path = folder / f".kx-agent-{uuid.uuid4().hex[:8]}"
        agent = socket.socket(socket.AF_UNIX)
        agent.bind(str(path))
        agent.listen(8)
        agents.append((agent, path))
    try:
        yield Host(
            secret,
            root / "neighbour",
            root / "store",
            root / "outside",
            listener.getsockname()[1],
            [str(path) for _, path in agents],
        )
    finally:
        listener.close()
        for agent, path in agents:
            agent.close()
            path.unlink()
        secret.unlink()


def _start(kind: str, work: Path, **options: Any) -> tuple[Session, list[Session]]:
    """A contained session started as ``kind``; and the sessions to close after it."""
    sandbox = options.pop("sandbox", True)
    if kind == "forked":
        warm_zygote()
    if kind in ("spawned", "forked"):
        session = Session(work, sandbox=sandbox, timeout=60, **options).start()
        assert _backend(session).forked is (kind == "forked")
        return session, [session]
    parent = Session(work.with_name(work.name + "-parent"), sandbox=sandbox, timeout=60).start()
    parent.execute("kept = 41")
    if kind == "fork-copy":
        child = parent.fork(work)
        assert child.fork_report is not None and child.fork_report.method == "checkpoint"
    else:
        saved = parent.checkpoint()
        child = Session.restore(saved, work, sandbox=sandbox, timeout=60)
    assert child.execute("print(kept + 1)").stdout.strip() == "42"
    return child, [child, parent]


def _backend(session: Session) -> LocalBackend:
    backend = session._async._backend
    assert isinstance(backend, LocalBackend)
    return backend


@pytest.fixture(scope="module", params=KINDS)
def contained(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Session]:
    kind = str(request.param)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("KERNELEXEC_ZYGOTE", "0" if kind == "spawned" else "1")
        session, opened = _start(kind, tmp_path_factory.mktemp(kind) / "work")
        try:
            yield session
        finally:
            for each in opened:
                each.close()


def attempt(session: Session, code: str) -> Any:
    """Runs ``code`` (which sets ``found``) in the kernel; ``found``, as JSON."""
    return found_in(session.execute(attempt_source(code)))


async def attempt_async(session: AsyncSession, code: str) -> Any:
    """``attempt`` in an ``AsyncSession``."""
    return found_in(await session.execute(attempt_source(code)))


def attempt_source(code: str) -> str:
    """``code`` in a function whose ``tried(action, ...)`` says what an attempt raised."""
    body = "\n".join("    " + line for line in code.strip().splitlines())
    return f"""
import json, os
def _attempt():
    def tried(action, *args, **kwargs):
        try:
            value = action(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001
            return f"{{type(exc).__name__}}: {{exc}}"
        return ["ok", value if isinstance(value, (str, int, list, type(None))) else repr(value)]
{body}
    return found
print(json.dumps(_attempt()))
del _attempt
"""


def found_in(result: ExecutionResult) -> Any:
    assert result.status == "ok", result.text
    return json.loads(result.stdout.strip().splitlines()[-1])


def denied(outcome: Any) -> bool:
    return isinstance(outcome, str) and outcome.split(":")[0] in (
        "PermissionError",
        "OSError",
        "FileNotFoundError",
        "ProcessLookupError",
    )


# -- 1. files


def test_the_policy_is_the_sessions_and_code_runs(contained: Session) -> None:
    assert contained.sandbox == Sandbox()
    assert contained.execute("1 + 1").text.strip() == "2"


def test_secrets_of_the_home_another_session_and_the_store_are_not_read(
    contained: Session, host: Host
) -> None:
    targets = {
        "home": str(host.secret),
        "home_dir": str(Path.home()),
        "neighbour": str(host.neighbour / "file"),
        "neighbour_dir": str(host.neighbour),
        "store": str(host.store / "file"),
        "work_root": str(contained.work_dir.parent),
    }
    found = attempt(
        contained,
        f"""
targets = {targets!r}
found = {{}}
for name, path in targets.items():
    if name.endswith("_dir") or name == "work_root":
        found[name] = tried(os.listdir, path)
    else:
        found[name] = tried(lambda p: open(p).read(), path)
# The namespace's init was forked before the kernel's mounts: its root is the host's.
found["init_root"] = tried(lambda p: open(p).read(), "/proc/1/root" + targets["home"])
found["init_cwd"] = tried(os.listdir, "/proc/1/cwd")
""",
    )
    for name, outcome in found.items():
        assert denied(outcome), f"{name}: {outcome}"


def test_writes_outside_the_work_dir_fail_by_any_path(contained: Session, host: Host) -> None:
    outside = host.outside
    work = contained.work_dir
    found = attempt(
        contained,
        f"""
import tempfile
import shutil
outside, work = {str(outside)!r}, {str(work)!r}
def write(path):
    with open(path, "w") as file:
        file.write("kx-written")
found = {{}}
found["work"] = tried(write, "in-work.txt")
found["temp"] = tried(lambda: tempfile.mkstemp()[1])
found["shm"] = tried(write, "/dev/shm/kx")
found["outside"] = tried(write, outside + "/file")
found["new_outside"] = tried(write, outside + "/new")
found["tmp"] = tried(write, "/tmp/kx-" + os.urandom(4).hex())
found["dotdot"] = tried(write, "../escaped.txt")
found["symlink_made"] = tried(os.symlink, outside + "/file", "link")
found["symlink"] = tried(write, "link")
found["dir_symlink_made"] = tried(os.symlink, outside, "linked-dir")
found["dir_symlink"] = tried(write, "linked-dir/new")
found["hardlink"] = tried(os.link, outside + "/file", "hard")
found["rename_out"] = tried(os.rename, "in-work.txt", outside + "/moved")
found["rename_dir_out"] = tried(os.rename, work, outside + "/work")
found["chmod_outside"] = tried(os.chmod, outside + "/file", 0o777)
found["unlink_outside"] = tried(os.unlink, outside + "/file")
found["etc"] = tried(write, "/etc/kx-written")
found["python"] = tried(write, os.path.dirname(os.__file__) + "/kx-written.py")
found["chmod"] = tried(os.chmod, "in-work.txt", 0o755)
found["setuid"] = tried(os.chmod, "in-work.txt", 0o4755)
found["setgid"] = tried(os.chmod, "in-work.txt", 0o2755)
found["made_setuid"] = tried(os.open, "setuid", os.O_CREAT | os.O_WRONLY, 0o4755)
found["copied_setuid"] = tried(shutil.copy, "/usr/bin/su", "su")
""",
    )
    # No program left in the work dir that runs as the kernel's user for whoever runs it.
    assert found["chmod"][0] == "ok", found
    for name in ("setuid", "setgid", "made_setuid"):
        assert found[name].startswith("PermissionError"), found
    assert not any(
        p.stat().st_mode & 0o6000 for p in work.iterdir() if p.is_file() and not p.is_symlink()
    )
    assert found["work"][0] == "ok", found
    assert found["temp"][0] == "ok", found
    assert found["shm"][0] == "ok", found
    assert found["symlink_made"][0] == "ok", found  # a link in the work dir is the kernel's own
    for name in (
        "outside",
        "new_outside",
        "tmp",
        "dotdot",
        "symlink",
        "dir_symlink",
        "hardlink",
        "rename_out",
        "rename_dir_out",
        "chmod_outside",
        "unlink_outside",
        "etc",
        "python",
    ):
        assert denied(found[name]), f"{name}: {found[name]}"
    assert (outside / "file").read_text() == "kx-outside-secret"
    assert sorted(p.name for p in outside.iterdir()) == ["file"]
    assert not (work.parent / "escaped.txt").exists()
    assert (work / "in-work.txt").read_text() == "kx-written"


def test_a_denied_read_or_write_names_the_option_that_allows_it(
    contained: Session, host: Host
) -> None:
    result = contained.execute(f"open({str(host.outside / 'file')!r}).read()")
    assert result.status == "error"
    # The folder is hidden from the kernel: the file is not there for it.
    assert result.error is not None and result.error.ename == "FileNotFoundError"
    assert "Sandbox(read=[...])" in result.text, result.text
    result = contained.execute("open('/etc/shadow').read()")  # a file it sees, not its to read
    assert result.error is not None and result.error.ename == "PermissionError"
    assert "Sandbox(read=[...])" in result.text, result.text
    result = contained.execute("open('not-there.txt').read()")  # its own work dir's
    assert result.status == "error" and "contained" not in result.text, result.text
    result = contained.execute("open('../escaped.txt', 'w')")
    assert result.status == "error" and "Sandbox(write=[...])" in result.text, result.text
    result = contained.execute("open('mine.txt', 'w').write('x'); open('mine.txt').read(9)")
    assert result.status == "ok" and "contained" not in result.text, result.text


# -- 2. network


def test_the_network_is_a_loopback_of_its_own(contained: Session, host: Host) -> None:
    found = attempt(
        contained,
        f"""
import socket
found = {{}}
found["interfaces"] = sorted(os.listdir("/sys/class/net"))
found["indexes"] = [name for _, name in socket.if_nameindex()]
found["host_port"] = tried(socket.create_connection, ("127.0.0.1", {host.port}), timeout=5)
own = socket.socket()
own.bind(("127.0.0.1", 0))
own.listen(1)
found["own_port"] = tried(lambda: socket.create_connection(own.getsockname(), timeout=5).close())
def unix(path):
    with socket.socket(socket.AF_UNIX) as sock:
        sock.connect(path)
found["unix"] = {{path: tried(unix, path) for path in {host.sockets!r}}}
own.close()
""",
    )
    assert found["interfaces"] == ["lo"], found
    for path, outcome in found["unix"].items():
        assert denied(outcome) or outcome.startswith("ConnectionRefusedError"), (path, outcome)
    assert found["indexes"] == ["lo"], found
    assert found["host_port"].startswith("ConnectionRefusedError"), found
    assert found["own_port"][0] == "ok", found


def test_network_true_reaches_the_host(tmp_path: Path, host: Host) -> None:
    with Session(tmp_path / "work", sandbox=Sandbox(network=True), timeout=60) as session:
        found = attempt(
            session,
            f"""
import socket
found = tried(lambda: socket.create_connection(("127.0.0.1", {host.port}), timeout=5).close())
""",
        )
    assert found[0] == "ok", found


# -- 3. processes and privileges


def test_no_process_outside_the_session_is_seen_or_signalled(
    contained: Session, tmp_path: Path
) -> None:
    zygotes = [z._process.pid for z in _zygote._ZYGOTES.values()]
    with Session(tmp_path / "neighbour", sandbox=True, timeout=60) as neighbour:
        neighbour.execute("1")
        supervisor = _backend(neighbour)._process
        assert supervisor is not None
        others = [os.getpid(), *zygotes, supervisor.pid, *descendants(supervisor.pid)]
        own = _backend(contained)._process
        assert own is not None
        others += [own.pid]  # the kernel's own supervisor
        found = attempt(
            contained,
            f"""
import ctypes, signal
libc = ctypes.CDLL(None, use_errno=True)
def ptrace(pid):
    if libc.ptrace(16, pid, None, None) != 0:  # PTRACE_ATTACH
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
found = {{"visible": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()), "me": os.getpid()}}
found["kill"] = {{pid: tried(os.kill, pid, signal.SIGKILL) for pid in {others!r}}}
found["ptrace"] = {{pid: tried(ptrace, pid) for pid in [1, *{others!r}]}}
found["kill_init"] = tried(os.kill, 1, signal.SIGKILL)
""",
        )
        assert neighbour.execute("print('alive')").stdout.strip() == "alive"
    assert found["visible"] == [1, 2] and found["me"] == 2, found
    for pid, outcome in found["kill"].items():
        assert outcome.startswith("ProcessLookupError"), (pid, outcome)
    for pid, outcome in found["ptrace"].items():
        assert denied(outcome), (pid, outcome)
    # Init ignores what its namespace sends it; the kernel is still there.
    assert contained.execute("print('still here')").stdout.strip() == "still here"


def test_privileges_are_gone_for_good(contained: Session) -> None:
    found = attempt(
        contained,
        """
lines = open("/proc/self/status").read().splitlines()
status = dict(line.split(":\\t", 1) for line in lines if ":\\t" in line)
names = ("NoNewPrivs", "Seccomp", "CapEff", "CapPrm", "CapBnd", "CapAmb")
found = {name: status[name].strip() for name in names}
""",
    )
    assert found["NoNewPrivs"] == "1" and found["Seccomp"] == "2", found
    for name in ("CapEff", "CapPrm", "CapBnd", "CapAmb"):
        assert int(found[name], 16) == 0, found


def test_namespaces_mounts_and_setuid_do_not_lift_it(contained: Session, host: Host) -> None:
    secret = str(host.secret)
    found = attempt(
        contained,
        f"""
import ctypes, subprocess
libc = ctypes.CDLL(None, use_errno=True)
def call(name, *args):
    if getattr(libc, name)(*args) != 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
def shell(*argv):
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    if done.returncode or "kx-home-secret" in done.stdout:
        said = (done.stdout + done.stderr).strip()[-300:]
        raise OSError("exit " + str(done.returncode) + ": " + said)
    return done.stdout
found = {{}}
found["unshare_user"] = tried(call, "unshare", 0x10000000)
found["unshare_mount"] = tried(call, "unshare", 0x00020000)
found["unshare_net"] = tried(call, "unshare", 0x40000000)
found["mount"] = tried(call, "mount", b"none", b"/tmp", b"tmpfs", 0, None)
found["umount_proc"] = tried(call, "umount2", b"/proc", 2)
found["open_init_net"] = tried(os.open, "/proc/1/ns/net", os.O_RDONLY)
found["setns_net"] = tried(call, "setns", os.open("/proc/self/ns/net", os.O_RDONLY), 0)
found["chroot"] = tried(call, "chroot", b"/tmp")
found["unshare_cmd"] = tried(shell, "unshare", "-r", "cat", {secret!r})
found["su_cmd"] = tried(shell, "su", "-c", "cat " + {secret!r})
found["mount_cmd"] = tried(shell, "mount", "-t", "tmpfs", "none", "/mnt")
found["secret_after"] = tried(lambda: open({secret!r}).read())
""",
    )
    for name, outcome in found.items():
        assert denied(outcome), f"{name}: {outcome}"


# -- how a contained session shows it


def test_a_denied_network_names_network_true(contained: Session) -> None:
    result = contained.execute(
        "import socket; socket.create_connection(('127.0.0.1', 9), timeout=5)"
    )
    assert result.status == "error"
    assert "network=True" in result.text, result.text


def test_the_transcript_records_the_policy(contained: Session) -> None:
    contained.execute("1")
    notebook = json.loads(contained.notebook_path.read_text())
    assert notebook["metadata"]["kernelexec"]["sandbox"] == Sandbox().to_dict()


def test_an_uncontained_session_says_so(tmp_path: Path) -> None:
    with Session(tmp_path / "work", sandbox=False, timeout=60) as session:
        assert session.sandbox is None
        assert session.execute("import os; print(os.getpid() > 2)").stdout.strip() == "True"


# -- 4. limits

BOMB = """
import os, time
def bomb():
    while True:
        try:
            if os.fork() == 0:
                bomb()
        except OSError:
            time.sleep(0.05)
if os.fork() == 0:
    bomb()
time.sleep(3)
print(sum(1 for p in os.listdir("/proc") if p.isdigit()))
"""


@pytest.mark.parametrize("kind", ["spawned", "forked"])
def test_a_fork_bomb_and_a_memory_hog_stay_in_their_session(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KERNELEXEC_ZYGOTE", "0" if kind == "spawned" else "1")
    limits = Sandbox(memory=256 << 20, processes=64)
    session, opened = _start(kind, tmp_path / "bombed", sandbox=limits)
    try:
        # Threads count too: the kernel's own take some of the 64.
        result = session.execute(BOMB)
        assert result.status == "ok", result.text
        assert int(result.stdout.strip()) <= 64
        with Session(tmp_path / "next", sandbox=True, timeout=60) as neighbour:
            assert neighbour.execute("print(6 * 7)").stdout.strip() == "42"
        session.restart()  # the bomb's processes end with the kernel
        result = session.execute("x = bytearray(1 << 30); x[::4096] = b'x' * len(x[::4096])")
        assert result.status == "kernel_died", result.text
        assert "out of memory" in result.text and "Sandbox.memory" in result.text, result.text
        # The kernel that replaces it is contained as the first was.
        found = attempt(session, 'found = sorted(p for p in os.listdir("/proc") if p.isdigit())')
        assert found == ["1", "2"], found
        assert session.sandbox == limits
    finally:
        for each in opened:
            each.close()


# -- a pool's kernels


async def test_a_pooled_contained_kernel_writes_only_its_sessions_work_dir(
    tmp_path: Path, host: Host
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    async with KernelPool(1, sandbox=True, work_root=root) as pool:
        await pool.wait_ready(120)
        async with AsyncSession(root / "a", pool=pool) as a:
            assert pool.ready == 0  # taken: the kernel was the pool's
            assert a.sandbox == Sandbox()
            found = await attempt_async(
                a,
                f"""
import socket
def unix(path):
    with socket.socket(socket.AF_UNIX) as sock:
        sock.connect(path)
found = {{"cwd": os.getcwd(), "mine": tried(lambda: open("mine.txt", "w").write("x"))}}
found["outside"] = tried(lambda: open({str(host.outside / "new")!r}, "w"))
found["unix"] = {{path: tried(unix, path) for path in {host.sockets!r}}}
""",
            )
        assert found["cwd"] == str(a.work_dir) and found["mine"][0] == "ok", found
        assert (a.work_dir / "mine.txt").read_text() == "x"
        assert denied(found["outside"]) and not (host.outside / "new").exists()
        for path, outcome in found["unix"].items():
            assert denied(outcome), (path, outcome)
        # A work dir outside the pool's work root would not be in the kernel's view.
        await pool.wait_ready(120)
        async with AsyncSession(tmp_path / "elsewhere", pool=pool) as b:
            assert pool.ready == 1 and (await b.execute("print(1)")).stdout == "1\n"


# -- kernelexec serve


def test_serve_contains_its_sessions_and_says_how(tmp_path: Path, host: Host) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "table.csv").write_text("a,b\n1,2\n")
    server = ServerProcess(tmp_path / "root", "--sandbox", "--sandbox-read", str(data))
    try:
        first, second = server.create(), server.create()
        state = server.state(first)
        assert state["sandbox"]["read"] == [str(data)] and state["sandbox"]["network"] is False
        response = server.http.post(f"/sessions/{first}/checkpoint", json={})
        assert response.status_code == 201, response.text
        store = server.work_root.resolve() / ".checkpoints"
        assert any(store.iterdir())
        found = server.execute(
            second,
            f"""
import json, os, socket
def tried(action, *args):
    try:
        action(*args)
    except OSError as exc:
        return type(exc).__name__
    return "ok"
print(json.dumps({{
    "data": tried(lambda: open({str(data / "table.csv")!r}).read()),
    "store": tried(os.listdir, {str(store)!r}),
    "work_root": tried(os.listdir, {str(server.work_root.resolve())!r}),
    "neighbour": tried(os.listdir, {str(server.work_root.resolve() / first)!r}),
    "server": tried(socket.create_connection, ("127.0.0.1", {server.port}), 5),
}}))
""",
        )
        # Hidden (the temp dir is) or refused, never read.
        assert json.loads(found["stdout"]) == {
            "data": "ok",
            "store": "FileNotFoundError",
            "work_root": "PermissionError",  # there, empty, to hold the work dir: not listed
            "neighbour": "FileNotFoundError",
            "server": "ConnectionRefusedError",
        }, found
        denied_read = server.execute(second, f"open({str(host.secret)!r}).read()")
        assert denied_read["status"] == "error"
        assert "--sandbox-read" in denied_read["message"], denied_read
        refused = server.http.post("/sessions", json={"sandbox": {"network": True}})
        assert refused.status_code == 403 and "--allow-network" in refused.text, refused.text
    finally:
        server.stop()


def test_serve_refuses_to_run_uncontained_where_it_cannot_contain(tmp_path: Path) -> None:
    # A machine without user namespaces, made for real: a namespace of our own
    # where none may be made below it.
    shell = (
        "echo 0 > /proc/sys/user/max_user_namespaces && "
        f"exec {sys.executable} -m kernelexec serve --port 0 --sandbox "
        f"--work-root {tmp_path / 'root'}"
    )
    done = subprocess.run(
        ["unshare", "--user", "--map-root-user", "sh", "-c", shell],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).parent.parent,
    )
    assert done.returncode == 2, done.stderr
    assert "cannot contain kernels" in done.stderr and "--no-sandbox" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


# -- what a session does, contained


async def test_a_venv_preload_variables_background_and_a_second_client_work_contained(
    tmp_path: Path,
) -> None:
    from jupyter_client.blocking import BlockingKernelClient

    env = tmp_path / "env"
    subprocess.run(
        [sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(env)],
        check=True,
        timeout=120,
    )
    async with AsyncSession(
        tmp_path / "work", sandbox=True, venv=env, preload="import json", timeout=60
    ) as session:
        result = await session.execute("import sys; print(sys.prefix, 'json' in dir())")
        assert result.stdout.strip() == f"{env} True", result.text
        await session.execute("table = {'a': 1}")
        assert "table" in [v.name for v in await session.variables()]
        running = await session.execute("print('in the background')", background=True)
        done = await running.wait(60)
        assert done is not None and done.stdout == "in the background\n"
        info = session.connection_info
        assert info is not None
        client = BlockingKernelClient()
        client.load_connection_info(info)
        client.start_channels()
        try:
            reply = client.execute_interactive("print(table['a'] + 41)", timeout=60)
        finally:
            client.stop_channels()
        assert reply["content"]["status"] == "ok"
        assert (await session.execute("print(sorted(table))")).stdout == "['a']\n"


def test_the_kernels_constants_are_the_hosts() -> None:
    # contain.py runs inside the kernel, loaded by path: it keeps its own copies.
    from kernelexec import _kernel
    from kernelexec._kernel import contain

    assert contain.MASKED == _kernel.MASKED
    assert contain.CANNOT_CONTAIN == _kernel.CANNOT_CONTAIN


def test_a_timeout_interrupts_a_contained_kernel_and_keeps_its_state(contained: Session) -> None:
    contained.execute("kept_through = 'the interrupt'")
    result = contained.execute("import time; time.sleep(60)", timeout=2)
    assert result.status == "timeout", result.text
    assert contained.execute("print(kept_through)").stdout.strip() == "the interrupt"


def test_a_contained_session_is_not_forked_as_a_process(tmp_path: Path) -> None:
    with Session(tmp_path / "parent", sandbox=True, timeout=60) as parent:
        with pytest.raises(ConfigurationError, match="method='auto' or 'checkpoint'"):
            parent.fork(tmp_path / "copy", method="process")


# -- the policy and its notes, without a kernel


def test_a_sandbox_is_checked_when_made_and_round_trips() -> None:
    policy = Sandbox(read=["data"], write=("/tmp/out",), network=True, memory=1 << 30)
    assert policy.read == (str(Path("data").absolute()),)
    assert Sandbox.from_dict(policy.to_dict()) == policy
    with pytest.raises(ValueError, match="a list of paths, not one path"):
        Sandbox(read="data")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"Sandbox\.memory"):
        Sandbox(memory=1024)
    with pytest.raises(ValueError, match=r"Sandbox\.network is True or False"):
        Sandbox(network="yes")  # type: ignore[arg-type]


def test_a_session_cannot_be_given_a_sandbox_and_a_backend(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="backend= or sandbox="):
        AsyncSession(tmp_path, backend=LocalBackend(), sandbox=True)
    with pytest.raises(ConfigurationError, match="sandbox=False for another kernelspec"):
        LocalBackend(kernel_name="bash", sandbox=True)


NOTES = [
    # (code, what the cell printed and raised, the option the note must name)
    (
        "%pip install rich",
        "WARNING: Retrying ... NewConnectionError(... [Errno 101] Network is unreachable')",
        "packages=[...]",
    ),
    (
        "import urllib.request; urllib.request.urlopen('https://example.org')",
        "URLError: <urlopen error [Errno -3] Temporary failure in name resolution>",
        "Sandbox(network=True)",
    ),
    (
        "requests.get('http://localhost:8765/health')",
        "ConnectionError: ... Failed to establish a new connection: [Errno 111] Connection refused",
        "network=True",
    ),
    (
        "open('/srv/data/x.csv')",
        "PermissionError: [Errno 13] Permission denied: '/srv/data/x.csv'",
        "Sandbox(read=[...])",
    ),
    ("!cat /etc/shadow", "cat: /etc/shadow: Permission denied", "Sandbox(read=[...])"),
    (
        "open('/home/me/data.csv')",
        "FileNotFoundError: [Errno 2] No such file or directory: '/home/me/data.csv'",
        "Sandbox(read=[...])",
    ),
    (
        "open('../up.txt', 'w')",
        "OSError: [Errno 30] Read-only file system: '../up.txt'",
        "Sandbox(write=[...])",
    ),
]


@pytest.mark.parametrize(("code", "text", "option"), NOTES)
def test_a_failure_from_the_containment_gets_a_note_naming_the_option(
    code: str, text: str, option: str, tmp_path: Path
) -> None:
    note = containment_note(Sandbox(), work_dir=tmp_path, code=code, text=text, raised=True)
    assert note is not None and option in note, note


def test_a_failure_of_its_own_gets_no_note(tmp_path: Path) -> None:
    def note(text: str, sandbox: Sandbox | None = None) -> str | None:
        policy = sandbox or Sandbox()
        return containment_note(policy, work_dir=tmp_path, code="", text=text, raised=True)

    # A file of the work dir, one not there in a folder the kernel sees, a data folder given.
    assert note(f"PermissionError: [Errno 13] Permission denied: '{tmp_path}/ro.txt'") is None
    assert note("FileNotFoundError: [Errno 2] No such file or directory: 'missing.csv'") is None
    assert note("FileNotFoundError: [Errno 2] No such file or directory: '/usr/x'") is None
    given = Sandbox(read=["/srv/data"])
    missing = "FileNotFoundError: [Errno 2] No such file or directory: '/srv/data/x.csv'"
    assert note(missing, given) is None
    # With a network, being offline is not the sandbox's doing.
    offline = "URLError: <urlopen error [Errno -3] Temporary failure in name resolution>"
    assert note(offline, Sandbox(network=True)) is None


def test_with_network_true_an_abstract_socket_of_the_host_is_still_out_of_reach(
    tmp_path: Path,
) -> None:
    name = f"\0kx-abstract-{uuid.uuid4().hex[:8]}"
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(name)
        listener.listen(1)
        with Session(tmp_path / "work", sandbox=Sandbox(network=True), timeout=60) as session:
            found = attempt(
                session,
                f"""
import socket
def connect(name):
    with socket.socket(socket.AF_UNIX) as sock:
        sock.connect(name)
found = tried(connect, {name!r})
""",
            )
    assert denied(found), found  # Landlock's scope (ABI 6): EPERM


def test_the_library_refuses_a_sandbox_it_cannot_give(tmp_path: Path) -> None:
    # As for serve: a namespace of our own, where no user namespace may be made.
    script = (
        "import kernelexec\n"
        "try:\n"
        "    kernelexec.Session(sandbox=True)\n"
        "except kernelexec.ConfigurationError as exc:\n"
        "    print(exc)\n"
        "print(kernelexec.Session(sandbox=False).execute('print(6 * 7)').stdout.strip())\n"
    )
    shell = f'echo 0 > /proc/sys/user/max_user_namespaces && exec {sys.executable} -c "$0"'
    done = subprocess.run(
        ["unshare", "--user", "--map-root-user", "sh", "-c", shell, script],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).parent.parent,
    )
    said = done.stdout.splitlines()
    assert done.returncode == 0, done.stderr
    assert "this machine cannot contain a kernel" in said[0] and "sandbox=False" in said[0]
    assert said[-1] == "42"


def test_a_pooled_server_hands_out_contained_kernels(tmp_path: Path, host: Host) -> None:
    preload = "import os as _os\n_born_in = _os.getcwd()"
    server = ServerProcess(tmp_path / "root", "--sandbox", "--pool-size", "1", "--preload", preload)
    try:
        probe = (
            "import json, os\n"
            f"try:\n    open({str(host.secret)!r}).read(); secret = 'read'\n"
            "except OSError as exc:\n    secret = type(exc).__name__\n"
            "print(json.dumps([_born_in != os.getcwd(), os.getcwd(), secret, os.getpid()]))"
        )
        deadline = time.monotonic() + 120
        while True:  # until a session is handed the pool's kernel, not a cold one
            session = server.create()
            pooled, cwd, secret, pid = json.loads(server.execute(session, probe)["stdout"])
            if pooled or time.monotonic() > deadline:
                break
            server.http.delete(f"/sessions/{session}")
            time.sleep(0.5)
        assert pooled, "no session was handed a pooled kernel"
        assert cwd == str(server.work_root.resolve() / session)
        assert secret in ("PermissionError", "FileNotFoundError") and pid == 2
        assert server.state(session)["sandbox"] is not None
        written = server.execute(session, "open('mine.txt', 'w').write('x')")
        assert written["status"] == "ok", written
        assert (server.work_root.resolve() / session / "mine.txt").read_text() == "x"
    finally:
        assert server.stop() == 0


def test_kernelexec_sandbox_1_makes_containment_the_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KERNELEXEC_SANDBOX", "1")
    with Session(tmp_path / "work", timeout=60) as session:
        assert session.sandbox == Sandbox()
        assert session.execute("import os; print(os.getpid())").stdout.strip() == "2"
    monkeypatch.setenv("KERNELEXEC_SANDBOX", "0")
    assert AsyncSession(tmp_path / "other").sandbox is None


async def test_a_contained_pools_default_work_dirs_keep_the_temp_dir_hidden(host: Host) -> None:
    async with KernelPool(1, sandbox=True) as pool:
        await pool.wait_ready(120)
        async with AsyncSession(pool=pool) as session:
            assert pool.ready == 0  # taken: the kernel was the pool's
            root = pool.sessions_root()
            assert root is not None and session.work_dir.parent == root
            found = await attempt_async(
                session,
                f"""
import socket
def unix(path):
    with socket.socket(socket.AF_UNIX) as sock:
        sock.connect(path)
found = {{path: tried(unix, path) for path in {host.sockets!r}}}
found["tmp"] = tried(os.listdir, "/tmp")
""",
            )
    assert denied(found.pop("tmp"))  # the temp dir is not listed
    for path, outcome in found.items():
        assert denied(outcome), (path, outcome)


def test_a_restart_keeping_state_brings_it_back_contained(tmp_path: Path) -> None:
    with Session(tmp_path / "work", sandbox=True, timeout=60) as session:
        session.execute("import numpy\nkept = numpy.arange(3)")
        report = session.restart(keep_state=True)
        assert report is not None and not report.skipped, report
        assert session.execute("print(kept.sum())").stdout.strip() == "3"
        found = attempt(session, 'found = sorted(p for p in os.listdir("/proc") if p.isdigit())')
        assert found == ["1", "2"], found
