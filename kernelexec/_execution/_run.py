"""Driving one execution: deadlines, interrupts, stdin, and a kernel that dies.

Every wait here is bounded: ``receive`` returns at least every ``POLL_SECONDS``
so the deadline and the kernel's life are checked even when the kernel is
silent, and the interrupt after a timeout gets a grace period, no more.

A message over the host's cap never arrives: the backend drops it unread and
says so with a "dropped" notice, and a ZMQ backend's socket is made again,
which may lose what the kernel sent meanwhile: the idle status, or the reply.
So after a drop a kernel_info request follows (the probe). The kernel answers
shell requests in order, so the probe's reply says that this execution's reply
has come or never will, and any IOPub message about the probe that its idle
status has come or never will; the execution ends then, not at its timeout.

The idle status can also come with no reply before it: ipykernel goes idle
without replying when its handler fails before the code's reply is sent
(it logs "KeyboardInterrupt caught in kernel": an interrupt that landed
between the request's start and the code's, or code that broke the kernel's
own handler). The same probe, sent then, says whether the reply is only
behind the status (it then comes first) or will never come, and is sent
once a poll passes with the status and no reply (one execution in six reads
the status first, the reply a moment later); the execution ends either way,
not at its timeout with the kernel restarted and its state lost.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from .._backends import DROPPED, KernelBackend
from ._live import LiveOutput, OutputListener
from ._messages import live_output
from ._reducer import ExecutionReducer

__all__ = ["InputAnswerer", "Interrupts", "Outcome", "run_code"]

POLL_SECONDS = 0.2
# After the reply, IOPub silent this long means the idle status was lost (a
# kernel we did not launch may drop messages): finish rather than wait forever.
QUIET_AFTER_REPLY = 2.0
# The input_reply value that ipykernel (6.29 and 7.x: Kernel._input_request)
# turns into EOFError in input() and getpass(), as `jupyter console` sends on Ctrl-D.
END_OF_INPUT = "\x04"

Ending = Literal["done", "died", "deadline"]

InputAnswerer = Callable[[str], Awaitable["str | None"]]
"""Answers the kernel's input requests as they come: given the prompt, the reply,
or None for end of file. Its wait counts against the execution's timeout."""


@dataclass
class Interrupts:
    """One execution's interrupts: one asked for before the kernel began the code waits for it.

    A kernel ignores SIGINT until it has taken the request up (ipykernel sets
    its handler then, just before it says ``execute_input``): an interrupt
    that arrives before, just after the code was sent or while its kernel was
    starting, was lost, and the code then ran in full. Asked for then, it is
    sent as the code begins, and not before (a timeout's or a cancellation's
    interrupt, ``stop``, goes at once, to whatever the kernel runs).
    """

    begun: bool = False  # the kernel began the code (its execute_input, or else output, came)
    pending: bool = False  # an interrupt waits for the code to begin
    sent_at_start: bool = False  # and was sent as it began


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
    stdin: Sequence[str] | InputAnswerer | None,
    on_output: OutputListener | None = None,
    interrupts: Interrupts | None = None,
) -> Outcome:
    """Runs ``source`` and folds its messages until the kernel is done with it.

    On timeout or cancellation the kernel is interrupted; if it is not idle
    within ``grace`` seconds the outcome asks for a restart. Cancellation is
    reported as the "cancelled" ending: the caller records it, then re-raises.

    Args:
        stdin: the answers to ``input()``, in order, or an ``InputAnswerer``.
        interrupts: the execution's, shared with whoever may interrupt it.
    """
    sent = time.monotonic()
    msg_id = await backend.execute(source, allow_stdin=stdin is not None)
    answerer = stdin if callable(stdin) else None
    answers = deque(() if callable(stdin) else stdin or ())
    run = _Run(backend, reducer_factory(msg_id), answers, on_output, sent, answerer, interrupts)
    try:
        ending = await run.collect(time.monotonic() + timeout)
    except asyncio.CancelledError:
        await asyncio.shield(run.stop(grace))
        return Outcome(run.reducer, "cancelled", run.unstoppable, run.notes)
    if ending == "deadline":
        await run.stop(grace)
        return Outcome(run.reducer, "timeout", run.unstoppable, run.notes)
    if ending == "died":
        run.reducer.kernel_died()
    return Outcome(run.reducer, ending, False, run.notes)


