"""Kernels forked from a zygote: each is its own kernel, and nothing of one reaches another.

The zygote itself (kernelexec/_kernel/zygote.py) imports once and forks; these
tests check what a forked kernel must not share with its siblings or its
zygote (random state, processes, descriptors), that it ends with its owner,
and that a zygote that dies (or is killed by a kernel's code) takes no
session's state with it.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _pids import kernel_pid
from _serverproc import ServerProcess
from conftest import SOON, process_gone, warm_zygote

from kernelexec import AsyncSession
from kernelexec._backends import _zygote
from kernelexec._backends._local import LocalBackend

PRELOAD = "import random, numpy, numpy.random, pandas"


@pytest.fixture(autouse=True)
def _zygote_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERNELEXEC_ZYGOTE", "1")


def backend(session: AsyncSession) -> LocalBackend:
    kernel = session._backend
    assert isinstance(kernel, LocalBackend)
    return kernel


async def forked(tmp_path: Path, name: str, **options: object) -> AsyncSession:
    session = AsyncSession(tmp_path / name, timeout=30, **options)  # type: ignore[arg-type]
    await session.start()
    assert backend(session).forked, "expected a kernel forked from the zygote"
    return session


async def value(session: AsyncSession, expression: str) -> object:
    result = await session.execute(f"import json, os; print(json.dumps({expression}))")
    assert result.status == "ok", result.text
    return json.loads(result.stdout)


async def identity(session: AsyncSession) -> list[int]:
    """The kernel's pid, parent, process group and session, as this machine numbers them."""
    pid = await kernel_pid(session)
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return [pid, int(fields[1]), int(fields[2]), int(fields[3])]


async def test_a_forked_kernel_runs_code_as_a_spawned_one_does(tmp_path: Path) -> None:
    await asyncio.to_thread(warm_zygote)
    async with await forked(tmp_path, "a") as session:
        await session.execute("x = 41")
        result = await session.execute("print(x + 1)\n1 / 0")
        assert result.stdout == "42\n"
        assert result.error is not None and result.error.ename == "ZeroDivisionError"
        assert (await value(session, "os.getcwd()")) == str(tmp_path / "a")
        assert (await value(session, "os.environ['PWD']")) == str(tmp_path / "a")


MODULE_LISTS = """\
import sys
quick = sys.modules['kernelexec_kernel_quick']
kernel, shell = get_ipython().kernel, get_ipython()
print(
    'modules' in quick.install(kernel.parent),
    kernel._kernel_modules is quick._known_modules is kernel.debugger.kernel_modules,
    shell._sys_modules_keys is quick._known_names,
    'ipykernel.kernelapp' in shell._sys_modules_keys,
    any(f.endswith('kernelapp.py') for f in kernel._kernel_modules),
    'wave' in shell._sys_modules_keys,
    any(f.endswith('wave.py') for f in kernel._kernel_modules),
)
"""


async def test_a_forked_kernel_keeps_the_zygotes_lists_of_modules(tmp_path: Path) -> None:
    # As a kernel starts, ipykernel lists every loaded module's file and IPython
    # keeps their names: in a fork those scans write the reference counts of
    # the zygote's modules and names, copying their pages. The zygote's own
    # lists are kept instead (the same objects, not copies).
    await asyncio.to_thread(warm_zygote)
    # Uncontained, so that its fork below is a process fork, not a restore.
    async with await forked(tmp_path, "a", sandbox=False) as session:
        result = await session.execute(MODULE_LISTS)
        assert result.stdout.split() == ["True"] * 5 + ["False"] * 2, result.text
        # This live kernel has loaded a module since: it makes the lists again
        # as it forks, where the pages are its own, and its fork takes them,
        # that module named, without a scan of its own.
        imported = await session.execute("import wave")
        assert imported.ok, imported.text
        async with await session.fork(tmp_path / "fork", method="process") as fork:
            again = await fork.execute(MODULE_LISTS)
            assert again.stdout.split() == ["True"] * 7, again.text


async def test_a_kernel_that_empties_the_zygotes_lists_harms_no_sibling(tmp_path: Path) -> None:
    # The lists are the zygote's objects, shared copy-on-write: a kernel's code
    # may empty its copy, and a sibling forked after still has them whole.
    await asyncio.to_thread(warm_zygote)
    empty = (
        "import sys\nquick = sys.modules['kernelexec_kernel_quick']\n"
        "quick._known_modules.clear(); quick._known_names.clear()\n"
        "print(len(get_ipython().kernel.debugger.kernel_modules))"
    )
    count = "print(len(get_ipython().kernel.debugger.kernel_modules) > 100)"
    async with await forked(tmp_path, "a", sandbox=False) as a:
        assert (await a.execute(empty)).stdout.strip() == "0"
        async with await forked(tmp_path, "b", sandbox=False) as b:
            assert (await b.execute(count)).stdout.strip() == "True"


