"""What a tenant is: its tokens, scopes, quotas, session options and request rate.

Small frozen values, made by ``_config.py`` from a tenants file or from the
one ``--token`` of a server without one. They say what a tenant may do; the
server's routes will hold each request to them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ALLOWABLE",
    "SCOPES",
    "JwtKey",
    "JwtSettings",
    "Quotas",
    "RateLimit",
    "Tenant",
    "TenantToken",
    "TenantsConfig",
]

# What a token may be used for. `sessions` is making, listing and deleting the
# tenant's own sessions; `admin` is seeing and managing every tenant's.
SCOPES = (
    "sessions",
    "execute",
    "files:read",
    "files:write",
    "fork",
    "checkpoint",
    "attach",
    "admin",
)
# The session options a tenant's `allow` may name, one for each of the server's
# --allow-* flags: what runs another interpreter, installs packages, starts a
# container, reaches another machine or gives a kernel a network. Preload code
# and lower limits need none: they only do what the session's own code could.
ALLOWABLE = ("python", "packages", "docker", "gateway", "network")


@dataclass(frozen=True)
class TenantToken:
    """One of a tenant's tokens, as the tenants file holds it.

    Attributes:
        id: what logs and the audit show for it (by default from its hash).
        hash: ``sha256:`` and the hex digest of the token.
    """

    id: str
    hash: str = field(repr=False)


@dataclass(frozen=True)
class Quotas:
    """How much of the server a tenant may hold at once; None is no quota of the tenant's own.

    The server's own caps (``--max-sessions``, ``--max-queued``,
    ``--session-disk-mb``...) still hold: a quota can only ask for less.

    Attributes:
        live_sessions: sessions with a kernel (suspended ones do not count).
        queued_executions: background executions waiting or running, in all
            of its sessions together.
        cpu_seconds_per_hour: CPU time its kernels may use in any hour.
        work_dir_bytes: bytes in each of its sessions' work dirs.
        session_lifetime_seconds: how long one of its sessions may live.
    """

    live_sessions: int | None = None
    queued_executions: int | None = None
    cpu_seconds_per_hour: float | None = None
    work_dir_bytes: int | None = None
    session_lifetime_seconds: float | None = None


@dataclass(frozen=True)
class RateLimit:
    """At most ``requests`` requests in any ``per_seconds``; more answer 429 with Retry-After."""

    requests: int
    per_seconds: float


@dataclass(frozen=True)
class Tenant:
    """Someone who holds tokens to the server, and what those tokens may do.

    Attributes:
        name: how logs, the audit and errors name it.
        scopes: what its tokens may be used for (``SCOPES``).
        tokens: its tokens' hashes; none for a tenant that comes in some
            other way, or that is shut out for now.
        quotas: how much it may hold at once.
        allow: the session options of ``ALLOWABLE`` it may ask for, within
            what the server's flags name (its interpreters, gateways and
            Docker networks). None: the server's ``--allow-*`` flags decide,
            as they do for a server with one ``--token``.
        rate_limit: its requests' rate; None for no limit.
    """

    name: str
    scopes: frozenset[str]
    tokens: tuple[TenantToken, ...] = ()
    quotas: Quotas = field(default_factory=Quotas)
    allow: frozenset[str] | None = frozenset()
    rate_limit: RateLimit | None = None

    def can(self, scope: str) -> bool:
        """Whether this tenant's tokens may be used for ``scope``.

        Raises:
            ValueError: ``scope`` is not one of ``SCOPES`` (a mistake in the
                caller, which would otherwise refuse every tenant).
        """
        if scope not in SCOPES:
            raise ValueError(f"no such scope {scope!r}: the scopes are {', '.join(SCOPES)}")
        return scope in self.scopes


@dataclass(frozen=True)
class JwtKey:
    """One public key that JWT bearer tokens are checked against.

    Attributes:
        kid: its key id in a JWKS document; None for a PEM key, which a
            token naming any key id may still be checked against.
        algorithms: the signing algorithms it may verify: those that fit its
            type (and the JWK's ``alg``), within the ``[jwt]`` table's list.
        key: the public key, as the ``cryptography`` package holds it (typed
            loosely so that this module imports nothing of the ``jwt`` extra).
    """

    kid: str | None
    algorithms: frozenset[str]
    key: Any = field(repr=False, compare=False)


@dataclass(frozen=True)
class JwtSettings:
    """A tenants file's ``[jwt]`` table: which JWTs from an identity provider are taken, as whom.

    Attributes:
        keys_file: the file the keys were read from (absolute, or as named
            from the working directory).
        keys: the public keys read from it, at least one.
        audience: a token's ``aud`` must hold one of these.
        issuer: a token's ``iss`` must be this; None checks no issuer.
        tenant_claim: the claim whose value names a ``[tenants.NAME]``.
        algorithms: the signing algorithms accepted, all asymmetric.
        leeway_seconds: the clock skew allowed when ``exp``, ``nbf`` and
            ``iat`` are checked.
        keys_stamp: the keys file's device, inode, size and modification
            time when it was read (as ``_config.FileStamp``), so that a
            rotated keys file is read again without a change to the tenants
            file.
    """

    keys_file: str
    keys: tuple[JwtKey, ...]
    audience: tuple[str, ...]
    issuer: str | None = None
    tenant_claim: str = "tenant"
    algorithms: tuple[str, ...] = ()
    leeway_seconds: float = 30.0
    keys_stamp: tuple[int, int, int, int] | None = None


@dataclass(frozen=True)
class TenantsConfig:
    """Every tenant of one server, and where they were read from.

    Attributes:
        tenants: in the order the file gives them; names are unique, and so
            are the tokens' hashes and ids, across all of them.
        source: the tenants file, or None for the one tenant made from
            ``--token``.
        jwt: the file's ``[jwt]`` table, when it takes JWTs from an identity
            provider as well as its own tokens; None when it does not.
    """

    tenants: tuple[Tenant, ...]
    source: str | None = None
    jwt: JwtSettings | None = None

    def get(self, name: str) -> Tenant | None:
        """The tenant called ``name``, or None."""
        return next((tenant for tenant in self.tenants if tenant.name == name), None)
