"""A restarted server's sessions, listed again from their records (``Registry.recover``).

Before the first request: half-made checkpoints and staging folders a crash
left are removed, then each record becomes an entry as the session was when
the server stopped. A suspended session is suspended again (its checkpoint
checked to be its own, and claimed by no other record), a culled one culled,
and one that was live is lost, saying why: its kernel went with the old server.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from .._session._async import AsyncSession
from ._entry import Entry
from ._idle import expire_checkpoints
from ._options import OptionError, SessionOptions, parse_options
from ._records import Record, sweep_staging

if TYPE_CHECKING:
    from ._registry import Registry

__all__ = ["LOST", "recover"]

log = logging.getLogger("kernelexec.server")

LOST = (
    "the server restarted, and this session's kernel (and the state it held) was lost "
    "with the old server; its files and transcript are kept in its work dir "
    "(GET .../files, .../notebook); create a new session"
)


async def recover(registry: Registry) -> None:
    """At start: sweeps what a crash left, and lists the sessions the records name.

    Half-made checkpoints and staging folders are removed; a suspended
    session is suspended again (its checkpoint checked to be its own), a
    culled one culled, and one that was live is lost, saying why.
    """
    await asyncio.to_thread(registry.store.sweep)
    records, refused = await asyncio.to_thread(registry.records.load)
    if refused:
        log.warning(
            "%d session records in %s were not trusted (written with another token, "
            "or changed) and were left as they are; restart with the token that wrote "
            "them to list those sessions again",
            refused,
            registry.records.work_root / ".sessions",
        )
    claimed: set[str] = set()
    for record in sorted(records, key=lambda r: r.created):
        swept = await asyncio.to_thread(sweep_staging, registry.root, record.id)
        if swept:
            log.info("removed %d staging folders a crash left in session %s", swept, record.id)
        registry.register(await _recovered(registry, record, claimed))
    await expire_checkpoints(registry)


async def _recovered(registry: Registry, record: Record, claimed: set[str]) -> Entry:
    """The entry of a session a record names, as it was when the server stopped."""
    lost: str | None = None
    try:
        options = parse_options(record.options, registry.config.policy)
    except OptionError as exc:
        options, lost = (
            SessionOptions(),
            (
                f"the server restarted, and the options this session was made with are no "
                f"longer allowed ({exc.message}); its files are kept; create a new session"
            ),
        )
    # A stand-in until it resumes: closed, never started, no kernel of its own.
    session = AsyncSession(registry.root / record.id, timeout=record.timeout)
    await session.close()
    entry = Entry(
        record.id,
        session,
        record.kernel_name,
        record.timeout,
        options,
        dict(record.env),
        tenant=record.tenant,
        created=record.created,
        starting=False,
        idle_for=record.idle_for,
    )
    checkpoint = record.checkpoint
    if lost is None and record.state == "culled":
        entry.culled, entry.why_culled = True, record.why_culled
    elif lost is None and record.state == "suspended" and checkpoint is not None:
        held = registry.store.held.get(checkpoint)
        if held is None or held.session != record.id or checkpoint in claimed:
            lost = (
                f"the server restarted, and the checkpoint holding this suspended "
                f"session's state ({checkpoint}) is gone or is not this session's; its "
                "files are kept; create a new session"
            )
        else:
            claimed.add(checkpoint)
            entry.suspend_id = checkpoint
            registry.store.suspends[checkpoint] = record.id
    elif lost is None:
        lost = LOST
    entry.lost = lost
    return entry
