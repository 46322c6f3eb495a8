"""The tenants file read into a ``TenantsConfig``, or the one tenant of ``--token``.

The file is TOML, read with the standard library, one table per tenant::

    [tenants.alice]
    scopes = ["sessions", "execute", "files:read"]
    allow = ["packages"]
    quotas = { live_sessions = 4, cpu_seconds_per_hour = 600 }
    rate_limit = { requests = 120, per_seconds = 60 }

    [[tenants.alice.tokens]]
    id = "3f9a1c2b7d4e"
    hash = "sha256:3f9a1c2b7d4e..."

An optional ``[jwt]`` table takes JWTs from the operator's identity provider
as well (``_jwt.py``): the keys file it names is read with the tenants file,
and a tenant may then have no tokens of its own.

Whatever is wrong in it is a ``ConfigurationError`` naming the file, the
tenant and the key, and what to write instead; a key the format does not
have is wrong too, since a misspelt quota would otherwise be no quota. No
message repeats a hash's value: a token pasted there by mistake stays out
of the logs.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from typing import Any

from .._exceptions import ConfigurationError
from ._checks import FileStamp, known_keys, nearest, positive, read_guarded, shown, toml_loads
from ._jwt_config import jwt_settings
from ._models import (
    ALLOWABLE,
    SCOPES,
    Quotas,
    RateLimit,
    Tenant,
    TenantsConfig,
    TenantToken,
)
from ._tokens import TOKEN_PREFIX, is_token_hash, token_hash, token_id

__all__ = [
    "DEFAULT_TENANT",
    "NAME_RULE",
    "FileStamp",
    "is_tenant_name",
    "parse_tenants",
    "read_tenants",
    "single_tenant",
]

DEFAULT_TENANT = "default"
# A name is a bare TOML key, so `[tenants.NAME]` needs no quotes, and a name in a
# log line or a URL needs no escaping either.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
NAME_RULE = "1 to 64 letters, digits, - and _, starting with a letter or digit"
_TOKEN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_TENANT_KEYS = ("scopes", "tokens", "quotas", "allow", "rate_limit")
_TOKEN_KEYS = ("id", "hash")
_WHOLE_QUOTAS = ("live_sessions", "queued_executions", "work_dir_bytes")
_SECONDS_QUOTAS = ("cpu_seconds_per_hour", "session_lifetime_seconds")
_RATE_KEYS = ("requests", "per_seconds")


def is_tenant_name(name: str) -> bool:
    """Whether ``name`` may name a tenant (``NAME_RULE``)."""
    return _NAME.fullmatch(name) is not None


def single_tenant(token: str) -> TenantsConfig:
    """The one tenant of a server started with ``--token`` alone: every scope, no quota.

    Its session options are the server's ``--allow-*`` flags' (``allow`` None),
    so a server without a tenants file does what it did before tenants.
    """
    hashed = token_hash(token)
    tenant = Tenant(
        name=DEFAULT_TENANT,
        scopes=frozenset(SCOPES),
        tokens=(TenantToken(id=token_id(hashed), hash=hashed),),
        allow=None,
    )
    return TenantsConfig(tenants=(tenant,))


def read_tenants(path: str | os.PathLike[str]) -> tuple[TenantsConfig, FileStamp]:
    """Reads a tenants file, and the stamp that tells when it has changed since.

    The stamp is taken from the file that was read (not looked up again by
    name), so a file replaced between the two is read again next time rather
    than missed.

    Raises:
        ConfigurationError: the file cannot be read, anyone may write to it,
            or what it says is wrong; the message names the fix.
    """
    source = os.fspath(path)
    data, stamp = read_guarded(
        source,
        f"tenants file {source}",
        not_file="pass a TOML file",
        # Whoever may write it may give themselves `admin`.
        writable="who could give themselves every scope",
        unreadable="pass another --tenants, or make this one readable by the server's user",
    )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigurationError(
            f"tenants file {source} is not UTF-8 (byte {exc.start}): save it as UTF-8"
        ) from None
    return parse_tenants(text, source=source), stamp


def parse_tenants(text: str, *, source: str = "<tenants>") -> TenantsConfig:
    """Reads the tenants a tenants file's ``text`` declares; ``source`` names it in errors.

    A ``[jwt]`` table's keys file is read too, from ``source``'s folder
    when its path is not absolute (the working directory, for a ``source``
    that is no path).

    Raises:
        ConfigurationError: the text is not TOML or not a tenants file, or
            its ``[jwt]`` table's keys file cannot be read or holds no key.
    """
    try:
        data = toml_loads(text)
    except ValueError as exc:  # TOMLDecodeError; its message says where, not what is there
        raise ConfigurationError(f"tenants file {source} is not valid TOML: {exc}") from None
    known_keys(data, ("tenants", "jwt"), f"tenants file {source}", "")
    tenants = data.get("tenants")
    if not isinstance(tenants, dict) or not tenants:
        raise ConfigurationError(
            f"tenants file {source} declares no tenant: add a [tenants.NAME] table "
            "with its scopes and tokens"
        )
    found = tuple(_tenant(source, name, table) for name, table in tenants.items())
    _unique_tokens(source, found)
    jwt = jwt_settings(source, data["jwt"]) if "jwt" in data else None
    return TenantsConfig(tenants=found, source=source, jwt=jwt)


def _tenant(source: str, name: str, table: Any) -> Tenant:
    where = f"tenants file {source}, tenant {name!r}"
    if not is_tenant_name(name):
        raise ConfigurationError(
            f"tenants file {source}: the tenant name {shown(name)} is not one: use {NAME_RULE}"
        )
    if not isinstance(table, dict):
        raise ConfigurationError(f"{where}: write it as a table, [tenants.{name}]")
    known_keys(table, _TENANT_KEYS, where, "")
    if "scopes" not in table:
        raise ConfigurationError(
            f"{where}: key scopes is missing: list what its tokens may do, from {', '.join(SCOPES)}"
        )
    scopes = _names(where, "scopes", table["scopes"], SCOPES, "scope")
    if not scopes:
        raise ConfigurationError(
            f"{where}, key scopes: the list is empty, so its tokens could do nothing: "
            "name at least one scope, or remove the tenant"
        )
    allow = _names(where, "allow", table.get("allow", []), ALLOWABLE, "session option")
    tokens = table.get("tokens", [])
    if not isinstance(tokens, list):
        raise ConfigurationError(
            f"{where}, key tokens: write each token as a [[tenants.{name}.tokens]] table"
        )
    return Tenant(
        name=name,
        scopes=frozenset(scopes),
        tokens=tuple(_token(where, i, entry) for i, entry in enumerate(tokens)),
        quotas=_quotas(where, table.get("quotas", {})),
        allow=frozenset(allow),
        rate_limit=_rate_limit(where, table["rate_limit"]) if "rate_limit" in table else None,
    )


def _names(where: str, key: str, value: Any, known: tuple[str, ...], kind: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ConfigurationError(f'{where}, key {key}: write a list of strings, ["{known[0]}"]')
    for item in value:
        if item not in known:
            raise ConfigurationError(
                f"{where}, key {key}: unknown {kind} {shown(item)}{nearest(item, known)}: "
                f"the {kind}s are {', '.join(known)}"
            )
    return tuple(value)


def _token(where: str, index: int, entry: Any) -> TenantToken:
    key = f"tokens[{index}]"
    if not isinstance(entry, dict):
        raise ConfigurationError(
            f'{where}, key {key}: write it as a table, {{ hash = "sha256:..." }}'
        )
    if "token" in entry:
        raise ConfigurationError(
            f"{where}, key {key}.token: the file holds a token's hash, never the token: "
            "replace it with the hash line kernelexec token printed, and make a new token if "
            "this file was ever shared"
        )
    known_keys(entry, _TOKEN_KEYS, where, f"{key}.")
    hashed = entry.get("hash")
    if not isinstance(hashed, str):
        raise ConfigurationError(
            f'{where}, key {key}.hash is missing: add hash = "sha256:..." as kernelexec token '
            "printed it"
        )
    if hashed.startswith(TOKEN_PREFIX):
        raise ConfigurationError(
            f"{where}, key {key}.hash holds a token, not its hash: put the hash kernelexec token "
            "printed there, and make a new token if this file was ever shared"
        )
    if not is_token_hash(hashed.lower()):
        raise ConfigurationError(
            f"{where}, key {key}.hash is not a token's hash: write sha256: and 64 hex digits, "
            "as kernelexec token prints them"
        )
    hashed = hashed.lower()
    ident = entry.get("id", token_id(hashed))
    if not isinstance(ident, str) or not _TOKEN_ID.fullmatch(ident):
        raise ConfigurationError(
            f"{where}, key {key}.id: {shown(ident)} is not a token id: use 1 to 64 letters, "
            "digits, . - and _, or leave it out to have it made from the hash"
        )
    return TenantToken(id=ident, hash=hashed)


def _quotas(where: str, table: Any) -> Quotas:
    if not isinstance(table, dict):
        raise ConfigurationError(f"{where}, key quotas: write it as a table, quotas = {{ ... }}")
    known_keys(table, _WHOLE_QUOTAS + _SECONDS_QUOTAS, where, "quotas.")

    def whole(key: str) -> int | None:
        if key not in table:
            return None
        return int(positive(where, f"quotas.{key}", table[key], whole=True))

    def seconds(key: str) -> float | None:
        return float(positive(where, f"quotas.{key}", table[key])) if key in table else None

    return Quotas(
        live_sessions=whole("live_sessions"),
        queued_executions=whole("queued_executions"),
        cpu_seconds_per_hour=seconds("cpu_seconds_per_hour"),
        work_dir_bytes=whole("work_dir_bytes"),
        session_lifetime_seconds=seconds("session_lifetime_seconds"),
    )


def _rate_limit(where: str, table: Any) -> RateLimit:
    if not isinstance(table, dict):
        raise ConfigurationError(
            f"{where}, key rate_limit: write it as a table, "
            "rate_limit = { requests = 120, per_seconds = 60 }"
        )
    known_keys(table, _RATE_KEYS, where, "rate_limit.")
    for key in _RATE_KEYS:
        if key not in table:
            raise ConfigurationError(
                f"{where}, key rate_limit.{key} is missing: "
                "rate_limit = { requests = 120, per_seconds = 60 }"
            )
    return RateLimit(
        requests=int(positive(where, "rate_limit.requests", table["requests"], whole=True)),
        per_seconds=float(positive(where, "rate_limit.per_seconds", table["per_seconds"])),
    )


def _unique_tokens(source: str, tenants: Iterable[Tenant]) -> None:
    """No hash or id twice in the file: a token is one tenant's, and an id names one token."""
    hashes: dict[str, str] = {}
    ids: dict[str, str] = {}
    for tenant in tenants:
        for token in tenant.tokens:
            if token.hash in hashes:
                raise ConfigurationError(
                    f"tenants file {source}: tenants {hashes[token.hash]!r} and {tenant.name!r} "
                    f"hold the same token hash (id {token.id}): a token belongs to one tenant; "
                    "make each its own with kernelexec token"
                )
            if token.id in ids:
                raise ConfigurationError(
                    f"tenants file {source}: the token id {token.id!r} is given twice (tenants "
                    f"{ids[token.id]!r} and {tenant.name!r}): give each token its own id"
                )
            hashes[token.hash] = ids[token.id] = tenant.name
