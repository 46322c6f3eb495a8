"""An execution's live outputs handed out as they come, then its result.

``run_code`` and ``commands.run`` both stream an execution as it runs; this
is the one loop that does it. A reader that stops early (the client went
away) cancels the execution: the kernel is interrupted, its state kept.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Awaitable, Callable

from ..._execution._live import LiveOutput
from ..._execution._models import ExecutionResult

__all__ = ["Run", "streamed"]

Run = Callable[[Callable[[LiveOutput], None]], Awaitable[ExecutionResult]]
"""Starts an execution that calls the given function with each live output."""


async def streamed(run: Run) -> AsyncGenerator[LiveOutput | ExecutionResult, None]:
    """Each live output of the execution ``run`` starts, as it comes, then its result.

    Raises what the execution raised. Close it (``contextlib.aclosing``) to
    cancel an execution still running.
    """
    queue: asyncio.Queue[LiveOutput] = asyncio.Queue()
    task = asyncio.ensure_future(run(queue.put_nowait))
    try:
        while True:
            getting = asyncio.ensure_future(queue.get())
            await asyncio.wait({getting, task}, return_when=asyncio.FIRST_COMPLETED)
            if not getting.done():
                getting.cancel()
                break
            yield getting.result()
        while not queue.empty():
            yield queue.get_nowait()
        yield task.result()
    finally:
        if not task.done():
            task.cancel()
            await asyncio.wait([task])
