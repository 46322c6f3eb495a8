"""E2B's sandboxes, each a kernelexec session of the server's registry, with its timeout
and its code contexts.

A sandbox's id is its session's id, so the registry's checks hold as they are
(the tenant's own sessions only, its quotas, idle suspend and resume); what E2B
adds is kept here: when the sandbox ends (``Sandbox.create(timeout=)``,
``set_timeout``), its metadata, and the contexts made by ``create_code_context``.
A context is a kernel of its own in the sandbox's work dir, moved to its ``cwd``
as it starts, so it shares the sandbox's files but not its variables.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from ..._exceptions import KernelexecError
from ..._session._async import AsyncSession
from ..._tenants._models import Tenant
from ..._tenants._registry import Identity
from ..._times import iso
from .._access import sees
from .._bodies import CreateRequest
from .._errors import ApiError
from .._registry import Entry, Registry
from ._paths import chdir_code

__all__ = ["ENVD_VERSION", "Context", "Sandbox", "Sandboxes"]

log = logging.getLogger("kernelexec.server")

# The envd version a sandbox reports: the SDK picks its protocol by it. 0.5.7
# uploads streamed data as octet-stream; file metadata (0.6.2) it refuses itself.
ENVD_VERSION = "0.5.7"
DEFAULT_TIMEOUT = 300  # E2B's, when Sandbox.create is given none
MAX_TIMEOUT = 86_400  # E2B's longest
MAX_CONTEXTS = 4  # code contexts a sandbox may add to its own (each is a kernel)
_SWEEP = 1.0  # seconds between looks for sandboxes past their end


@dataclass
class Context:
    """A code context a sandbox added: its own kernel, in the folder ``cwd`` names."""

    id: str
    language: str
    cwd: str
    session: AsyncSession

    def to_dict(self) -> dict[str, str]:
        return {"id": self.id, "language": self.language, "cwd": self.cwd}


@dataclass
class Sandbox:
    """What E2B says of a sandbox beyond its session."""

    id: str
    tenant: str
    template: str
    started: float
    end_at: float
    metadata: dict[str, str] = field(default_factory=dict)
    contexts: dict[str, Context] = field(default_factory=dict)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)  # contexts made one at a time

    def detail(self, token: str) -> dict[str, Any]:
        """The sandbox as E2B's API describes it (``SandboxDetail``, ``ListedSandbox``)."""
        return {
            "templateID": self.template,
            "sandboxID": self.id,
            "clientID": "kernelexec",
            "startedAt": iso(self.started),
            "endAt": iso(self.end_at),
            "envdVersion": ENVD_VERSION,
            "cpuCount": 1,
            "memoryMB": 0,
            "diskSizeMB": 0,
            "state": "running",
            "metadata": self.metadata,
            **self.tokens(token),
        }

    def created(self, token: str) -> dict[str, Any]:
        """The answer to a create or a connect (E2B's ``Sandbox``)."""
        return {
            "templateID": self.template,
            "sandboxID": self.id,
            "clientID": "kernelexec",
            "envdVersion": ENVD_VERSION,
            **self.tokens(token),
        }

    @staticmethod
    def tokens(token: str) -> dict[str, str]:
        # The SDK sends these back on every request to the sandbox (X-Access-Token,
        # E2B-Traffic-Access-Token), so each is checked as the caller's own key, the
        # one it sent here: revoking the key ends its sandboxes' access at once.
        return {"envdAccessToken": token, "trafficAccessToken": token}


