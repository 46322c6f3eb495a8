"""Tenants' quotas, held by the server: sessions, queued executions, CPU, disk, lifetime.

Each quota of ``Quotas`` can only ask for less than the server's own caps
(``--max-sessions``, ``--max-queued``...), which still hold. A request past
a quota is answered 429 ``quota_exceeded``, naming the quota in the message
and in the body's ``quota`` field, with ``Retry-After`` where waiting helps.

CPU is measured by the host (``_backends/_cpu.py``), not taken from what kernels
report: ``QuotaKeeper`` reads the process trees of the kernels of every
tenant with a CPU quota, four times a second while one of them runs an
execution and every two seconds otherwise, into a rolling hour per tenant.
A tenant past its quota has its running executions stopped (status
``"quota_exceeded"``, the message naming the quota) and new ones refused
until enough of the hour has passed. A kernel on a Ray node is measured the
same way by that node's host (``RayBackend.cpu_seconds``). Kernels no host of
ours runs (Docker, gateways) are counted by the usage their results carry.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from .._backends._cpu import tree_cpu_seconds
from .._exceptions import KernelexecError
from .._execution._models import ExecutionResult
from .._tenants._models import Tenant
from .._tenants._registry import TenantRegistry
from .._workdir import list_tree
from ._errors import ApiError

if TYPE_CHECKING:
    from ._entry import Entry
    from ._registry import Registry

__all__ = ["HOUR", "QuotaKeeper", "quota_exceeded"]

log = logging.getLogger("kernelexec.server")

HOUR = 3600.0
BUSY_PERIOD = 0.25  # seconds between two readings while a metered tenant runs code
IDLE_PERIOD = 2.0
_IDLE_CPU = 0.05  # CPU seconds between two readings that an idle kernel does not reach


def quota_exceeded(
    tenant: Tenant, quota: str, text: str, *, retry_after: float | None = None
) -> ApiError:
    """HTTP 429 for a request past one of the tenant's quotas, named in the body."""
    headers = {"Retry-After": str(max(1, round(retry_after)))} if retry_after else None
    return ApiError(
        429,
        "quota_exceeded",
        f"tenant {tenant.name!r} {text} (its quota {quota}); ask the server's operator for "
        "more, or free what it holds",
        headers=headers,
        fields={"quota": quota},
    )


