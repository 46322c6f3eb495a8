"""A new kernel counts as ready only once nothing it sends can be missed (real kernels)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kernelexec import AsyncSession
from kernelexec._backends._zmq import KernelSockets


class Questions:
    """The kernel_info requests sent, and the requests whose idle status came back."""

    def __init__(self) -> None:
        self.asked: list[str] = []
        self.idle: set[str] = set()


@pytest.fixture
def questions(monkeypatch: pytest.MonkeyPatch) -> Questions:
    # Watches the real sockets (nothing is faked): what was sent, what was heard.
    seen = Questions()
    send, receive = KernelSockets.send, KernelSockets.receive

    def watched_send(self: KernelSockets, channel: str, msg_type: str, content: Any) -> str:
        msg_id = send(self, channel, msg_type, content)
        if msg_type == "kernel_info_request":
            seen.asked.append(msg_id)
        return msg_id

    async def watched_receive(self: KernelSockets, timeout: float) -> Any:
        item = await receive(self, timeout)
        if item is not None and item[1]["content"].get("execution_state") == "idle":
            seen.idle.add(item[1]["parent_header"].get("msg_id"))
        return item

    monkeypatch.setattr(KernelSockets, "send", watched_send)
    monkeypatch.setattr(KernelSockets, "receive", watched_receive)
    return seen


async def test_a_cold_start_hears_the_answer_to_its_first_question(
    tmp_path: Path, questions: Questions
) -> None:
    # Asked before our IOPub socket was connected, the kernel's answer (its
    # idle status) went out to nobody, and the start waited for the next
    # question, a second later: about half of all cold starts.
    for i in range(6):
        questions.asked.clear()
        questions.idle.clear()
        async with AsyncSession(tmp_path / f"w{i}"):
            pass
        assert questions.asked, "no kernel_info request was sent"
        assert questions.asked[0] in questions.idle, (i, len(questions.asked))


def test_a_session_starts_without_importing_what_only_replay_needs(tmp_path: Path) -> None:
    # nbformat imports jsonschema, whose format checkers build a grammar at
    # import (rfc3987-syntax, installed with jupyter_server): most of a second
    # that every program paid on `import kernelexec`, before its first session.
    code = (
        "import asyncio, sys, kernelexec\n"
        "async def main():\n"
        f"    async with kernelexec.AsyncSession({str(tmp_path)!r}) as s:\n"
        "        assert (await s.execute('1 + 1')).text == '2\\n'\n"
        "asyncio.run(main())\n"
        "print(sorted({'nbformat', 'jsonschema'} & set(sys.modules)))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
