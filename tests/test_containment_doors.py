"""Containment at each door: pools, ``kernelexec serve``, the policy, its notes, the default.

The attacks from inside a contained kernel are tests/test_containment.py; these
check that every way to ask for a contained kernel gets one (a pool's, a
server's, a pooled server's, ``KERNELEXEC_SANDBOX=1``), that what a session
does keeps working inside it, and, without a kernel, the policy's checks and
the notes naming the option that allows what the containment refused.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from _contained import CONTAINABLE, Host, attempt_async, denied, planted
from _mcpclient import stdio_mcp, texts
from _serverproc import ServerProcess

from kernelexec import AsyncSession, ConfigurationError, KernelPool, Sandbox, Session
from kernelexec._backends._local import LocalBackend
from kernelexec._containment._hints import containment_note

pytestmark = CONTAINABLE


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Host]:
    with planted(tmp_path_factory.mktemp("host")) as found:
        yield found


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
        # A work dir outside the pool's work root would not be in the kernel's
        # view: the session says so, and starts its own.
        await pool.wait_ready(120)
        with pytest.warns(UserWarning, match=r"below the pool's work root \("):
            b = AsyncSession(tmp_path / "elsewhere", pool=pool)
        async with b:
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


def without_user_namespaces(*arguments: str) -> subprocess.CompletedProcess[str]:
    """Runs this Python with ``arguments`` where no user namespace may be made.

    A machine that cannot contain a kernel, made for real: a user namespace of
    our own with ``max_user_namespaces`` 0 below it. Containment is left at its
    default (the environment says nothing of it).
    """
    shell = 'echo 0 > /proc/sys/user/max_user_namespaces && exec "$@" </dev/null'
    return subprocess.run(
        [
            "unshare",
            "--user",
            "--map-root-user",
            "sh",
            "-c",
            shell,
            "sh",
            sys.executable,
            *arguments,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).parent.parent,
        env={k: v for k, v in os.environ.items() if k != "KERNELEXEC_SANDBOX"},
    )


@pytest.mark.parametrize("door", ["serve --port 0", "mcp"])
def test_serve_refuses_to_run_uncontained_where_it_cannot_contain(
    tmp_path: Path, door: str
) -> None:
    # Containment is the default: no flag asks for it.
    done = without_user_namespaces(
        "-m", "kernelexec", *door.split(), "--work-root", str(tmp_path / "root")
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
    from kernelexec._kernel import contain, guard

    assert contain.MASKED == _kernel.MASKED
    assert contain.CANNOT_CONTAIN == _kernel.CANNOT_CONTAIN
    assert guard._PRIVATE_TMP == _kernel.PRIVATE_TMP


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


def test_the_library_refuses_a_sandbox_it_cannot_give(tmp_path: Path) -> None:
    script = (
        "import kernelexec\n"
        "try:\n"
        "    kernelexec.Session(sandbox=True)\n"
        "except kernelexec.ConfigurationError as exc:\n"
        "    print(exc)\n"
        "print(kernelexec.Session(sandbox=False).execute('print(6 * 7)').stdout.strip())\n"
    )
    done = without_user_namespaces("-c", script)
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


def test_containment_is_the_default_and_kernelexec_sandbox_0_turns_it_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KERNELEXEC_SANDBOX", raising=False)
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


async def test_mcp_contains_its_sessions_and_a_client_asks_within_the_operators(
    tmp_path: Path, host: Host
) -> None:
    async with stdio_mcp(tmp_path / "root", "--sandbox") as client:
        probe = "import os; print(os.getpid(), sum(p.isdigit() for p in os.listdir('/proc')))"
        answer = await client.call_tool("execute_code", {"code": probe})
        assert texts(answer).strip() == "2 2", texts(answer)
        secret = await client.call_tool(
            "execute_code", {"code": f"open({str(host.secret)!r}).read()"}
        )
        assert secret.is_error and "Sandbox(read=[...])" in texts(secret), texts(secret)
        networked = await client.call_tool(
            "create_session", {"session": "online", "sandbox": {"network": True}}
        )
        assert networked.is_error and "--allow-network" in texts(networked), texts(networked)
        lower = await client.call_tool(
            "create_session", {"session": "small", "sandbox": {"processes": 64}}
        )
        assert not lower.is_error, texts(lower)
        infos = json.loads(texts(await client.call_tool("list_sessions", {})))
        small = next(i for i in infos if i["id"] == "small")
        assert small["sandbox"]["processes"] == 64, small


def test_where_it_cannot_contain_the_default_says_so_once_and_runs_uncontained(
    tmp_path: Path,
) -> None:
    script = (
        "import logging, kernelexec\n"
        "logging.basicConfig(format='%(message)s')\n"
        "for _ in range(2):\n"
        "    with kernelexec.Session() as session:\n"
        "        print(session.sandbox, session.execute('print(6 * 7)').stdout.strip())\n"
    )
    done = without_user_namespaces("-c", script)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["None 42", "None 42"]
    said = [line for line in done.stderr.splitlines() if "uncontained" in line]
    assert len(said) == 1 and "cannot contain them" in said[0] and "root" in said[0], said