class QuotaKeeper:
    """Holds every tenant of a server to its quotas."""

    def __init__(self, registry: Registry, tenants: TenantRegistry) -> None:
        self.registry = registry
        self.tenants = tenants
        # session id -> (its kernel: a pid here, an id on a Ray node; its CPU seconds)
        self._readings: dict[str, tuple[int | str, float]] = {}
        self._spent: dict[str, collections.deque[tuple[float, float]]] = {}  # per tenant
        self._poked = asyncio.Event()

    def tenant(self, name: str) -> Tenant | None:
        """The tenant called ``name`` in the tenants now in force (None: no longer there)."""
        return self.tenants.config.get(name)

    # -- sessions

    def check_live(self, tenant: Tenant, what: str = "") -> None:
        """429 if the tenant already holds its quota of sessions with a kernel."""
        most = tenant.quotas.live_sessions
        if most is None:
            return
        held = self._held(
            tenant,
            lambda e: (not (e.culled or e.suspended or e.lost or e.session.closed)) or e.starting,
        )
        if held >= most:
            raise quota_exceeded(
                tenant,
                "live_sessions",
                f"already has {held} sessions with a kernel{what}, and may have {most}: "
                "delete one (DELETE /sessions/{id})",
            )

    def check_queued(self, tenant: Tenant) -> None:
        """429 if the tenant's executions not yet ended, in all its sessions, fill its quota."""
        most = tenant.quotas.queued_executions
        if most is None:
            return
        held = self._held(tenant, lambda e: len(e.execution_store.running()))
        if held >= most:
            raise quota_exceeded(
                tenant,
                "queued_executions",
                f"has {held} executions queued or running, and may have {most}: wait for one "
                "to end",
                retry_after=1,
            )

    def _held(self, tenant: Tenant, count: Callable[[Entry], int]) -> int:
        """``count`` summed over the tenant's sessions."""
        return sum(count(e) for e in self.registry.entries() if e.tenant == tenant.name)

    # -- CPU

    def used(self, name: str, now: float | None = None) -> float:
        """CPU seconds the tenant's kernels used in the last hour."""
        spent = self._spent.get(name)
        if not spent:
            return 0.0
        cutoff = (time.monotonic() if now is None else now) - HOUR
        while spent and spent[0][0] < cutoff:
            spent.popleft()
        return sum(seconds for _, seconds in spent)

    def check_cpu(self, tenant: Tenant) -> None:
        """429 while the tenant's last hour holds its CPU quota; Retry-After: until it will not."""
        most = tenant.quotas.cpu_seconds_per_hour
        if most is None:
            return
        used = self.used(tenant.name)
        if used < most:
            return
        # The time until enough of the oldest use leaves the hour to bring it under.
        excess, wait = used - most, HOUR
        for when, seconds in self._spent.get(tenant.name, ()):
            excess -= seconds
            if excess < 0:
                wait = when + HOUR - time.monotonic()
                break
        raise quota_exceeded(
            tenant,
            "cpu_seconds_per_hour",
            f"used {used:.1f} CPU seconds in the last hour, and may use {most:g}",
            retry_after=max(wait, 1.0),
        )

    def charge(self, name: str, seconds: float) -> None:
        if seconds > 0:
            self._spent.setdefault(name, collections.deque()).append((time.monotonic(), seconds))

    def charge_result(self, entry: Entry, result: ExecutionResult) -> None:
        """Counts a result's usage for a kernel no host of ours can measure."""
        if (
            _pid(entry) is None
            and _remote_meter(entry) is None
            and result.usage is not None
            and self._metered(entry.tenant)
        ):
            self.charge(entry.tenant, result.usage.user_seconds + result.usage.system_seconds)

    async def sample(self) -> bool:
        """Reads the CPU of every metered tenant's kernels once (in a thread), stops the
        executions of those past their quota; whether any of them runs code now."""
        entries = [
            e
            for e in self.registry.entries()
            if self._metered(e.tenant)
            and not (e.culled or e.lost)
            and (_pid(e) is not None or _remote_meter(e) is not None)
        ]
        readings = await self._read(entries)
        burning: set[str] = set()  # sessions whose kernels used CPU since the last reading
        for entry in entries:
            if entry.id not in readings:
                continue
            kernel, now = readings[entry.id]
            before = self._readings.get(entry.id)
            # A new kernel (restarted, resumed) is counted from its own start.
            delta = now - before[1] if before and before[0] == kernel else now
            self._readings[entry.id] = (kernel, now)
            self.charge(entry.tenant, max(delta, 0.0))
            if delta > _IDLE_CPU:
                burning.add(entry.id)
        for gone in set(self._readings) - set(readings):
            del self._readings[gone]
        busy = False
        for entry in entries:
            tenant = self.tenant(entry.tenant)
            running = entry.execution_store.running()
            busy = busy or bool(running) or entry.id in burning
            most = None if tenant is None else tenant.quotas.cpu_seconds_per_hour
            if tenant is None or most is None or self.used(tenant.name) < most:
                continue
            if running:
                self.stop(entry, tenant, most)
            elif entry.id in burning:
                # Code none of our executions runs (sent over the attach WebSocket):
                # interrupted as a timeout would be; its state stays.
                log.info(
                    "interrupted session %s: tenant %r is past its CPU quota", entry.id, tenant.name
                )
                with contextlib.suppress(KernelexecError):
                    await entry.session.interrupt()
        return busy

    async def _read(self, entries: list[Entry]) -> dict[str, tuple[int | str, float]]:
        """Each session's kernel (its pid here, or its id on a Ray node) and CPU seconds:
        this machine's kernels from its /proc, a node's from its host's."""
        pids = {e.id: pid for e in entries if (pid := _pid(e)) is not None}
        found = await asyncio.to_thread(tree_cpu_seconds, pids.values())
        readings: dict[str, tuple[int | str, float]] = {
            session: (pid, found[pid]) for session, pid in pids.items() if pid in found
        }
        for entry in entries:
            meter = _remote_meter(entry)
            if entry.id in pids or meter is None:
                continue
            with contextlib.suppress(KernelexecError, OSError):
                measured = await meter()
                if measured is not None:
                    readings[entry.id] = measured
        return readings

    def poke(self) -> None:
        """An execution is starting: read CPU at the quick pace from now."""
        self._poked.set()

    def stop(self, entry: Entry, tenant: Tenant, most: float) -> None:
        entry.quota_stop = (
            f"stopped: tenant {tenant.name!r} used its {most:g} CPU seconds of the last hour "
            "(its quota cpu_seconds_per_hour); new executions are refused until the hour "
            "has room again"
        )
        for execution in entry.execution_store.running():
            execution.cancel()
        log.info("stopped the executions of session %s: %s", entry.id, entry.quota_stop)

    def _metered(self, name: str) -> bool:
        tenant = self.tenant(name)
        return tenant is not None and tenant.quotas.cpu_seconds_per_hour is not None

    # -- disk and lifetime

    async def work_dir_bytes(self, entry: Entry) -> int:
        """Bytes in the session's work dir (apparent sizes, no link followed), and in its
        kernel's folder on a Ray node, counted there by the node's host (both whole: a
        name on both sides counts twice, as it takes room twice)."""
        listing = await asyncio.to_thread(list_tree, entry.work_dir, max_files=1_000_000)
        node_bytes = getattr(getattr(entry.session, "_backend", None), "node_bytes", None)
        there = await node_bytes() if callable(node_bytes) else 0
        return sum(f.size for f in listing.files) + there

    async def check_upload(self, entry: Entry, tenant: Tenant, size: int) -> int | None:
        """429 if ``size`` more bytes would put the work dir past the tenant's quota; the
        bytes still allowed (None: no quota)."""
        most = tenant.quotas.work_dir_bytes
        if most is None:
            return None
        held = await self.work_dir_bytes(entry)
        if held + size > most:
            raise self.too_much(tenant, held + size, most)
        return most - held

    def too_much(self, tenant: Tenant, would: int, most: int) -> ApiError:
        return quota_exceeded(
            tenant,
            "work_dir_bytes",
            f"would hold {would:,} bytes in the session's work dir, and may hold {most:,}",
        )

    async def after_execution(self, entry: Entry, result: ExecutionResult) -> ExecutionResult:
        """The result, saying so if its execution was stopped for CPU or left the work dir
        past the tenant's quota."""
        self.charge_result(entry, result)
        stopped, entry.quota_stop = entry.quota_stop, None
        if stopped is not None and result.status == "cancelled":
            result = replace(
                result,
                status="quota_exceeded",
                message=stopped,
                text=f"{result.text.rstrip(chr(10))}\n[kernelexec] {stopped}\n".lstrip("\n"),
            )
        tenant = self.tenant(entry.tenant)
        most = None if tenant is None else tenant.quotas.work_dir_bytes
        if most is not None:
            held = await self.work_dir_bytes(entry)
            if held > most:
                note = (
                    f"the work dir now holds {held:,} bytes, past tenant {entry.tenant!r}'s "
                    f"{most:,} (its quota work_dir_bytes): uploads are refused until files "
                    "are removed"
                )
                message = f"{result.message} {note}" if result.message else note
                result = replace(
                    result, message=message, text=f"{result.text}[kernelexec] {note}\n"
                )
        return result

    async def expire(self) -> None:
        """Ends the sessions older than their tenant's session lifetime."""
        now = time.time()
        for entry in self.registry.entries():
            tenant = self.tenant(entry.tenant)
            most = None if tenant is None else tenant.quotas.session_lifetime_seconds
            if most is None or entry.lost or entry.culled or now - entry.created < most:
                continue
            entry.lost = (
                f"session {entry.id} lived {most:g} s, its tenant's session lifetime (the quota "
                "session_lifetime_seconds): its kernel was shut down, its files are kept; "
                "create a new session"
            )
            await entry.session.close()
            await self.registry.forget_suspend(entry)
            log.info("ended session %s: %s", entry.id, entry.lost)

    async def watch(self) -> None:
        """Until cancelled: reads CPU, stops what passes a quota, ends old sessions."""
        expired_at = 0.0
        while True:
            busy = False
            try:
                busy = await self.sample() if self._any_metered() else False
                if time.monotonic() - expired_at >= 1.0:
                    expired_at = time.monotonic()
                    await self.expire()
            except Exception:  # never let one bad reading end the watch
                log.exception("the quota watch failed once; it goes on")
            self._poked.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._poked.wait(), BUSY_PERIOD if busy else IDLE_PERIOD)

    def _any_metered(self) -> bool:
        return any(t.quotas.cpu_seconds_per_hour is not None for t in self.tenants.config.tenants)


def _remote_meter(entry: Entry) -> Callable[[], Awaitable[tuple[str, float] | None]] | None:
    """How a kernel on another machine is measured by a host of ours there (a Ray node's):
    its backend's ``cpu_seconds``; None for kernels no host of ours runs."""
    meter = getattr(getattr(entry.session, "_backend", None), "cpu_seconds", None)
    return meter if callable(meter) else None


def _pid(entry: Entry) -> int | None:
    pid = getattr(entry.session, "kernel_pid", None)
    return pid if isinstance(pid, int) else None
