"""Progress notifications while a tool waits on a kernel: a long execution is not silent.

A client that sends a ``progressToken`` with ``tools/call`` gets a
``notifications/progress`` every ``EVERY`` seconds while the execution runs
(progress: the seconds it has run; total: its timeout, when known), so it
can show that the code is still running and keep its request timeout from
firing (``resetTimeoutOnProgress``). Without a token, nothing is sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable
from typing import Any, TypeVar

__all__ = ["EVERY", "with_progress"]

T = TypeVar("T")
EVERY = 1.0


async def with_progress(ctx: Any, work: Awaitable[T], total: float | None = None) -> T:
    """``await work``, reporting progress through ``ctx`` (an MCP ``Context``) meanwhile."""
    task = asyncio.ensure_future(work)
    began = time.monotonic()
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=EVERY)
            if done:
                return task.result()
            ran = time.monotonic() - began
            # A client gone or a notification that fails must not cost the execution.
            with contextlib.suppress(Exception):
                await ctx.report_progress(ran, total, f"running for {ran:.0f} s")
    finally:
        if not task.done():
            task.cancel()  # the call itself was cancelled: so is the execution, as before
            with contextlib.suppress(BaseException):
                await task