async def test_siblings_never_share_a_random_sequence(tmp_path: Path) -> None:
    # numpy's global generator was seeded once, in the zygote, when numpy was
    # imported there; Python's random reseeds itself at fork.
    await asyncio.to_thread(warm_zygote, PRELOAD)
    draws = []
    for name in ("a", "b", "c"):
        async with await forked(tmp_path, name, preload=PRELOAD) as session:
            draws.append(
                await value(
                    session,
                    "[random.random(), float(numpy.random.rand()),"
                    " int(numpy.random.randint(1 << 30))]",
                )
            )
    for column in zip(*draws, strict=True):
        assert len(set(column)) == 3, draws


async def test_siblings_are_separate_processes_groups_and_sessions(tmp_path: Path) -> None:
    await asyncio.to_thread(warm_zygote)
    async with await forked(tmp_path, "a") as a, await forked(tmp_path, "b") as b:
        ids = [await identity(s) for s in (a, b)]
        supervisors = [backend(s)._process.pid for s in (a, b)]  # type: ignore[union-attr]
    for (_, parent, group, sid), supervisor in zip(ids, supervisors, strict=True):
        # The kernel is its supervisor's child, in the supervisor's own group
        # and session (setsid), as a spawned kernel is.
        assert parent == supervisor and group == supervisor and sid == supervisor
    assert ids[0] != ids[1]
    assert len({i[0] for i in ids} | set(supervisors)) == 4


FDS = """
import os, json
found = {}
for fd in os.listdir('/proc/self/fd'):
    try:
        found[fd] = os.readlink(f'/proc/self/fd/{fd}')
    except OSError:
        pass
print(json.dumps(found))
"""


async def test_siblings_share_no_descriptors(tmp_path: Path) -> None:
    # A socket, pipe or file a sibling also held would let one kernel read or
    # move the other's data (a shared file offset, a shared connection).
    await asyncio.to_thread(warm_zygote)
    async with await forked(tmp_path, "a") as a, await forked(tmp_path, "b") as b:
        tables = []
        for session in (a, b):
            result = await session.execute(FDS)
            assert result.status == "ok", result.text
            tables.append(json.loads(result.stdout))
    # Sockets and pipes are named by inode: the same name is the same object.
    # (anon_inode names, "[eventpoll]" say, are the same for every process; so
    # is a contained kernel's own /proc/2/clear_refs, pid 2 of its namespace.)
    shared = [
        target
        for target in set(tables[0].values()) & set(tables[1].values())
        if target.startswith(("socket:", "pipe:"))
        or (target.startswith("/") and target not in (os.devnull, "/proc/2/clear_refs"))
    ]
    assert shared == [], shared
    # Nor does a kernel hold the zygote's handle on the owner process.
    for table in tables:
        assert "anon_inode:[pidfd]" not in table.values(), table


# A contained kernel cannot see its zygote at all (test_containment.py).
@pytest.mark.uncontained
async def test_a_kernel_that_kills_its_zygote_harms_no_sibling(tmp_path: Path) -> None:
    # The kernel's code finds the zygote (its supervisor's parent) and kills
    # it: sessions already forked keep their state, a new session still
    # starts, and a new zygote serves the ones after.
    await asyncio.to_thread(warm_zygote)
    async with await forked(tmp_path, "a") as attacker, await forked(tmp_path, "b") as sibling:
        await sibling.execute("kept = 'still here'")
        result = await attacker.execute(
            "import os, signal\n"
            "supervisor = os.getppid()\n"
            "zygote = int(open(f'/proc/{supervisor}/stat').read().rsplit(')', 1)[1].split()[1])\n"
            "os.kill(zygote, signal.SIGKILL)\n"
            "print(zygote)"
        )
        assert result.status == "ok", result.text
        zygote = int(result.stdout)
        deadline = time.monotonic() + SOON
        while not process_gone(zygote) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert process_gone(zygote)
        assert (await value(sibling, "kept")) == "still here"
        assert (await value(attacker, "1 + 1")) == 2
        async with AsyncSession(tmp_path / "c", timeout=30) as after:
            assert (await value(after, "2 + 2")) == 4
    await asyncio.to_thread(warm_zygote, again=True)
    async with await forked(tmp_path, "d") as later:
        assert (await value(later, "3 + 3")) == 6


async def test_a_forked_kernels_death_is_reported_with_its_exit_status(tmp_path: Path) -> None:
    await asyncio.to_thread(warm_zygote)
    async with await forked(tmp_path, "a") as session:
        result = await session.execute("import os; os._exit(3)")
        assert result.status == "kernel_died"
        assert "exit status 3" in result.text, result.text
        assert (await value(session, "'back'")) == "back"  # restarted


async def test_an_interrupt_reaches_a_forked_kernel_and_keeps_its_state(tmp_path: Path) -> None:
    await asyncio.to_thread(warm_zygote)
    session = AsyncSession(tmp_path / "a", timeout=1.0)
    async with session:
        assert backend(session).forked
        await session.execute("x = 'kept'")
        slept = await session.execute("import time; time.sleep(30)")
        assert slept.status == "timeout" and not slept.restarted
        assert (await value(session, "x")) == "kept"


