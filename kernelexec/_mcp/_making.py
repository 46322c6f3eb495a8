"""Sessions being made for a tool call: their names reserved, nothing made left behind.

A name is reserved (``reserve``) in the same step that finds it free, before
any await, so concurrent calls that make, fork or restore one name make one
session, and the others wait for it (``wait``) or are told it is taken. The
work runs as a task of its own (``make``): a tool call that goes away (the
client cancels it, or disconnects, and the SDK cancels the handler, again at
every await) leaves that task to end, and what it made is then discarded,
never half made and never left running where no tool can reach it. The name
stays reserved, and counted, until the session is adopted or discarded.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

__all__ = ["Making"]

T = TypeVar("T")
R = TypeVar("R")


class Making:
    """The names of sessions being made, and the tasks making or discarding them."""

    def __init__(self) -> None:
        self._names: dict[str, asyncio.Future[bool]] = {}  # -> made (True) or not
        self._tasks: set[asyncio.Future[Any]] = set()

    def __contains__(self, name: object) -> bool:
        return name in self._names

    def __len__(self) -> int:
        return len(self._names)

    def reserve(self, name: str) -> None:
        """Reserves ``name``, which the caller has found free; ``make`` releases it."""
        assert name not in self._names
        self._names[name] = asyncio.get_running_loop().create_future()

    async def wait(self, name: str) -> bool:
        """Waits until no session called ``name`` is being made; False if one was and failed."""
        pending = self._names.get(name)
        return pending is None or await asyncio.shield(pending)

    async def make(
        self,
        name: str | None,
        work: Awaitable[T],
        adopt: Callable[[T], R],
        discard: Callable[[T], Awaitable[object]],
    ) -> R:
        """What ``adopt`` makes of ``work``'s session; ``name`` (reserved, or None) released.

        ``adopt`` runs at once when ``work`` ends, with no await between (it
        names the session where others find it); if it raises, or the caller
        has gone away, the session is handed to ``discard`` instead.
        """
        task = asyncio.ensure_future(work)
        self._track(task)
        try:
            made = await asyncio.shield(task)
        except BaseException:
            # Failed, or the caller went away: once the work ends, what it made goes.
            if task.done():
                self._abandoned(name, discard, task)
            else:
                task.add_done_callback(lambda t: self._abandoned(name, discard, t))
            raise
        try:
            adopted = adopt(made)
        except BaseException:
            self._discard(name, discard, made)
            raise
        self._release(name, made=True)
        return adopted

    async def close(self) -> None:
        """Waits for every session being made, and every discard, to end."""
        while self._tasks:
            await asyncio.wait(set(self._tasks))

    def _track(self, task: asyncio.Future[Any]) -> None:
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _abandoned(
        self, name: str | None, discard: Callable[[T], Awaitable[object]], task: asyncio.Future[T]
    ) -> None:
        if task.cancelled() or task.exception() is not None:
            self._release(name, made=False)  # nothing was made (the exception was the caller's)
        else:
            self._discard(name, discard, task.result())

    def _discard(
        self, name: str | None, discard: Callable[[T], Awaitable[object]], made: T
    ) -> None:
        cleanup = asyncio.ensure_future(discard(made))
        self._track(cleanup)
        # Counted until it is gone: a slot is free only once its kernel is.
        cleanup.add_done_callback(lambda t: self._release(name, made=False, done=t))

    def _release(
        self, name: str | None, *, made: bool, done: asyncio.Future[Any] | None = None
    ) -> None:
        if done is not None and not done.cancelled():
            done.exception()  # a discard that failed: retrieved, nothing more to do
        pending = self._names.pop(name, None) if name is not None else None
        if pending is not None and not pending.done():
            pending.set_result(made)
