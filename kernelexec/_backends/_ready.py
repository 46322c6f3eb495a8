"""The readiness handshake every backend does with a new kernel."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from ._base import KernelMessage

__all__ = ["await_kernel_info"]

# Seconds to wait for a status that may be behind its reply before asking again.
SETTLE = 0.02


async def await_kernel_info(
    *,
    ask: Callable[[], Awaitable[str]],
    receive: Callable[[float], Awaitable[KernelMessage | None]],
    check: Callable[[], Awaitable[None]],
    timeout: float,
    retry: float,
    poll: float,
    connected: Callable[[float], Awaitable[bool]] | None = None,
) -> bool:
    """Asks for kernel_info until its idle status arrives on IOPub; False on timeout.

    The idle status on IOPub, not just the shell reply, is the proof: it shows
    the IOPub subscription is live, so not one output of the first execution
    can be missed. Where the backend can tell when its sockets are connected,
    the question waits for that: asked earlier, it is answered as soon as the
    kernel is up, but the idle status may go out before the IOPub connection
    is made and be lost, and a new question (``retry`` later) is needed.
    Even connected, the subscription itself may reach the kernel after it
    answered (a busy machine): a kernel that says when it takes one
    (``iopub_welcome``, ipykernel 7), and has answered on shell with nothing
    heard on IOPub, gets the question again soon: ``SETTLE`` later, unless the
    status comes meanwhile (it travels on another socket, sent by another
    thread of the kernel, and is often read just after the reply: a question
    asked then only delays the first execution). Otherwise the question is asked
    again every ``retry`` seconds, and the answer to any of them counts:
    a kernel slowed down by a busy machine may take longer than ``retry`` to
    answer each, and waiting for the latest only would never end.

    Args:
        ask: sends a kernel_info request; returns its msg_id.
        receive: the backend's next message, or None after the given seconds.
        check: raises ``KernelStartError`` once the kernel is known to be gone.
        timeout, retry, poll: seconds in all, between questions, per receive.
        connected: True once every socket to the kernel is connected, waiting
            at most the given seconds.
    """
    deadline = time.monotonic() + timeout
    if connected is not None:
        while not await connected(min(poll, max(deadline - time.monotonic(), 0))):
            await check()
            if time.monotonic() >= deadline:
                return False
    asked: set[str] = set()
    heard = welcomed = replied = False
    while time.monotonic() < deadline:
        asked.add(await ask())
        until = min(deadline, time.monotonic() + retry)
        while time.monotonic() < until:
            item = await receive(max(0.0, min(poll, until - time.monotonic())))
            if item is None:
                await check()
                continue
            channel, msg = item
            about_ours = msg["parent_header"].get("msg_id") in asked
            if channel == "iopub" and about_ours:
                heard = True
                if msg["content"].get("execution_state") == "idle":
                    return True
            welcomed = welcomed or (
                channel == "iopub" and msg["header"].get("msg_type") == "iopub_welcome"
            )
            replied = replied or (channel == "shell" and about_ours)
            if welcomed and replied and not heard:
                # Either the kernel answered before it took our subscription
                # (ipykernel 7 says when it takes one) and its status went to
                # nobody, or the status is on its way behind the reply: ask
                # again soon, not after `retry`, and not at once.
                welcomed = replied = False
                until = min(until, time.monotonic() + SETTLE)
    return False