async def test_zygote_off_spawns_every_kernel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    await asyncio.to_thread(warm_zygote)
    monkeypatch.setenv("KERNELEXEC_ZYGOTE", "0")
    async with AsyncSession(tmp_path / "a") as session:
        assert not backend(session).forked
    monkeypatch.setenv("KERNELEXEC_ZYGOTE", "1")
    for wanted, expected in ((False, False), (True, True)):
        kernel = LocalBackend(zygote=wanted)
        async with AsyncSession(tmp_path / f"b{wanted}", backend=kernel):
            assert kernel.forked is expected


def test_preload_imports_are_what_a_zygote_runs() -> None:
    preload = (
        "import numpy as np, pandas\n"
        "from matplotlib import pyplot as plt\n"
        "from . import nothing\n"
        "if True:\n    import json\n"
        "df = pandas.DataFrame()\n"
    )
    assert _zygote.preload_imports(preload) == [
        "import numpy as np, pandas",
        "from matplotlib import pyplot as plt",
    ]
    assert _zygote.preload_imports("%matplotlib inline\nimport numpy") == []
    assert _zygote.preload_imports(None) == []


OWNER = """
import json, os, signal, sys, time
from kernelexec import Session
sessions = []
deadline = time.monotonic() + 90
while time.monotonic() < deadline:
    session = Session(sys.argv[1] + f"/{len(sessions)}", timeout=60)
    sessions.append(session)
    session.execute("1")
    if session._async._backend.forked:
        break
    time.sleep(0.2)
kernel = sessions[-1]
code = "import subprocess; subprocess.Popen(['setsid', 'sleep', '600']); import os; os.getpid()"
assert kernel.execute(code).status == "ok"
from kernelexec._backends import _zygote
zygotes = [z._process.pid for z in _zygote._ZYGOTES.values()]
backend = kernel._async._backend
print(json.dumps({"forked": backend.forked,
                  "supervisor": backend._process.pid, "zygotes": zygotes}), flush=True)
sys.stdin.readline()
if sys.argv[2] == "sigkill":
    os.kill(os.getpid(), signal.SIGKILL)
sys.exit(0)  # interpreter exit, no session closed
"""


@pytest.mark.parametrize("how", ["sigkill", "exit"])
def test_the_owners_end_ends_forked_kernels_and_their_zygote(tmp_path: Path, how: str) -> None:
    from kernelexec._kernel.guard import descendants

    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER, str(tmp_path), how],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "KERNELEXEC_ZYGOTE": "1"},
    )
    assert owner.stdin is not None and owner.stdout is not None
    seen = json.loads(owner.stdout.readline())
    assert seen["forked"] and seen["zygotes"]
    # Everything the owner started, the setsid'd sleep below the forked kernel included.
    tree = descendants(owner.pid)
    assert seen["supervisor"] in tree and set(seen["zygotes"]) <= set(tree)
    assert len(tree) >= 5
    owner.stdin.write("go\n")
    owner.stdin.flush()
    assert owner.wait(60) == (-signal.SIGKILL if how == "sigkill" else 0)
    deadline = time.monotonic() + 2 * SOON
    while time.monotonic() < deadline and not all(process_gone(pid) for pid in tree):
        time.sleep(0.1)
    assert [pid for pid in tree if not process_gone(pid)] == []


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def _starter(server: ServerProcess, session_id: str) -> int:
    # A spawned kernel's supervisor is the server's child; a forked one's, the zygote's.
    return _parent(_parent(server.kernel_pid(session_id)))


@pytest.mark.parametrize("flag", [[], ["--no-zygote"]], ids=["default", "no-zygote"])
def test_serve_forks_kernels_unless_told_not_to(tmp_path: Path, flag: list[str]) -> None:
    server = ServerProcess(tmp_path / "work", "--max-sessions", "40", *flag)
    try:
        starters = []
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and len(starters) < 30:
            session_id = server.create()
            starters.append(_starter(server, session_id))
            server.http.delete(f"/sessions/{session_id}")
            if flag or starters[-1] != server.proc.pid:
                if len(starters) >= 3:
                    break
            time.sleep(0.2)
        if flag:
            assert set(starters) == {server.proc.pid}, starters
        else:
            assert starters[0] == server.proc.pid  # the first, cold, while the zygote starts
            assert starters[-1] != server.proc.pid, starters
    finally:
        assert server.stop() == 0


MANY_FDS = """
import os, resource, sys, time
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]  # past select()'s 1,024
from kernelexec import Session
deadline = time.monotonic() + 90
while time.monotonic() < deadline:
    with Session(sys.argv[1] + "/warm") as warm:
        warm.execute("1")
        if warm._async._backend.forked:
            break
with Session(sys.argv[1] + "/a") as session:
    session.execute("x = 41")
    with session.fork(sys.argv[1] + "/b") as fork:
        print(session._async._backend.forked, fork.execute("print(x + 1)").stdout.strip())
"""


def test_an_owner_holding_many_descriptors_still_forks_kernels(tmp_path: Path) -> None:
    # A server with a hundred sessions holds over 1,024 descriptors, past what
    # select() takes: the zygote, the forked kernels and their clean-up do not use it.
    done = subprocess.run(
        [sys.executable, "-c", MANY_FDS, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "KERNELEXEC_ZYGOTE": "1"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["True", "42"], done.stdout
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
