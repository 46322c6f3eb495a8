"""A contained kernel's code attacks its host: files, network, processes; nothing gives.

Each attack runs inside a kernel contained with ``sandbox=True``, started each
way a kernel comes to be: spawned, forked from a zygote, a ``session.fork()``
copy and a session restored from a checkpoint. The host plants what the
kernel must not reach (a secret in ``$HOME``, another session's work dir, a
checkpoint store, a port listening on 127.0.0.1 standing in for ``serve``, Unix
sockets in the home and the temp dir) and the kernel reports, as JSON, what
each attempt raised (tests/_contained.py). The kernel never tries an address
other than 127.0.0.1. The doors (pools, serve, the policy and its notes) are
tests/test_containment_doors.py.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from _contained import (
    CONTAINABLE,
    KINDS,
    Host,
    attempt,
    backend,
    denied,
    planted,
    start_as,
)

from kernelexec import ConfigurationError, Sandbox, Session
from kernelexec._backends import _zygote
from kernelexec._kernel.guard import FD_TABLE_SLOTS, descendants

pytestmark = CONTAINABLE


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Host]:
    with planted(tmp_path_factory.mktemp("host")) as found:
        yield found


@pytest.fixture(scope="module", params=KINDS)
def contained(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Session]:
    kind = str(request.param)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("KERNELEXEC_ZYGOTE", "0" if kind == "spawned" else "1")
        session, opened = start_as(kind, tmp_path_factory.mktemp(kind) / "work")
        try:
            yield session
        finally:
            for each in opened:
                each.close()


# -- 1. files


def test_the_policy_is_the_sessions_and_code_runs(contained: Session) -> None:
    assert contained.sandbox == Sandbox()
    assert contained.execute("1 + 1").text.strip() == "2"
    # Its table of descriptors was grown at boot as an uncontained kernel's is
    # (tests/test_fork.py), after its last fork, with Landlock's rules in force.
    status = "open('/proc/self/status').read()"
    size = contained.execute(f"print({status}.split('FDSize:')[1].split()[0])")
    assert int(size.stdout) >= FD_TABLE_SLOTS, size.text


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
        supervisor = backend(neighbour)._process
        assert supervisor is not None
        others = [os.getpid(), *zygotes, supervisor.pid, *descendants(supervisor.pid)]
        own = backend(contained)._process
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


def test_readying_the_cgroup_lock_moves_no_thread_of_the_owner(tmp_path: Path) -> None:
    # For each contained start with limits, the owner readies Linux's cgroup lock
    # by moving one thread of its own into the cgroup that thread is in
    # (_containment/_cgroups.py). A thread of the owner's that sits in other
    # cgroups stays there: moving the whole process would have gathered it.
    from kernelexec._containment import _cgroups

    name = f"kernelexec-test-aside-{uuid.uuid4().hex[:8]}"
    asides = []
    for controller in ("memory", "pids"):
        own = _cgroups._own(controller)
        assert own is not None, f"no cgroup v1 {controller} hierarchy of ours (root expected)"
        asides.append(own / name)
        asides[-1].mkdir()
    seated, release = threading.Event(), threading.Event()
    found: dict[str, str] = {}

    def sit() -> None:
        for aside in asides:
            (aside / "tasks").write_text(str(threading.get_native_id()))
        seated.set()
        release.wait(120)
        found["cgroup"] = Path("/proc/thread-self/cgroup").read_text()

    sitter = threading.Thread(target=sit)
    sitter.start()
    try:
        assert seated.wait(10)
        limits = Sandbox(memory=256 << 20, processes=64)
        with Session(tmp_path / "work", sandbox=limits, timeout=60) as session:
            assert session.execute("print(6 * 7)").stdout == "42\n"
    finally:
        release.set()
        sitter.join(10)
        for aside in asides:
            for _ in range(100):  # the thread leaves its cgroups as it ends
                try:
                    aside.rmdir()
                    break
                except OSError:
                    time.sleep(0.02)
    lines = [line for line in found["cgroup"].splitlines() if f"/{name}" in line]
    assert len(lines) == 2, found


@pytest.mark.parametrize("kind", KINDS)
def test_a_fork_bomb_and_a_memory_hog_stay_in_their_session(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KERNELEXEC_ZYGOTE", "0" if kind == "spawned" else "1")
    limits = Sandbox(memory=256 << 20, processes=64)
    ours = Path("/proc/self/cgroup").read_text()
    session, opened = start_as(kind, tmp_path / "bombed", sandbox=limits)
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
        # This process readied Linux's cgroup lock for each start by moving
        # itself into its own cgroups (_containment/_cgroups.py): it is still there.
        assert Path("/proc/self/cgroup").read_text() == ours
    finally:
        for each in opened:
            each.close()


def test_a_timeout_interrupts_a_contained_kernel_and_keeps_its_state(contained: Session) -> None:
    contained.execute("kept_through = 'the interrupt'")
    result = contained.execute("import time; time.sleep(60)", timeout=2)
    assert result.status == "timeout", result.text
    assert contained.execute("print(kept_through)").stdout.strip() == "the interrupt"


def test_a_contained_session_is_not_forked_as_a_process(tmp_path: Path) -> None:
    with Session(tmp_path / "parent", sandbox=True, timeout=60) as parent:
        with pytest.raises(ConfigurationError, match="method='auto' or 'checkpoint'"):
            parent.fork(tmp_path / "copy", method="process")


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


def test_a_restart_keeping_state_brings_it_back_contained(tmp_path: Path) -> None:
    with Session(tmp_path / "work", sandbox=True, timeout=60) as session:
        session.execute("import numpy\nkept = numpy.arange(3)")
        report = session.restart(keep_state=True)
        assert report is not None and not report.skipped, report
        assert session.execute("print(kept.sum())").stdout.strip() == "3"
        found = attempt(session, 'found = sorted(p for p in os.listdir("/proc") if p.isdigit())')
        assert found == ["1", "2"], found


def test_a_user_who_is_not_root_contains_as_root_does() -> None:
    """As uid 65534: the probe makes every namespace, mount, Landlock and seccomp step.

    Run with Debian's Python (this one may live in root's home, which that
    user cannot enter) on a copy of the kernel's scripts in a folder it can read.
    """
    from kernelexec._kernel import BOOT_DIR

    python = "/usr/bin/python3"
    assert os.path.exists(python), "Debian's python3 is needed: apt-get install python3"
    folder = Path(tempfile.mkdtemp(prefix="kernelexec-nonroot-"))
    try:
        folder.chmod(0o755)
        for script in BOOT_DIR.glob("*.py"):
            shutil.copy(script, folder / script.name)
        root = os.geteuid() == 0
        done = subprocess.run(
            [python, str(folder / "contain.py"), "probe"],
            capture_output=True,
            text=True,
            timeout=120,
            cwd="/",
            env={"PATH": "/usr/bin:/bin", "HOME": str(folder)},
            user=65534 if root else None,
            group=65534 if root else None,
            extra_groups=[] if root else None,
        )
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found["ok"] and found["missing"] == [] and found["landlock_abi"] >= 3, found


# The kernel swaps its own temp dir for a link to a folder of the host's, then its
# owner dies: the supervisor's clean-up (guard._forget_connection) removes the link,
# never what it points at.
SWAPPER = """
import os, signal, sys
from kernelexec import Session
session = Session(sys.argv[1], sandbox=True, timeout=60)
code = (
    "import os, shutil\\n"
    "tmp = os.environ['TMPDIR']\\n"
    "shutil.rmtree(tmp)\\n"
    f"os.symlink({sys.argv[2]!r}, tmp)\\n"
    "print(os.path.islink(tmp), tmp)"
)
print(session.execute(code).stdout.strip(), flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_temp_dir_swapped_for_a_link_takes_nothing_of_the_host_with_it(tmp_path: Path) -> None:
    target = tmp_path / "host-folder"
    target.mkdir()
    (target / "keep.txt").write_text("the host's")
    owner = subprocess.run(
        [sys.executable, "-c", SWAPPER, str(tmp_path / "work"), str(target)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    linked, tmp = owner.stdout.split()
    assert linked == "True", owner.stderr
    own = Path(tmp).parent  # the kernel's dir of sockets, which the supervisor removes
    deadline = time.monotonic() + 30
    while own.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not own.exists(), sorted(p.name for p in own.iterdir())
    assert (target / "keep.txt").read_text() == "the host's"
