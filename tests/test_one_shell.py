"""A kernel reads its shell socket in its main thread: no subshells, one thread fewer.

ipykernel 7 reads the shell socket in a thread of its own, to hand requests
to subshells; kernelexec's kernels have none unless ``KERNELEXEC_SUBSHELLS=1``
is in their environment (``kernelexec/_kernel/quick.py``). Each test runs on
both kinds of kernel: what must not differ is checked on both, and what does
differ is checked to differ. This file runs again on the oldest ipykernel we
support (tests/test_oldest_ipykernel.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from jupyter_client.asynchronous.client import AsyncKernelClient

from kernelexec import AsyncSession

KINDS = {"one shell": {}, "subshells": {"KERNELEXEC_SUBSHELLS": "1"}}
THREADS = "import threading\nprint(sorted(t.name for t in threading.enumerate()))"


@pytest.fixture(params=sorted(KINDS))
async def kind(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[tuple[str, Any]]:
    name = request.param
    async with AsyncSession(tmp_path / "work", env=KINDS[name], timeout=60) as session:
        yield name, session


async def _client(session: AsyncSession) -> AsyncKernelClient:
    info = session.connection_info
    assert info is not None
    client = AsyncKernelClient()
    client.load_connection_info(info)
    client.start_channels()
    return client


async def _reply(client: AsyncKernelClient, channel: str, msg_id: str) -> dict[str, Any]:
    get = client.get_control_msg if channel == "control" else client.get_shell_msg
    while True:
        reply = await asyncio.wait_for(get(), 30)
        if reply["parent_header"].get("msg_id") == msg_id:
            return reply


async def _control(client: AsyncKernelClient, msg_type: str) -> dict[str, Any]:
    message = client.session.msg(msg_type, {})
    client.control_channel.send(message)
    return await _reply(client, "control", message["header"]["msg_id"])


async def test_the_kernel_has_a_shell_channel_thread_only_when_asked(kind: Any) -> None:
    name, session = kind
    threads = await session.execute(THREADS)
    assert threads.ok and "'IOPub'" in threads.stdout, threads.text
    assert ("'Shell channel'" in threads.stdout) == (name == "subshells"), threads.stdout
    magic = await session.execute("%subshell")
    said_none = "Kernel does not support subshells" in magic.stdout
    assert said_none == (name == "one shell"), magic.text
    client = await _client(session)
    try:
        message = client.session.msg("kernel_info_request", {})
        client.shell_channel.send(message)
        info = await _reply(client, "shell", message["header"]["msg_id"])
        features = info["content"].get("supported_features", [])
        assert ("kernel subshells" in features) == (name == "subshells"), features
        listed = await _control(client, "list_subshell_request")
        assert listed["content"] == {"status": "ok", "subshell_id": []}, listed["content"]
        made = await _control(client, "create_subshell_request")
    finally:
        client.stop_channels()
    if name == "subshells":
        assert made["content"]["status"] == "ok" and made["content"]["subshell_id"], made
    else:
        # An answer, not silence: ipykernel sends none where it has no subshells.
        assert made["content"]["status"] == "error", made["content"]
        assert "KERNELEXEC_SUBSHELLS=1" in made["content"]["evalue"], made["content"]


async def test_an_async_cell_runs_and_an_interrupt_stops_a_cell(kind: Any) -> None:
    # ipykernel 7.4 asks its shell channel thread for the shell's thread before
    # each async cell (to handle an interrupt there), with no check that it has one.
    _, session = kind
    done = await session.execute("import asyncio\nawait asyncio.sleep(0.01)\nprint('awaited')")
    assert done.ok and done.stdout == "awaited\n", done.text
    running = await session.execute(
        "import time\nprint('waiting', flush=True)\ntime.sleep(120)", background=True
    )
    first = await running.read(0, timeout=60)
    assert first and first[0].output is not None, first
    await session.interrupt()
    stopped = await running.wait(60)
    assert stopped is not None and stopped.error is not None, stopped
    assert stopped.error.ename == "KeyboardInterrupt", stopped.error
    assert (await session.execute("print(40 + 2)")).stdout == "42\n"


async def test_requests_queued_behind_an_error_are_aborted_and_the_next_runs(kind: Any) -> None:
    _, session = kind
    client = await _client(session)
    try:
        ids = [
            client.execute("import time; time.sleep(0.3); raise ValueError('first')"),
            client.execute("print('second')"),
            client.execute("print('third')"),
        ]
        statuses = [(await _reply(client, "shell", i))["content"]["status"] for i in ids]
        after = client.execute("print('after')")
        last = await _reply(client, "shell", after)
    finally:
        client.stop_channels()
    assert statuses == ["error", "aborted", "aborted"], statuses
    assert last["content"]["status"] == "ok", last["content"]


ECHO_TARGET = """
def _echo(comm, opened):
    @comm.on_msg
    def _(msg):
        comm.send({"echo": msg["content"]["data"]})
get_ipython().kernel.comm_manager.register_target("echo", _echo)
"""


async def test_comms_reach_the_kernel_and_answer(kind: Any) -> None:
    # What widgets run on: JupyterLab sends comms to the one shell where the
    # kernel lists no subshells.
    _, session = kind
    registered = await session.execute(ECHO_TARGET)
    assert registered.ok, registered.text
    client = await _client(session)
    try:
        opened = client.session.msg(
            "comm_open", {"comm_id": "c1", "target_name": "echo", "data": {}}
        )
        client.shell_channel.send(opened)
        sent = client.session.msg("comm_msg", {"comm_id": "c1", "data": {"x": 1}})
        client.shell_channel.send(sent)
        while True:
            message = await asyncio.wait_for(client.get_iopub_msg(), 30)
            if message["msg_type"] == "comm_msg":
                break
    finally:
        client.stop_channels()
    assert message["content"]["data"] == {"echo": {"x": 1}}, message["content"]
    assert (await session.execute("print(40 + 2)")).stdout == "42\n"
