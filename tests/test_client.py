"""kernelexec.Client and AsyncClient against a real server process."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest
from _serverproc import ServerProcess, free_port

import kernelexec
from kernelexec import (
    AsyncClient,
    AuthenticationError,
    Client,
    ExecutionResult,
    FileInfo,
    ServerError,
    SessionInfo,
    SessionNotFoundError,
)

PLOT = "import matplotlib.pyplot as plt\nplt.plot([0, 1]); plt.show()"
LOOP = "import time\nprint('looping', flush=True)\nwhile True:\n    time.sleep(0.05)"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = ServerProcess(tmp_path_factory.mktemp("client") / "work", "--max-sessions", "6")
    yield proc
    assert proc.stop() == 0


@pytest.fixture
def client(server: ServerProcess) -> Iterator[Client]:
    with Client(server.url, token=server.token) as c:
        yield c


def test_remote_session_feels_like_a_local_one(client: Client, server: ServerProcess) -> None:
    assert client.health()["status"] == "ok"
    with client.session(timeout=60, env={"WHO": "remote"}) as session:
        assert isinstance(session.last_info, SessionInfo) and session.last_info.state == "idle"
        assert session.execute("import os\nx = 41").ok
        result = session.execute("print(x + 1, os.environ['WHO'])")
        assert isinstance(result, ExecutionResult)
        assert result.stdout == "42 remote\n" and result.text == "42 remote\n"
        failed = session.execute("1/0")
        assert failed.status == "error" and failed.error is not None
        assert failed.error.ename == "ZeroDivisionError"
        assert session.execute("echo hi", language="bash").stdout == "hi\n"
        assert "ada" in session.execute("print(input())", stdin=["ada"]).stdout

        plot = session.execute(PLOT)
        [image] = [f for f in plot.files if f.endswith(".png")]
        files = session.files()
        assert all(isinstance(f, FileInfo) for f in files)
        assert image in [f.path for f in files]
        assert session.download(image) == (server.work_root / session.id / image).read_bytes()

        info = session.upload("data/in.csv", "a,b\n1,2\n")
        assert info.path == "data/in.csv" and info.size == 8
        assert session.execute("print(open('data/in.csv').read().split()[1])").stdout == "1,2\n"
        assert session.download("data/in.csv") == b"a,b\n1,2\n"
        assert session.upload("raw.bin", bytes(range(256))).size == 256

        notebook = session.notebook()
        nbformat.validate(nbformat.from_dict(notebook))
        assert any("x = 41" in c["source"] for c in notebook["cells"])

        session.restart()
        assert session.execute("x").error.ename == "NameError"  # type: ignore[union-attr]
        assert session.id in [s.id for s in client.sessions()]
        assert client.attach(session.id).info().executions >= 8
        sid = session.id
    # Leaving the block deleted the session; its files stay on the server.
    assert sid not in [s.id for s in client.sessions()]
    assert (server.work_root / sid / "raw.bin").exists()


def test_on_output_streams_outputs_in_order(client: Client) -> None:
    seen: list[dict[str, Any]] = []
    with client.session() as session:
        result = session.execute(
            "import time\nfor i in range(3):\n    print(i); time.sleep(0.3)", on_output=seen.append
        )
        assert result.stdout == "0\n1\n2\n"
        assert "".join(o["text"] for o in seen) == "0\n1\n2\n"
        assert "2" not in seen[0]["text"]
        rich: list[dict[str, Any]] = []
        session.execute(PLOT, on_output=rich.append)
        assert [o["output_type"] for o in rich] == ["display_data"]
        assert "image/png" in rich[0]["data"]


def test_interrupt_from_another_thread(client: Client) -> None:
    with client.session(timeout=120) as session:
        session.execute("kept = 1")
        started = threading.Event()

        def interrupt_once_running() -> None:
            if started.wait(60):
                session.interrupt()

        timer = threading.Thread(target=interrupt_once_running)
        timer.start()
        result = session.execute(LOOP, on_output=lambda output: started.set())
        timer.join()
        assert result.error is not None and result.error.ename == "KeyboardInterrupt"
        assert session.execute("print(kept)").stdout == "1\n"


def test_errors_are_kernelexec_errors_naming_the_fix(client: Client, server: ServerProcess) -> None:
    with Client(server.url, token="wrong-token-123456") as wrong:
        with pytest.raises(AuthenticationError, match="token"):
            wrong.sessions()
    with pytest.raises(SessionNotFoundError, match="GET /sessions"):
        client.attach("0" * 32)
    with pytest.raises(ServerError) as odd:
        client.attach("../../etc")
    assert odd.value.status == 404
    session = client.session()
    with pytest.raises(ServerError, match=r"'\.\.' segment") as refused:
        session.download("../secret")
    assert refused.value.status == 400 and refused.value.code == "invalid_path"
    with pytest.raises(ServerError, match=r"'\.\.' segment"):
        session.upload("a/../../x.txt", b"x")
    with pytest.raises(ServerError, match="timeout must be"):
        session.execute("1", timeout=-1)
    session.close()
    with pytest.raises(SessionNotFoundError):
        session.execute("1")
    with Client(f"http://127.0.0.1:{free_port()}", token="x" * 10) as nobody:
        with pytest.raises(ServerError, match="kernelexec serve") as unreachable:
            nobody.health()
    assert unreachable.value.code == "unreachable"
    assert issubclass(ServerError, kernelexec.KernelexecError)


async def test_async_client(server: ServerProcess) -> None:
    async with AsyncClient(server.url, token=server.token) as client:
        assert (await client.health())["status"] == "ok"
        async with await client.session(timeout=120) as session:
            assert (await session.execute("y = 2")).ok
            seen: list[dict[str, Any]] = []
            streamed = await session.execute(
                "for i in range(3): print(i * y)", on_output=seen.append
            )
            assert (
                streamed.stdout == "0\n2\n4\n" and "".join(o["text"] for o in seen) == "0\n2\n4\n"
            )

            # Interrupt from a second task while a loop runs.
            started = asyncio.Event()
            running = asyncio.create_task(
                session.execute(LOOP, on_output=lambda output: started.set())
            )
            await asyncio.wait_for(started.wait(), 60)
            assert (await session.info()).state == "busy"
            await session.interrupt()
            interrupted = await running
            assert interrupted.error is not None and interrupted.error.ename == "KeyboardInterrupt"
            assert (await session.execute("print(y)")).stdout == "2\n"

            await session.upload("in.txt", b"bytes")
            assert await session.download("in.txt") == b"bytes"
            assert "in.txt" in [f.path for f in await session.files()]
            nbformat.validate(nbformat.from_dict(await session.notebook()))
            await session.restart()
            assert (await session.execute("y")).status == "error"
            assert session.id in [s.id for s in await client.sessions()]
            attached = await client.attach(session.id)
            assert (await attached.info()).id == session.id
            sid = session.id
        assert sid not in [s.id for s in await client.sessions()]
        with pytest.raises(SessionNotFoundError):
            await client.attach(sid)
    async with AsyncClient(server.url, token="nope-nope-nope") as wrong:
        with pytest.raises(AuthenticationError):
            await wrong.sessions()


async def test_async_session_and_attach_work_with_async_with(server: ServerProcess) -> None:
    # As the sync `with client.session()` reads: a TypeError before (a coroutine).
    async with AsyncClient(server.url, token=server.token) as client:
        async with client.session(timeout=60) as session:
            assert (await session.execute("x = 6 * 7")).ok
            sid = session.id
        assert sid not in [s.id for s in await client.sessions()]  # deleted on exit

        kept = await client.session()  # awaiting gives the session itself
        assert isinstance(kept, kernelexec.AsyncRemoteSession)
        await kept.execute("x = 6 * 7")
        async with client.attach(kept.id) as again:  # deleted on exit, like `with`
            assert (await again.execute("print(x)")).stdout == "42\n"
        assert kept.id not in [s.id for s in await client.sessions()]

        with pytest.raises(RuntimeError, match="in the block"):
            async with client.session() as doomed:
                doomed_id = doomed.id
                raise RuntimeError("in the block")
        assert doomed_id not in [s.id for s in await client.sessions()]

        with pytest.raises(ServerError):
            async with client.session(kernel_name="no-such-kernel"):
                pass


def test_purge_removes_files(client: Client, server: ServerProcess) -> None:
    session = client.session()
    session.upload("f.txt", b"x")
    session.close(purge=True)
    assert not Path(server.work_root / session.id).exists()
