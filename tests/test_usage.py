"""ExecutionResult.usage: CPU time and peak memory, measured in the kernel per execution."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _serverproc import ServerProcess
from conftest import warm_zygote

from kernelexec import AsyncSession, Client, ExecutionResult, Usage
from kernelexec._execution._messages import usage_from

MB = 1_000_000
ALLOCATE = (
    "block = bytearray(200 * 1024 * 1024)\n"
    "block[::4096] = b'x' * len(range(0, len(block), 4096))  # every page resident\n"
    "del block\n"
)


def _usage(result: ExecutionResult) -> Usage:
    assert result.ok, result.text
    assert result.usage is not None, result
    return result.usage


async def test_peak_memory_is_per_execution(session: AsyncSession) -> None:
    big = _usage(await session.execute(ALLOCATE))
    small = _usage(await session.execute("x = 1"))
    assert big.peak_rss_bytes is not None and big.peak_rss_bytes >= 200 * MB
    # Reset at the start of each execution: the freed block is not counted again.
    assert small.peak_rss_bytes is not None and small.peak_rss_bytes < 200 * MB


NOBODY = (
    "import os\n"
    "os.setresgid(65534, 65534, 65534)\n"
    "os.setresuid(65534, 65534, 65534)  # as a user's kernel runs: not root\n"
)


# The kernel drops to another uid itself, which a contained kernel cannot.
@pytest.mark.uncontained
@pytest.mark.parametrize("start", ["forked", "spawned"], indirect=False)
async def test_peak_memory_of_a_kernel_that_is_not_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, start: str
) -> None:
    """A non-root kernel may not reset its peak (it is non-dumpable): still per execution."""
    monkeypatch.setenv("KERNELEXEC_ZYGOTE", "1" if start == "forked" else "0")
    if start == "forked":
        warm_zygote()
    async with AsyncSession(tmp_path / "work", timeout=60) as session:
        assert (await session.execute(NOBODY + "print(os.getuid())")).stdout == "65534\n"
        reset = await session.execute("open('/proc/self/clear_refs', 'w')")
        assert reset.error is not None and reset.error.ename == "PermissionError"
        bigger = _usage(await session.execute(ALLOCATE.replace("200 *", "300 *")))
        small = _usage(await session.execute("x = 1"))
        # Below the kernel's lifetime peak (300 MB): only a per-execution measure sees it.
        big = _usage(await session.execute(ALLOCATE))
        again = _usage(await session.execute("x = 2"))
    assert bigger.peak_rss_bytes is not None and bigger.peak_rss_bytes >= 300 * MB
    assert small.peak_rss_bytes is not None and small.peak_rss_bytes < 200 * MB
    assert big.peak_rss_bytes is not None and 200 * MB <= big.peak_rss_bytes < 300 * MB
    assert again.peak_rss_bytes is not None and again.peak_rss_bytes < 200 * MB


# A process fork: a contained parent is checkpointed instead.
@pytest.mark.uncontained
async def test_a_fork_measures_itself_not_its_parent(tmp_path: Path) -> None:
    """A fork's peak is its own: its /proc files are not the parent's it inherited."""
    async with AsyncSession(tmp_path / "parent", timeout=60) as parent:
        _usage(await parent.execute("x = 1"))
        async with await parent.fork(tmp_path / "fork") as fork:
            big = _usage(await fork.execute(ALLOCATE))
            small = _usage(await fork.execute("y = 1"))
            pids = await fork.execute("import os; print(os.getpid())")
        parents = await parent.execute("import os; print(os.getpid())")
        after = _usage(await parent.execute("z = 1"))
    assert pids.stdout != parents.stdout
    assert big.peak_rss_bytes is not None and big.peak_rss_bytes >= 200 * MB
    assert small.peak_rss_bytes is not None and small.peak_rss_bytes < 200 * MB
    assert after.peak_rss_bytes is not None and after.peak_rss_bytes < 200 * MB


async def test_cpu_time_of_the_kernel(session: AsyncSession) -> None:
    usage = _usage(
        await session.execute(
            "import time\nend = time.process_time() + 1.0\n"
            "while time.process_time() < end: sum(range(100_000))\n"
        )
    )
    assert usage.user_seconds + usage.system_seconds >= 0.8
    assert usage.user_seconds >= 0.8
    assert usage.wall_seconds >= 0.8
    assert usage.children_user_seconds < 0.5  # the kernel's own time, not a child's
    idle = _usage(await session.execute("x = 1"))
    assert idle.user_seconds < 0.5  # reset per execution


async def test_a_child_process_is_counted(session: AsyncSession) -> None:
    usage = _usage(
        await session.execute(
            "import subprocess, sys\n"
            "subprocess.run([sys.executable, '-c', 'import time\\nend = time.process_time() + 1"
            "\\nwhile time.process_time() < end: sum(range(100_000))'], check=True)\n"
        )
    )
    assert usage.children_user_seconds >= 0.8
    assert usage.user_seconds >= usage.children_user_seconds
    assert usage.children_max_rss_bytes > 0


async def test_usage_in_to_dict_and_the_transcript(session: AsyncSession) -> None:
    result = await session.execute("x = 41")
    data = result.to_dict()
    assert set(data["usage"]) == {
        "wall_seconds",
        "user_seconds",
        "system_seconds",
        "peak_rss_bytes",
        "children_user_seconds",
        "children_system_seconds",
        "children_max_rss_bytes",
    }
    json.dumps(data)
    assert ExecutionResult.from_dict(data) == result
    await session.flush()
    notebook = json.loads(Path(session.notebook_path).read_text())
    cells = [c for c in notebook["cells"] if c["cell_type"] == "code"]
    assert cells[-1]["metadata"]["kernelexec"]["usage"] == data["usage"]


def test_a_kernels_report_is_checked() -> None:
    # The code being measured runs in the kernel and can rewrite what it reports.
    good = {
        "wall_seconds": 1.5,
        "user_seconds": 1,
        "system_seconds": 0.1,
        "peak_rss_bytes": None,
        "children_user_seconds": 0.0,
        "children_system_seconds": 0.0,
        "children_max_rss_bytes": 0,
    }
    assert usage_from(good) == Usage(1.5, 1.0, 0.1, None, 0.0, 0.0, 0)
    for name, bad in [
        ("wall_seconds", float("nan")),
        ("user_seconds", float("inf")),
        ("system_seconds", -1.0),
        ("user_seconds", True),
        ("user_seconds", "1"),
        ("peak_rss_bytes", 1.5),
        ("peak_rss_bytes", -1),
        ("children_max_rss_bytes", None),
        ("children_max_rss_bytes", 1 << 80),
    ]:
        assert usage_from({**good, name: bad}) is None, (name, bad)
    assert usage_from({k: v for k, v in good.items() if k != "wall_seconds"}) is None
    assert usage_from(["not", "a", "dict"]) is None
    assert usage_from(None) is None


def test_usage_comes_back_over_http_and_sse(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "work")
    try:
        session_id = server.create()
        burn = (
            "import time\nend = time.process_time() + 0.3\n"
            "while time.process_time() < end: sum(range(1000))"
        )
        usage = server.execute(session_id, burn)["usage"]
        assert usage["user_seconds"] + usage["system_seconds"] >= 0.2, usage
        assert usage["wall_seconds"] > 0
        with Client(server.url, token=server.token) as client:
            remote = client.session(timeout=60)
            try:
                result = remote.execute("x = 1", on_output=lambda _: None)  # over SSE
                assert result.usage is not None and result.usage.wall_seconds >= 0
            finally:
                remote.close()
    finally:
        assert server.stop() == 0
