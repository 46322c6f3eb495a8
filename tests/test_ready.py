"""A new kernel counts as ready only once nothing it sends can be missed (real kernels)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from kernelexec import AsyncSession
from kernelexec._backends._ready import SETTLE
from kernelexec._backends._zmq import KernelSockets


class Questions:
    """The kernel_info requests sent, the requests whose idle status came back, and
    whether each question after the first was asked once the kernel had both
    answered on shell and said it took our subscription (``iopub_welcome``)."""

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        self.asked: list[str] = []
        self.idle: set[str] = set()
        self.welcomed = self.replied = False
        self.prompted: list[bool] = []  # per question after the first
        self.both_at: float | None = None  # when both were first seen
        self.waited: list[float] = []  # per question after the first: seconds since then


@pytest.fixture
def questions(monkeypatch: pytest.MonkeyPatch) -> Questions:
    # Watches the real sockets (nothing is faked): what was sent, what was heard.
    seen = Questions()
    send, receive = KernelSockets.send, KernelSockets.receive

    def watched_send(self: KernelSockets, channel: str, msg_type: str, content: Any) -> str:
        msg_id = send(self, channel, msg_type, content)
        if msg_type == "kernel_info_request":
            if seen.asked:
                seen.prompted.append(seen.welcomed and seen.replied)
                if seen.both_at is not None:
                    seen.waited.append(time.monotonic() - seen.both_at)
            seen.asked.append(msg_id)
        return msg_id

    async def watched_receive(self: KernelSockets, timeout: float) -> Any:
        item = await receive(self, timeout)
        if item is not None:
            channel, msg = item
            if msg["content"].get("execution_state") == "idle":
                seen.idle.add(msg["parent_header"].get("msg_id"))
            seen.welcomed |= msg["header"].get("msg_type") == "iopub_welcome"
            seen.replied |= channel == "shell" and msg["header"].get("msg_type") == (
                "kernel_info_reply"
            )
            if seen.welcomed and seen.replied and seen.both_at is None:
                seen.both_at = time.monotonic()
        return item

    monkeypatch.setattr(KernelSockets, "send", watched_send)
    monkeypatch.setattr(KernelSockets, "receive", watched_receive)
    return seen


async def test_a_cold_start_hears_the_answer_to_its_first_question(
    tmp_path: Path, questions: Questions
) -> None:
    # Asked before our IOPub socket was connected, the kernel's answer (its
    # idle status) went out to nobody, and the start waited for the next
    # question, a second later: about half of all cold starts. Connected, the
    # subscription can still reach a kernel on a busy machine after it answered:
    # then the kernel's welcome prompts the next question at once, not a timer.
    for i in range(6):
        questions.clear()
        async with AsyncSession(tmp_path / f"w{i}"):
            pass
        assert questions.asked, "no kernel_info request was sent"
        if questions.asked[0] not in questions.idle:
            assert questions.prompted and questions.prompted[0], (i, len(questions.asked))


async def test_a_start_asks_again_only_when_the_first_status_is_late(
    tmp_path: Path, questions: Questions
) -> None:
    # The reply and the kernel's welcome are often read before the status of
    # the same question, queued just behind the welcome on IOPub: asked again
    # at once, the kernel answered a second kernel_info before the first
    # execution, in most starts. Now it is asked again only if the status has
    # not come within SETTLE of both.
    once = 0
    for i in range(8):
        questions.clear()
        async with AsyncSession(tmp_path / f"w{i}"):
            pass
        assert questions.asked, "no kernel_info request was sent"
        assert all(waited >= SETTLE for waited in questions.waited), questions.waited
        once += len(questions.asked) == 1
    assert once, "every start asked kernel_info more than once"


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
