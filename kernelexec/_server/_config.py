"""ServerConfig: everything ``kernelexec serve`` can be told, in one frozen value."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from pathlib import Path

from .._exceptions import ConfigurationError
from ._options import SessionPolicy
from ._token import check_token

__all__ = ["BOTH_GIVEN", "MIB", "ServerConfig", "is_loopback"]

MIB = 1024 * 1024
BOTH_GIVEN = (
    "pass --tenants or --token (or KERNELEXEC_TOKEN), not both: with a tenants file every "
    "token is in it (kernelexec token NAME makes one)"
)


def is_loopback(host: str) -> bool:
    """True for "localhost" and any address in 127.0.0.0/8 or ::1."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class ServerConfig:
    """How a server runs.

    Attributes:
        token: the bearer token every route but /health requires, held by
            one tenant with every scope; None when ``tenants`` is given.
        tenants: the tenants file (``kernelexec/_tenants``): who may call,
            with which tokens, scopes, quotas and session options; reloaded
            on SIGHUP and when it changes. None: ``token`` alone.
        audit_log: where the audit log's JSON lines go (``kernelexec/_audit``);
            None for none.
        audit_max_bytes: the size past which the audit log is rotated.
        work_root: each session's work dir is ``<work_root>/<session id>/``.
        host, port: where to listen.
        max_sessions: sessions with a kernel at once; one more gets HTTP 429.
        idle_timeout: seconds without a request before a session is
            suspended (its state checkpointed, its kernel shut down, restored
            by its next execution) or, when that fails or ``suspend`` is off,
            culled (kernel shut down, state lost, files kept); None never.
        suspend: suspend idle sessions rather than cull them
            (``--no-suspend`` turns it off).
        max_timeout: the longest execution timeout a request may ask for.
        default_timeout: a session's execution timeout when none is asked for.
        max_body: bytes a request body may hold (JSON or an uploaded file).
        max_stream_buffer: characters of live output a slow streaming reader
            may leave queued before further live output is dropped (the final
            result still holds it).
        pool_size: kernels kept started (and preloaded) for new sessions; 0 for none.
        preload: code every session's kernel runs before its first execution.
        policy: the session options clients may ask for (``SessionPolicy``).
        max_queued: executions a session may hold not yet ended (queued or
            running); one more gets HTTP 429 with Retry-After.
        max_queued_bytes: request bytes those executions may hold together;
            past it, 429 (or 413 for one body alone over it).
        session_disk: bytes one session's checkpoints in the store may hold
            together (apparent sizes), and a fork's copy of its files.
        store_disk: bytes the whole checkpoint store may hold.
        checkpoint_max_age: seconds a checkpoint is kept in the store (a
            suspended session's too: the session is then culled); None forever.
        e2b: also answer E2B's SDK under ``/e2b`` (``kernelexec/_server/_e2b/``).
    """

    token: str | None
    work_root: Path
    host: str = "127.0.0.1"
    port: int = 8765
    max_sessions: int = 8
    idle_timeout: float | None = 3600.0
    suspend: bool = True
    max_timeout: float = 600.0
    default_timeout: float = 60.0
    max_body: int = 64 * 1024 * 1024
    max_stream_buffer: int = 1_000_000
    pool_size: int = 0
    preload: str | None = None
    policy: SessionPolicy = field(default_factory=SessionPolicy)
    max_queued: int = 32
    max_queued_bytes: int = 64 * MIB
    session_disk: int = 4096 * MIB
    store_disk: int = 16384 * MIB
    checkpoint_max_age: float | None = 7 * 86400.0
    tenants: Path | None = None
    audit_log: Path | None = None
    audit_max_bytes: int = 64 * MIB
    e2b: bool = False

    def __post_init__(self) -> None:
        if self.token is not None and self.tenants is not None:
            raise ConfigurationError(BOTH_GIVEN)
        if self.token is None and self.tenants is None:
            raise ConfigurationError("a server needs --token or --tenants")
        if self.token is not None:
            check_token(self.token)
        if self.audit_max_bytes < 1024:
            raise ConfigurationError("--audit-max-mb must be at least 1 KiB")
        if self.max_queued < 1:
            raise ConfigurationError("--max-queued must be at least 1")
        if self.max_queued_bytes < 1024:
            raise ConfigurationError("--max-queued-mb must be at least 1 KiB")
        if self.session_disk < 0 or self.store_disk < 0:
            raise ConfigurationError("--session-disk-mb and --store-disk-mb cannot be negative")
        if self.checkpoint_max_age is not None and not self.checkpoint_max_age > 0:
            raise ConfigurationError(
                "--checkpoint-max-age-days must be positive days (0 keeps checkpoints forever)"
            )
        if self.pool_size < 0:
            raise ConfigurationError("--pool-size must be 0 or more")
        if self.max_sessions < 1:
            raise ConfigurationError("--max-sessions must be at least 1")
        if self.idle_timeout is not None and not self.idle_timeout > 0:
            raise ConfigurationError("--idle-timeout must be positive seconds (0 disables it)")
        if not self.max_timeout > 0:
            raise ConfigurationError("--max-timeout must be positive seconds")
        if self.max_body < 1024:
            raise ConfigurationError("--max-body must be at least 1024 bytes")
        if not 0 < self.default_timeout:
            raise ConfigurationError("the default timeout must be positive seconds")
        object.__setattr__(self, "default_timeout", min(self.default_timeout, self.max_timeout))
