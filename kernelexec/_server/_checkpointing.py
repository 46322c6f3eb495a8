"""A server's checkpoints: made into its store within its budgets, opened, deleted.

Each checkpoint is counted against two budgets before a byte is written: the
session's (``--session-disk-mb``, its checkpoints together) and the store's
(``--store-disk-mb``); one being made is counted at its whole budget, so two
at once cannot both pass it. ``CheckpointStore`` (``_checkpoints.py``) holds
the files; these are the ``Registry``'s operations on it, HTTP answers included.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from .._exceptions import (
    CheckpointError,
    DiskSpaceError,
    IncompatibleCheckpointError,
    SessionClosedError,
)
from .._remote_models import CheckpointInfo
from .._state import _disk
from .._state._manifest import Checkpoint
from ._checkpoints import Held, UnknownCheckpoint
from ._entry import Entry
from ._errors import ApiError, closed_meanwhile, no_room
from ._idle import CHECKPOINT_TIMEOUT, VARIABLE_TIMEOUT

if TYPE_CHECKING:
    from ._registry import Registry

__all__ = [
    "checkpoint",
    "delete_checkpoint",
    "make_checkpoint",
    "no_checkpoint",
    "open_checkpoint",
    "restore_refused",
]


async def checkpoint(registry: Registry, session_id: str, *, files: bool) -> CheckpointInfo:
    """Checkpoints the session's state (and files) into the store.

    HTTP 507 if it would not fit (the disk, or the server's budgets: refused
    before anything is written), 409 if it cannot be made.
    """
    async with registry.using(session_id) as entry:
        try:
            checkpoint_id, saved = await make_checkpoint(registry, entry, files=files)
        except DiskSpaceError as exc:
            raise no_room(f"{exc}{_budget_note(registry, entry.id)}") from None
        except SessionClosedError:
            raise closed_meanwhile() from None
        except CheckpointError as exc:
            raise ApiError(
                409, "checkpoint_failed", f"the session's state could not be saved: {exc}"
            ) from None
    return registry.store.describe(checkpoint_id, saved)


async def make_checkpoint(
    registry: Registry, entry: Entry, *, files: bool
) -> tuple[str, Checkpoint]:
    """A new checkpoint of the session in the store, within its budgets.

    Raises:
        DiskSpaceError: it would pass the session's or the store's budget,
            or the room on disk; nothing is kept.
        CheckpointError: it could not be made (``transient`` says if it may pass).
        SessionClosedError: the session was closed meanwhile.
    """
    budget = _checkpoint_budget(registry, entry.id)
    try:
        checkpoint_id, path = await asyncio.to_thread(registry.store.new)
    except CheckpointError as exc:
        raise ApiError(503, "checkpoint_store_unusable", str(exc)) from None
    # Counted at its budget while it is made, so two at once cannot both pass it.
    registry.store.held[checkpoint_id] = Held(budget, entry.id, time.time())
    try:
        await entry.session.checkpoint(
            path,
            files=files,
            timeout=CHECKPOINT_TIMEOUT,
            variable_timeout=VARIABLE_TIMEOUT,
            max_bytes=budget,
        )
        registry.store.done(checkpoint_id)
        await asyncio.to_thread(registry.set_checkpoint_owner, checkpoint_id, entry.tenant)
        # Read back through the store, no link followed: it is where it should be.
        saved = await asyncio.to_thread(registry.store.open, checkpoint_id)
        registry.store.count(checkpoint_id, saved)
    except BaseException as exc:
        registry.store.done(checkpoint_id)
        await asyncio.to_thread(registry.remove_checkpoint, checkpoint_id)
        if isinstance(exc, UnknownCheckpoint):
            raise CheckpointError(f"it is not where it was made ({exc})") from None
        raise
    return checkpoint_id, saved


def _checkpoint_budget(registry: Registry, session_id: str) -> int:
    """Bytes a new checkpoint of the session may hold; DiskSpaceError if none."""
    left = min(
        registry.config.session_disk - registry.store.usage(session_id),
        registry.config.store_disk - registry.store.usage(),
    )
    if left <= 0:
        raise DiskSpaceError(
            "there is no room left for another checkpoint; nothing was written. Delete "
            "checkpoints you no longer need (DELETE /checkpoints/{id})"
            + _budget_note(registry, session_id)
        )
    return left


def _budget_note(registry: Registry, session_id: str) -> str:
    config, store = registry.config, registry.store
    return (
        f" (this server's budgets: {_disk.shown(config.session_disk)} for one session's "
        f"checkpoints, --session-disk-mb, of which this session's hold "
        f"{_disk.shown(store.usage(session_id))}; {_disk.shown(config.store_disk)} for "
        f"all of them, --store-disk-mb, of which {_disk.shown(store.usage())} are held)"
    )


def open_checkpoint(registry: Registry, checkpoint_id: str) -> Checkpoint:
    """A checkpoint of the store; HTTP 404 if unknown, 422 if damaged."""
    try:
        return registry.store.open(checkpoint_id)
    except UnknownCheckpoint:
        raise no_checkpoint(checkpoint_id) from None
    except CheckpointError as exc:
        raise ApiError(422, "checkpoint_damaged", str(exc)) from None


async def delete_checkpoint(registry: Registry, checkpoint_id: str) -> None:
    """Removes a checkpoint; 404 if unknown, 409 if it holds a suspended session."""
    try:
        registry.store.path(checkpoint_id)
    except UnknownCheckpoint:
        raise no_checkpoint(checkpoint_id) from None
    owner = registry.store.suspends.get(checkpoint_id)
    if owner is not None or checkpoint_id in registry.store.making:
        why = (
            f"it holds the state of suspended session {owner}; delete that session instead"
            if owner
            else "it is being made"
        )
        raise ApiError(409, "checkpoint_in_use", f"checkpoint {checkpoint_id}: {why}")
    await asyncio.to_thread(registry.remove_checkpoint, checkpoint_id)


def no_checkpoint(checkpoint_id: str) -> ApiError:
    return ApiError(
        404,
        "checkpoint_not_found",
        f"no checkpoint {str(checkpoint_id)[:64]!r} on this server (GET /checkpoints lists them)",
    )


def restore_refused(exc: CheckpointError) -> ApiError:
    """The answer to a checkpoint that could not be restored into a new session."""
    if isinstance(exc, IncompatibleCheckpointError):
        return ApiError(409, "checkpoint_incompatible", str(exc))
    return ApiError(422, "restore_failed", f"the checkpoint could not be restored: {exc}")