class Sandboxes:
    """The server's E2B sandboxes, over its ``Registry``."""

    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        self._all: dict[str, Sandbox] = {}

    async def create(
        self,
        request: CreateRequest,
        owner: Tenant,
        template: str,
        timeout: int,
        metadata: dict[str, str],
    ) -> Sandbox:
        entry = await self.registry.create(request, owner)
        now = time.time()
        made = Sandbox(entry.id, owner.name, template, now, now + timeout, metadata)
        self._all[entry.id] = made
        return made

    def find(self, sandbox_id: str, identity: Identity) -> tuple[Sandbox, Entry]:
        """The caller's sandbox and its session; HTTP 404 for one unknown, another
        tenant's, or past its end."""
        found = self._all.get(sandbox_id)
        entry = self.registry.lookup(sandbox_id)
        if found is None or entry is None or not sees(identity, found.tenant):
            if found is not None and entry is None:
                self._forget(found)  # deleted through /sessions meanwhile
            raise not_found(sandbox_id)
        if found.end_at <= time.time():
            raise not_found(sandbox_id)  # the sweep kills it shortly
        return found, entry

    def reach(self, sandbox_id: str | None, identity: Identity) -> tuple[Sandbox, Entry]:
        """``find`` for a request to the sandbox itself: an unknown one is E2B's proxy's
        502 "not found" (the SDK's ``SandboxNotRunningException``, or False from
        ``is_running``)."""
        if not sandbox_id:
            raise ApiError(
                400, "missing_sandbox_id", "send the sandbox's id as the E2b-Sandbox-Id header"
            )
        try:
            return self.find(sandbox_id, identity)
        except ApiError:
            raise ApiError(
                502,
                "sandbox_not_found",
                f"sandbox {sandbox_id[:64]!r} was not found: it was killed, ran past its "
                "timeout, or never was",
            ) from None

    def owned(self, identity: Identity) -> list[Sandbox]:
        return [s for s in self._all.values() if sees(identity, s.tenant)]

    async def kill(self, sandbox: Sandbox) -> None:
        """Ends the sandbox: its contexts' kernels, its session and its files."""
        self._forget(sandbox)
        with contextlib.suppress(ApiError):  # already deleted through /sessions
            await self.registry.delete(sandbox.id, purge=True)

    def _forget(self, sandbox: Sandbox) -> None:
        self._all.pop(sandbox.id, None)
        for context in sandbox.contexts.values():
            task = asyncio.ensure_future(context.session.close())
            self.registry.tasks.add(task)
            task.add_done_callback(self.registry.tasks.discard)
        sandbox.contexts.clear()

    async def add_context(self, sandbox: Sandbox, entry: Entry, language: str, cwd: str) -> Context:
        """A new kernel for the sandbox, moved to the folder ``cwd`` names (``_paths``)."""
        async with sandbox.lock:
            if len(sandbox.contexts) >= MAX_CONTEXTS:
                raise ApiError(
                    429,
                    "too_many_contexts",
                    f"sandbox {sandbox.id} already has {MAX_CONTEXTS} code contexts besides its "
                    "default one; remove one (remove_code_context) first",
                )
            self.registry.check_room(" (each code context is a kernel)")
            move = chdir_code(entry.work_dir, cwd)
            context_id = secrets.token_hex(16)
            kwargs = self.registry.session_kwargs(
                entry.kernel_name, entry.env, entry.timeout, entry.options
            )
            if move is not None:
                # Every kernel of the context, restarts too, moves there as it starts. Its
                # work dir stays the sandbox's, which the kernel cannot swap for a link.
                kwargs["preload"] = "\n".join(filter(None, [kwargs.get("preload"), move]))
                kwargs["pool"] = None  # a pool's kernels have another preload
            session = AsyncSession(entry.work_dir, notebook=f"context-{context_id}.ipynb", **kwargs)
            try:
                await session.start()
            except KernelexecError as exc:
                await session.close()
                raise ApiError(503, "kernel_start_failed", str(exc)) from None
            made = Context(context_id, language, cwd, session)
            sandbox.contexts[context_id] = made
            return made

    async def sweep_forever(self) -> None:
        """Kills each sandbox once past its end, as E2B does, until cancelled."""
        while True:
            await asyncio.sleep(_SWEEP)
            now = time.time()
            for sandbox in [s for s in self._all.values() if s.end_at <= now]:
                try:
                    await self.kill(sandbox)
                except Exception:  # one sandbox's failure leaves the others' ends kept
                    log.exception("cannot end E2B sandbox %s", sandbox.id)

    async def close_all(self) -> None:
        for sandbox in list(self._all.values()):
            self._forget(sandbox)


def not_found(sandbox_id: str) -> ApiError:
    return ApiError(
        404,
        "sandbox_not_found",
        f"no sandbox {sandbox_id[:64]!r} on this server; it was killed, ran past its "
        "timeout, or never was (Sandbox.create makes one)",
    )
