"""Concurrent tool calls that make sessions: one session per name, within --max-sessions.

Real ``kernelexec mcp`` processes (local, and ``--server`` in front of a real
``kernelexec serve``) spoken to over stdio by the official SDK's client; the
kernels are counted in /proc, below the process that runs them.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from _mcpclient import stdio_mcp, texts
from _pids import host_pid
from _serverproc import ServerProcess, kernels_below
from mcp import ClientSession, MCPError
from test_mcp_remote import call, remote_mcp


def mcp_pid(work_root: Path) -> int:
    """The ``kernelexec mcp`` process serving ``work_root``, found in /proc."""
    wanted = f"\0mcp\0--work-root\0{work_root}\0".encode()
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and wanted in (entry / "cmdline").read_bytes():
                return int(entry.name)
        except OSError:
            continue
    raise AssertionError(f"no kernelexec mcp process for {work_root}")


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


async def kernel_pids(client: ClientSession, names: list[str]) -> set[int]:
    """Each named session's kernel and its supervisor (the process above it)."""
    pids = set()
    for name in names:
        code = "import os; print(os.getpid(), os.getcwd())"
        seen, work_dir = texts(await call(client, "execute_code", code=code, session=name)).split()
        pid = host_pid(int(seen), Path(work_dir))
        pids |= {pid, parent_of(pid)}
    return pids


