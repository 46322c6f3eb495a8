"""The tenants in force: which tenant a bearer token is, and the file read again when it changes.

``TenantRegistry`` holds one ``TenantsConfig`` at a time and answers
``authenticate(token)`` with the tenant and the token's id, or None: for a
token of the file's, or, when the file has a ``[jwt]`` table, for a JWT that
its identity provider signed. The tenants file (and its ``[jwt]`` keys file)
is read again on demand (``reload``, which the server will call on SIGHUP)
or when its stamp or its keys file's changes (``refresh``, which ``watch``
calls every few seconds). A file that no longer reads keeps the tenants read
before in force, and the outcome, the log and ``last_error`` say why: an
operator's typo must not lock every tenant out, nor let anyone in.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from .._exceptions import ConfigurationError
from ._config import FileStamp, read_tenants, single_tenant
from ._jwt import JwtVerifier, is_jwt
from ._models import Tenant, TenantsConfig
from ._tokens import token_hash, token_id, verify_token

__all__ = ["Identity", "ReloadOutcome", "TenantRegistry"]

log = logging.getLogger("kernelexec.tenants")

# Tokens by the first 12 hex digits of their hash: see `authenticate`.
_Index = Mapping[str, tuple[tuple[str, "Identity"], ...]]
# What is in force, swapped as one value: the tenants, their tokens, their JWTs' verifier.
_State = tuple[TenantsConfig, _Index, JwtVerifier | None]
# The tenants file's stamp, and its keys file's (None without [jwt], or when it is gone).
_Stamps = tuple[FileStamp | None, FileStamp | None]


@dataclass(frozen=True)
class Identity:
    """Who sent a request: the tenant, and which of its tokens (by id, for the logs).

    For a JWT, ``tenant`` is the named tenant, or a copy of it with fewer
    scopes when the token's ``scope`` or ``scp`` claim names fewer (compare
    tenants by name, not by identity); ``token_id`` is ``jwt:`` and 12 hex
    digits of a hash of the token's subject (or ``jti``).
    """

    tenant: Tenant
    token_id: str


@dataclass(frozen=True)
class ReloadOutcome:
    """What a reload did.

    Attributes:
        reloaded: the file's tenants are now in force.
        error: why the file was not taken (the tenants before stay in
            force); None when it was, or when it had not changed.
    """

    reloaded: bool
    error: str | None = None


class TenantRegistry:
    """The tenants a server knows, found by token.

    Made from a tenants file (``from_file``) or from the one ``--token`` of a
    server without one (``single``).
    """

    def __init__(
        self,
        config: TenantsConfig,
        *,
        path: str | os.PathLike[str] | None = None,
        stamp: FileStamp | None = None,
    ) -> None:
        self._path = None if path is None else os.fspath(path)
        self._state = _state(config)  # swapped as one, so a reader sees one or other
        stamps = None if stamp is None else _stamps_read(config, stamp)
        self._stamp = stamps  # of the files whose tenants are in force
        self._seen = stamps  # of the files last tried, read or not: tried once per change
        self.last_error: str | None = None
        # Called (from the thread that read it) once a changed file is in force: the audit.
        self.on_reload: Callable[[TenantsConfig], None] | None = None

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> TenantRegistry:
        """The tenants of a tenants file.

        Raises:
            ConfigurationError: the file cannot be read or is wrong; at
                start-up there are no tenants before to keep.
        """
        config, stamp = read_tenants(path)
        return cls(config, path=path, stamp=stamp)

    @classmethod
    def of(cls, path: str | os.PathLike[str] | None, token: str | None) -> TenantRegistry:
        """A server's tenants: its tenants file's (``path``), else the one of its ``token``.

        Raises:
            ConfigurationError: the tenants file cannot be read or is wrong.
        """
        if path is not None:
            return cls.from_file(path)
        assert token is not None  # a server has one or the other (ServerConfig)
        return cls.single(token)

    @classmethod
    def single(cls, token: str) -> TenantRegistry:
        """The one tenant, with every scope, of a server started with ``--token`` alone."""
        return cls(single_tenant(token))

    @property
    def config(self) -> TenantsConfig:
        """The tenants in force."""
        return self._state[0]

    def authenticate(self, token: str) -> Identity | None:
        """The tenant whose token ``token`` is, and the token's id; None for no tenant's.

        A token of the file's is looked for first, as without ``[jwt]``; a
        token with a JWT's shape that is none of them is then checked as a
        JWT when the file has a ``[jwt]`` table (why one is refused goes to
        the log, never the token).
        """
        _, index, verifier = self._state  # read once: one file's tenants throughout
        hashed = token_hash(token)
        # A dict finds the candidates by the first 12 hex digits of the hash; the
        # whole hash is then compared in constant time. What the dict's own
        # comparison could leak by its timing is how much of a stored hash's prefix
        # matches the hash of what the caller sent, which brings no one nearer a
        # token that hashes to it.
        for stored, identity in index.get(token_id(hashed), ()):
            if verify_token(token, stored):
                return identity
        if verifier is not None and is_jwt(token):
            found = verifier.verify(token)
            if found is not None:
                return Identity(*found)
        return None

    def reload(self) -> ReloadOutcome:
        """Reads the tenants file again, whether or not it changed (SIGHUP).

        Never raises: a file that does not read, or reads wrong, leaves the
        tenants before in force, and the outcome and ``last_error`` say why.
        """
        if self._path is None:
            return ReloadOutcome(reloaded=False)
        try:
            config, stamp = read_tenants(self._path)
        except ConfigurationError as exc:
            self._seen = self._stamps_now(self._path)
            if str(exc) != self.last_error:  # once per new reason, not once per poll
                log.warning("%s; the tenants read before stay in force", exc)
            self.last_error = str(exc)
            return ReloadOutcome(reloaded=False, error=str(exc))
        self._state = _state(config)
        self._stamp = self._seen = _stamps_read(config, stamp)
        self.last_error = None
        log.info("tenants file %s read: %d tenants", self._path, len(config.tenants))
        if self.on_reload is not None:
            self.on_reload(config)
        return ReloadOutcome(reloaded=True)

    def refresh(self) -> ReloadOutcome:
        """Reads the tenants file again if it, or its ``[jwt]`` keys file, changed since last tried.

        Changed means another file under its name, or another size or
        modification time. A file rewritten in place within the same clock tick
        with the same size can be missed: ``reload`` reads it whatever its stamp.
        The keys file watched is the one the tenants in force name: a new keys
        file named by a tenants file that did not read is tried when either
        file changes again, or on ``reload``.
        """
        if self._path is None or self._stamps_now(self._path) in (self._stamp, self._seen):
            return ReloadOutcome(reloaded=False, error=None)
        return self.reload()

    def _stamps_now(self, path: str) -> _Stamps:
        """The stamps of the tenants file at ``path`` and of the keys file in force, now."""
        jwt = self._state[0].jwt
        return (_stamp_of(path), None if jwt is None else _stamp_of(jwt.keys_file))

    async def watch(self, interval: float = 2.0) -> None:
        """Refreshes every ``interval`` seconds until cancelled (a server's background task).

        The file is read in a thread, so a slow disk never holds up the event
        loop; the tenants are swapped in as one value, so a request sees the
        old ones or the new ones, never a mix.
        """
        if self._path is None:
            return
        while True:
            await asyncio.sleep(interval)
            await asyncio.to_thread(self.refresh)


def _state(config: TenantsConfig) -> _State:
    verifier = None if config.jwt is None else JwtVerifier(config.jwt, config.tenants)
    return (config, _index(config), verifier)


def _stamps_read(config: TenantsConfig, stamp: FileStamp) -> _Stamps:
    """The stamps of the files ``config`` was read from, as they were when read."""
    return (stamp, None if config.jwt is None else config.jwt.keys_stamp)


def _index(config: TenantsConfig) -> _Index:
    index: dict[str, tuple[tuple[str, Identity], ...]] = {}
    for tenant in config.tenants:
        for token in tenant.tokens:
            key = token_id(token.hash)
            index[key] = (*index.get(key, ()), (token.hash, Identity(tenant, token.id)))
    return index


def _stamp_of(path: str) -> FileStamp | None:
    try:
        info = os.stat(path)
    except OSError:
        return None  # gone, or not ours to read: tried again once it is back
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)