class _Run:
    def __init__(
        self,
        backend: KernelBackend,
        reducer: ExecutionReducer,
        answers: deque[str],
        on_output: OutputListener | None,
        sent: float,
        answerer: InputAnswerer | None = None,
        interrupts: Interrupts | None = None,
    ) -> None:
        self.backend = backend
        self.answerer = answerer
        self.sent = sent  # when the request went: a drop seen before is not this execution's
        self.on_output = on_output
        self.reducer = reducer
        self.answers = answers
        self.notes: list[str] = []
        self.unstoppable = False
        self.ended_input = False  # a surplus input request was answered with end of file
        self.probe: str | None = None  # the kernel_info request sent after a drop
        self.probe_replied = False  # so this execution's reply has come or is lost
        self.probe_heard = False  # on IOPub: so has its idle status
        self.idle_at: float | None = None  # when the idle status was seen with no reply yet
        self.interrupts = interrupts or Interrupts()

    async def collect(self, deadline: float) -> Ending:
        heard = time.monotonic()
        while not self._over():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return "deadline"
            await self._probe_if_unanswered()
            item = await self.backend.receive(min(remaining, POLL_SECONDS))
            if item is None:
                if not await self.backend.is_alive():
                    return "died"
                quiet = time.monotonic() - heard > QUIET_AFTER_REPLY
                if quiet and self.reducer.replied:
                    self.notes.append(
                        "The kernel's final status message never came; some output may be missing."
                    )
                    return "done"
                if quiet and self.reducer.idle and self.probe is not None:
                    self._reply_lost()  # and the probe's reply was lost too
                    return "done"
                continue
            heard = time.monotonic()
            channel, msg = item
            if channel == DROPPED:
                await self._dropped(msg["content"])
            elif self._about_probe(channel, msg):
                pass
            elif channel == "stdin":
                if not await self._answer(msg, deadline):
                    return "deadline"
            elif self.reducer.feed(msg) and self.on_output is not None:
                self._show(msg)
            if self.reducer.began and not self.interrupts.begun:
                await self._begun()
        if not self.reducer.replied:
            self._reply_lost()
        return "done"

    async def _probe_if_unanswered(self) -> None:
        # Idle, and no reply a poll later: one that is only behind the status
        # (another socket) comes within microseconds, one in six executions.
        reducer = self.reducer
        if not reducer.idle or reducer.replied or self.probe is not None:
            return
        now = time.monotonic()
        if self.idle_at is None:
            self.idle_at = now
        elif now - self.idle_at >= POLL_SECONDS:
            self.probe = await self.backend.request_kernel_info()

    async def _begun(self) -> None:
        interrupts = self.interrupts
        interrupts.begun = True
        if not interrupts.pending:
            return
        interrupts.pending = False
        if self.reducer.replied:
            return  # it said nothing of the code before its reply: the code is done
        interrupts.sent_at_start = True
        await self.backend.interrupt()

    def _reply_lost(self) -> None:
        # An interrupt sent as the code began can land before IPython runs the
        # cell, where ipykernel catches it and sends no reply.
        self.reducer.reply_lost(interrupted=self.interrupts.sent_at_start)

    def _over(self) -> bool:
        # The reply and the idle status came, or the probe says they never will.
        reducer = self.reducer
        return (reducer.replied or self.probe_replied) and (reducer.idle or self.probe_heard)

    async def _dropped(self, notice: dict[str, Any]) -> None:
        if notice["at"] < self.sent:
            return  # between executions (a thread's output, a person's cell): nothing of ours
        channel = notice.get("channel")
        if channel == "iopub" and not self.reducer.heard:
            # IOPub keeps its order, and this execution's output follows its busy
            # status: a drop before anything of ours was another request's (a
            # JupyterLab cell's), seen late because the socket was being made again.
            return
        self.reducer.dropped(
            channel, cap=notice["cap"], size=notice.get("bytes"), count=notice["count"]
        )
        if channel == "stdin":
            # Likely an input request (a huge prompt): unanswered, the code
            # would wait for its answer until the timeout. A kernel drops a
            # stale answer before its next request.
            await self.backend.send_input(END_OF_INPUT)
        if self.probe is None:
            self.probe = await self.backend.request_kernel_info()

    def _about_probe(self, channel: str, msg: dict[str, Any]) -> bool:
        if self.probe is None or (msg.get("parent_header") or {}).get("msg_id") != self.probe:
            return False
        if channel == "shell":
            self.probe_replied = True
        elif channel == "iopub":
            self.probe_heard = True
        return True

    async def stop(self, grace: float) -> None:
        """Interrupts the kernel and drains this execution's last messages."""
        self.answers.clear()
        self.answerer = None  # nothing is answered for code being stopped
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

    async def _answer(self, msg: dict[str, Any], deadline: float) -> bool:
        """Replies to this execution's input request; False when the deadline passed first."""
        if msg.get("header", {}).get("msg_type") != "input_request":
            return True
        if (msg.get("parent_header") or {}).get("msg_id") != self.reducer.msg_id:
            return True
        content = msg.get("content") or {}
        prompt = str(content.get("prompt", ""))
        if self.answerer is not None:
            answered = await self._ask(prompt, deadline)
            if answered is False:
                return False
            if answered is not None:
                await self.backend.send_input(answered)
                return True
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
            return True
        value = self.answers.popleft()
        shown = "" if content.get("password") else value
        self.reducer.add_stream("stdout", f"{prompt}{shown}\n")
        await self.backend.send_input(value)
        return True

    async def _ask(self, prompt: str, deadline: float) -> str | Literal[False] | None:
        """The answerer's reply (not shown: it is between our code and the kernel's),
        None for the answers' path, False when the deadline passed first."""
        assert self.answerer is not None
        try:
            return await asyncio.wait_for(
                self.answerer(prompt), max(deadline - time.monotonic(), 0)
            )
        except asyncio.TimeoutError:
            return False
        except Exception as exc:
            # A broken answerer costs this input (end of file), never the execution.
            self.notes.append(f"An input request could not be answered ({exc!r}).")
            return None