async def settled(value: Callable[[], object], expected: object, within: float = 30.0) -> bool:
    """Whether ``value()`` comes to ``expected`` within ``within`` seconds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if value() == expected:
            return True
        await asyncio.sleep(0.2)
    return False


async def forks(client: ClientSession, times: int, **arguments: object) -> list[tuple[bool, str]]:
    answers = await asyncio.gather(
        *(call(client, "fork_session", session="a", **arguments) for _ in range(times))
    )
    return [(not a.is_error, texts(a)) for a in answers]


@pytest.mark.timeout(300)
async def test_concurrent_local_forks_stay_within_max_sessions_each_with_its_own_name(
    tmp_path: Path,
) -> None:
    work = tmp_path / "two"
    async with stdio_mcp(work, "--max-sessions", "2") as client:
        await call(client, "execute_code", code="x = 'parent'", session="a")
        # A fork whose call goes away (the client's timeout cancels it) while it
        # waits for the parent's execution: made anyway, then closed, not left.
        started = await call(
            client, "execute_code", code="import time; time.sleep(3)", session="a", background=True
        )
        assert not started.is_error, texts(started)
        with pytest.raises(MCPError, match="timed out"):
            await client.call_tool(
                "fork_session", {"session": "a", "new_name": "gone"}, read_timeout_seconds=0.5
            )
        # Its transcript is written last, just before it is handed over (here: closed).
        assert await settled(lambda: (work / "gone" / "transcript.ipynb").exists(), True)
        assert await settled(lambda: len(kernels_below(mcp_pid(work))), 2), (
            "the fork was left running"
        )
        listed = json.loads(texts(await call(client, "list_sessions")))
        assert {s["id"] for s in listed} == {"a"}

        answers = await forks(client, 12)
        made = [json.loads(text) for ok, text in answers if ok]
        refused = [text for ok, text in answers if not ok]
        assert len(made) == 1, answers  # "a" and one fork: the two allowed
        assert all("--max-sessions" in text for text in refused), refused
        listed = json.loads(texts(await call(client, "list_sessions")))
        assert {s["id"] for s in listed} == {"a", "a-fork-1"} == {"a", made[0]["name"]}
        seen = await call(client, "execute_code", code="x", session="a-fork-1")
        assert texts(seen) == "'parent'\n"
        # Every kernel below the MCP server is a listed session's.
        pids = await kernel_pids(client, ["a", "a-fork-1"])
        assert kernels_below(mcp_pid(work)) == pids

    work = tmp_path / "four"
    async with stdio_mcp(work, "--max-sessions", "4") as client:
        await call(client, "execute_code", code="x = 'parent'", session="a")
        answers = await forks(client, 12)
        made = [json.loads(text) for ok, text in answers if ok]
        assert sorted(m["name"] for m in made) == ["a-fork-1", "a-fork-2", "a-fork-3"]
        assert len({m["work_dir"] for m in made}) == 3
        assert sum("--max-sessions" in text for ok, text in answers if not ok) == 9
        names = ["a", *(m["name"] for m in made)]
        assert kernels_below(mcp_pid(work)) == await kernel_pids(client, names)


@pytest.mark.timeout(300)
async def test_concurrent_local_makes_of_one_name_make_one_session(tmp_path: Path) -> None:
    work = tmp_path / "work"
    async with stdio_mcp(work, "--max-sessions", "8") as client:
        await call(client, "execute_code", code="x = 1", session="a")
        answers = await forks(client, 6, new_name="b")
        assert [ok for ok, _ in answers].count(True) == 1, answers
        assert all("exists" in text for ok, text in answers if not ok)
        made = await asyncio.gather(
            *(call(client, "create_session", session="c") for _ in range(4)),
            *(call(client, "execute_code", code=f"c{i} = {i}", session="c") for i in range(3)),
        )
        creates, codes = made[:4], made[4:]
        assert [a.is_error for a in creates].count(False) == 1, [texts(a) for a in creates]
        assert all("exists" in texts(a) for a in creates if a.is_error)
        # The first uses waited for the session being made, and ran in it.
        assert not any(a.is_error for a in codes), [texts(a) for a in codes]
        seen = await call(client, "execute_code", code="print(c0 + c1 + c2)", session="c")
        assert texts(seen) == "3\n"
        listed = json.loads(texts(await call(client, "list_sessions")))
        assert {s["id"] for s in listed} == {"a", "b", "c"}
        assert kernels_below(mcp_pid(work)) == await kernel_pids(client, ["a", "b", "c"])


@pytest.mark.timeout(300)
async def test_concurrent_first_uses_of_a_name_over_a_server_make_one_session(
    tmp_path: Path,
) -> None:
    server = ServerProcess(tmp_path / "work", "--max-sessions", "4")
    try:
        async with remote_mcp(server, tmp_path / "mcp.log") as client:
            answers = await asyncio.gather(
                *(call(client, "execute_code", code=f"v{i} = {i}", session="work") for i in (1, 2))
            )
            assert not any(a.is_error for a in answers), [texts(a) for a in answers]
            assert not (await call(client, "execute_code", code="v3 = 3", session="work")).is_error
        # The MCP server has gone: one session is left, holding all three calls' effects.
        sessions = server.http.get("/sessions").json()["sessions"]
        assert len(sessions) == 1, sessions
        assert server.execute(sessions[0]["id"], "print(v1 + v2 + v3)")["stdout"] == "6\n"
        assert len(kernels_below(server.proc.pid)) == 2  # its kernel and supervisor
    finally:
        assert server.stop() == 0


@pytest.mark.timeout(300)
async def test_concurrent_forks_over_a_server_take_one_name_each(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "work", "--max-sessions", "4")
    try:
        async with remote_mcp(server, tmp_path / "mcp.log") as client:
            await call(client, "execute_code", code="x = 'parent'", session="a")
            # A fork whose call goes away while it waits for the parent: the server
            # makes it all the same, and the MCP server deletes it.
            sleep = "import time; time.sleep(3)"
            await call(client, "execute_code", code=sleep, session="a", background=True)
            with pytest.raises(MCPError, match="timed out"):
                await client.call_tool(
                    "fork_session", {"session": "a", "new_name": "gone"}, read_timeout_seconds=0.5
                )
            # Forks of one parent are made in turn: this one after that one.
            after = await call(client, "fork_session", session="a", new_name="after")
            assert not after.is_error, texts(after)
            sessions = server.http.get
            assert await settled(lambda: len(sessions("/sessions").json()["sessions"]), 2)
            assert (await call(client, "list_variables", session="gone")).is_error

            named = await forks(client, 12, new_name="f")
            assert [ok for ok, _ in named].count(True) == 1, named
            assert all("exists" in text for ok, text in named if not ok), named
            unnamed = await forks(client, 12)
            made = [json.loads(text) for ok, text in unnamed if ok]
            assert len(made) == 1, unnamed  # the server's --max-sessions: a, after, f, this
            assert all("--max-sessions" in text for ok, text in unnamed if not ok), unnamed
            listed = {s["id"] for s in sessions("/sessions").json()["sessions"]}
            ids = [json.loads(text)["id"] for ok, text in named if ok] + [made[0]["id"]]
            assert len(listed) == 4 and set(ids) < listed
            names = ["a", "after", "f", made[0]["id"]]
            assert kernels_below(server.proc.pid) == await kernel_pids(client, names)
    finally:
        assert server.stop() == 0
