"""Driving one execution: deadlines, interrupts, stdin, and a kernel that dies.

Every wait here is bounded: ``receive`` returns at least every ``POLL_SECONDS``
so the deadline and the kernel's life are checked even when the kernel is
silent, and the interrupt after a timeout gets a grace period, no more.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ._backends import KernelBackend
from ._live import LiveOutput, OutputListener
from ._reducer import ExecutionReducer, live_output

__all__ = ["Outcome", "run_code"]

POLL_SECONDS = 0.2
# After the reply, IOPub silent this long means the idle status was lost (a
# kernel we did not launch may drop messages): finish rather than wait forever.
QUIET_AFTER_REPLY = 2.0
# The input_reply value that ipykernel (6.29 and 7.x: Kernel._input_request)
# turns into EOFError in input() and getpass(), as `jupyter console` sends on Ctrl-D.
END_OF_INPUT = "\x04"

Ending = Literal["done", "died", "deadline"]


@dataclass
class Outcome:
    """How an execution ended, before its result is assembled."""

    reducer: ExecutionReducer
    ending: Literal["done", "died", "timeout", "cancelled"]
    needs_restart: bool = False
    notes: list[str] = field(default_factory=list)


async def run_code(
    backend: KernelBackend,
    source: str,
    *,
    reducer_factory: Any,
    timeout: float,
    grace: float,
    stdin: Sequence[str] | None,
    on_output: OutputListener | None = None,
) -> Outcome:
    """Runs ``source`` and folds its messages until the kernel is done with it.

    On timeout or cancellation the kernel is interrupted; if it is not idle
    within ``grace`` seconds the outcome asks for a restart. Cancellation is
    reported as the "cancelled" ending: the caller records it, then re-raises.
    """
    msg_id = await backend.execute(source, allow_stdin=stdin is not None)
    run = _Run(backend, reducer_factory(msg_id), deque(stdin or ()), on_output)
    try:
        ending = await run.collect(time.monotonic() + timeout)
    except asyncio.CancelledError:
        await asyncio.shield(run.stop(grace))
        return Outcome(run.reducer, "cancelled", run.unstoppable, run.notes)
    if ending == "deadline":
        await run.stop(grace)
        return Outcome(run.reducer, "timeout", run.unstoppable, run.notes)
    return Outcome(run.reducer, ending, False, run.notes)


class _Run:
    def __init__(
        self,
        backend: KernelBackend,
        reducer: ExecutionReducer,
        answers: deque[str],
        on_output: OutputListener | None,
    ) -> None:
        self.backend = backend
        self.on_output = on_output
        self.reducer = reducer
        self.answers = answers
        self.notes: list[str] = []
        self.unstoppable = False
        self.ended_input = False  # a surplus input request was answered with end of file

    async def collect(self, deadline: float) -> Ending:
        heard = time.monotonic()
        while not self.reducer.done:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return "deadline"
            item = await self.backend.receive(min(remaining, POLL_SECONDS))
            if item is None:
                if not await self.backend.is_alive():
                    return "died"
                if self.reducer.replied and time.monotonic() - heard > QUIET_AFTER_REPLY:
                    self.notes.append(
                        "The kernel's final status message never came; some output may be missing."
                    )
                    return "done"
                continue
            heard = time.monotonic()
            channel, msg = item
            if channel == "stdin":
                await self._answer(msg)
            elif self.reducer.feed(msg) and self.on_output is not None:
                self._show(msg)
        return "done"

    async def stop(self, grace: float) -> None:
        """Interrupts the kernel and drains this execution's last messages."""
        self.answers.clear()
        await self.backend.interrupt()
        if await self.collect(time.monotonic() + grace) != "done":
            self.unstoppable = True

    def _show(self, msg: dict[str, Any]) -> None:
        output = live_output(msg)
        if output is None or self.on_output is None:
            return
        try:
            self.on_output(LiveOutput(output))
        except Exception:
            # A broken listener costs the live view, never the execution.
            self.on_output = None

    async def _answer(self, msg: dict[str, Any]) -> None:
        if msg.get("header", {}).get("msg_type") != "input_request":
            return
        if (msg.get("parent_header") or {}).get("msg_id") != self.reducer.msg_id:
            return
        content = msg.get("content") or {}
        prompt = str(content.get("prompt", ""))
        if not self.answers:
            # Answered, not interrupted: an interrupt can be lost (in a cell
            # with a top-level await, ipykernel's SIGINT handler only schedules
            # a cancellation on its event loop, which cannot run while input()
            # blocks), and the code then waited out its whole timeout. This
            # reply makes input() raise EOFError, as a closed pipe would.
            if not self.ended_input:
                self.ended_input = True
                self.notes.append(
                    "The code asked for more input than was given, so input() "
                    "got end of file (EOFError)."
                )
            if prompt:  # shown unanswered, so what the code printed next starts a line
                self.reducer.add_stream("stdout", f"{prompt}\n")
            await self.backend.send_input(END_OF_INPUT)
            return
        value = self.answers.popleft()
        shown = "" if content.get("password") else value
        self.reducer.add_stream("stdout", f"{prompt}{shown}\n")
        await self.backend.send_input(value)
