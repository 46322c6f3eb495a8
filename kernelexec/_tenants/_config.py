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

import difflib
import math
import os
import re
import stat
import sys
from collections.abc import Iterable, Mapping
from typing import Any

from .._exceptions import ConfigurationError
from ._jwt import ALGORITHMS, parse_keys, require_jwt
from ._models import (
    ALLOWABLE,
    SCOPES,
    JwtSettings,
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
_JWT_KEYS = ("keys", "audience", "issuer", "tenant_claim", "algorithms", "leeway_seconds")
# Clocks a few seconds apart must not refuse a fresh token; minutes of leeway
# would keep an expired one working.
_DEFAULT_LEEWAY = 30.0
_MAX_LEEWAY = 300.0
_KEYS_FILE_BYTES = 1 << 20  # a JWKS of a few dozen keys is some kilobytes

# What changes when the file does: its device and inode (an editor's or
# Kubernetes' replace-by-rename), size and modification time.
FileStamp = tuple[int, int, int, int]


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
    data, stamp = _read_guarded(
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
        data = _toml_loads(text)
    except ValueError as exc:  # TOMLDecodeError; its message says where, not what is there
        raise ConfigurationError(f"tenants file {source} is not valid TOML: {exc}") from None
    _known_keys(data, ("tenants", "jwt"), f"tenants file {source}", "")
    tenants = data.get("tenants")
    if not isinstance(tenants, dict) or not tenants:
        raise ConfigurationError(
            f"tenants file {source} declares no tenant: add a [tenants.NAME] table "
            "with its scopes and tokens"
        )
    found = tuple(_tenant(source, name, table) for name, table in tenants.items())
    _unique_tokens(source, found)
    jwt = _jwt_settings(source, data["jwt"]) if "jwt" in data else None
    return TenantsConfig(tenants=found, source=source, jwt=jwt)


def _tenant(source: str, name: str, table: Any) -> Tenant:
    where = f"tenants file {source}, tenant {name!r}"
    if not is_tenant_name(name):
        raise ConfigurationError(
            f"tenants file {source}: the tenant name {_shown(name)} is not one: use {NAME_RULE}"
        )
    if not isinstance(table, dict):
        raise ConfigurationError(f"{where}: write it as a table, [tenants.{name}]")
    _known_keys(table, _TENANT_KEYS, where, "")
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
                f"{where}, key {key}: unknown {kind} {_shown(item)}{_nearest(item, known)}: "
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
    _known_keys(entry, _TOKEN_KEYS, where, f"{key}.")
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
            f"{where}, key {key}.id: {_shown(ident)} is not a token id: use 1 to 64 letters, "
            "digits, . - and _, or leave it out to have it made from the hash"
        )
    return TenantToken(id=ident, hash=hashed)


def _quotas(where: str, table: Any) -> Quotas:
    if not isinstance(table, dict):
        raise ConfigurationError(f"{where}, key quotas: write it as a table, quotas = {{ ... }}")
    _known_keys(table, _WHOLE_QUOTAS + _SECONDS_QUOTAS, where, "quotas.")

    def whole(key: str) -> int | None:
        if key not in table:
            return None
        return int(_positive(where, f"quotas.{key}", table[key], whole=True))

    def seconds(key: str) -> float | None:
        return float(_positive(where, f"quotas.{key}", table[key])) if key in table else None

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
    _known_keys(table, _RATE_KEYS, where, "rate_limit.")
    for key in _RATE_KEYS:
        if key not in table:
            raise ConfigurationError(
                f"{where}, key rate_limit.{key} is missing: "
                "rate_limit = { requests = 120, per_seconds = 60 }"
            )
    return RateLimit(
        requests=int(_positive(where, "rate_limit.requests", table["requests"], whole=True)),
        per_seconds=float(_positive(where, "rate_limit.per_seconds", table["per_seconds"])),
    )


def _jwt_settings(source: str, table: Any) -> JwtSettings:
    where = f"tenants file {source}"
    if not isinstance(table, dict):
        raise ConfigurationError(
            f'{where}, key jwt: write it as a table, [jwt], with keys = "..." and audience = "..."'
        )
    _known_keys(table, _JWT_KEYS, where, "jwt.")
    require_jwt(f"{where}, [jwt]")
    for key, what in (
        ("keys", "the file of your identity provider's public keys (PEM or JWKS)"),
        ("audience", "the aud your identity provider writes in tokens meant for this server"),
    ):
        if key not in table:
            raise ConfigurationError(f'{where}, key jwt.{key} is missing: {key} = "...", {what}')
    named = _text(where, "keys", table["keys"])
    audience = table["audience"]
    if isinstance(audience, str):
        audience = [audience]
    if not isinstance(audience, list) or not audience:
        raise ConfigurationError(f'{where}, key jwt.audience: write a string, "kernelexec"')
    audiences = tuple(_text(where, "audience", item) for item in audience)
    issuer = _text(where, "issuer", table["issuer"]) if "issuer" in table else None
    claim = _text(where, "tenant_claim", table.get("tenant_claim", "tenant"))
    algorithms = _algorithms(where, table["algorithms"]) if "algorithms" in table else None
    leeway = table.get("leeway_seconds", _DEFAULT_LEEWAY)
    if (
        isinstance(leeway, bool)
        or not isinstance(leeway, (int, float))
        or not 0 <= leeway <= _MAX_LEEWAY
    ):
        raise ConfigurationError(
            f"{where}, key jwt.leeway_seconds: write a number of seconds from 0 to "
            f"{_MAX_LEEWAY:g}, not {_shown(leeway)}"
        )
    path = os.path.join(os.path.dirname(source), named)  # an absolute `named` stays itself
    shown = f"{where}, key jwt.keys: {path}"
    data, stamp = _read_guarded(
        path,
        shown,
        not_file="name a file of PEM public keys or a JWKS document",
        writable="who could add a key and sign tokens for any tenant",
        unreadable="correct the path (one that is not absolute is read from the tenants "
        "file's folder), or make the file readable by the server's user",
        limit=_KEYS_FILE_BYTES,
    )
    keys = parse_keys(data, where=shown, algorithms=algorithms)
    return JwtSettings(
        keys_file=path,
        keys=keys,
        audience=audiences,
        issuer=issuer,
        tenant_claim=claim,
        algorithms=tuple(a for a in ALGORITHMS if any(a in key.algorithms for key in keys)),
        leeway_seconds=float(leeway),
        keys_stamp=stamp,
    )


def _text(where: str, key: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigurationError(f"{where}, key jwt.{key}: write a string, not {_shown(value)}")
    return value


def _algorithms(where: str, value: Any) -> tuple[str, ...]:
    key = "key jwt.algorithms"
    if not isinstance(value, list) or not value or not all(isinstance(a, str) for a in value):
        raise ConfigurationError(f'{where}, {key}: write a list of strings, ["RS256"]')
    for name in value:
        if name.lower() == "none":
            raise ConfigurationError(
                f"{where}, {key}: none means a token without a signature, which anyone can "
                "make: remove it"
            )
        if name.upper().startswith("HS"):
            raise ConfigurationError(
                f"{where}, {key}: {name} needs a shared secret, and only public keys are "
                "accepted (whoever read a secret could sign for any tenant): use RS256, ES256 "
                "or EdDSA"
            )
        if name not in ALGORITHMS:
            raise ConfigurationError(
                f"{where}, {key}: unknown algorithm {_shown(name)}{_nearest(name, ALGORITHMS)}: "
                f"the algorithms are {', '.join(ALGORITHMS)}"
            )
    return tuple(value)


def _read_guarded(
    path: str,
    name: str,
    *,
    not_file: str,
    writable: str,
    unreadable: str,
    limit: int | None = None,
) -> tuple[bytes, FileStamp]:
    """A file's bytes and stamp, refused if it is not a regular file or anyone may write it.

    The stamp is of the file that was read (its descriptor's), not looked up
    again by name. ``name`` is how messages begin; the other words say what
    to do when the file is not a file, may be written by anyone (after
    "who..."), or cannot be read.
    """
    try:
        # Without O_NONBLOCK a FIFO given by mistake would hold the open until a writer came.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise ConfigurationError(f"{name} is not a file: {not_file}")
            if info.st_mode & stat.S_IWOTH:
                raise ConfigurationError(
                    f"{name} may be written by any user, {writable}: chmod o-w {path}"
                )
            with open(fd, "rb", closefd=False) as file:
                data = file.read() if limit is None else file.read(limit + 1)
        finally:
            os.close(fd)
    except OSError as exc:
        raise ConfigurationError(
            f"{name} cannot be read ({exc.strerror or exc}): {unreadable}"
        ) from None
    if limit is not None and len(data) > limit:
        raise ConfigurationError(f"{name} is over {limit} bytes: {not_file}")
    return data, (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)


def _positive(where: str, key: str, value: Any, *, whole: bool = False) -> int | float:
    # bool is an int to Python: `true` for a quota is a mistake, not 1. TOML has inf
    # and nan too, and a quota of either would be no quota: leaving it out says that.
    if (
        isinstance(value, bool)
        or not isinstance(value, int if whole else (int, float))
        or not (math.isfinite(value) and value > 0)
    ):
        kind = "a whole number" if whole else "a number"
        raise ConfigurationError(f"{where}, key {key}: write {kind} above 0, not {_shown(value)}")
    return value


def _known_keys(table: Mapping[str, Any], known: tuple[str, ...], where: str, prefix: str) -> None:
    for key in table:
        if key not in known:
            raise ConfigurationError(
                f"{where}: unknown key {prefix}{key}{_nearest(key, known)}: "
                f"the keys there are {', '.join(known)}"
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


def _toml_loads(text: str) -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - tomllib came with Python 3.11; tomli is its backport
        try:
            import tomli as tomllib
        except ModuleNotFoundError:
            raise ConfigurationError(
                "reading a tenants file needs Python 3.11 or later, or the tomli package "
                "(pip install tomli)"
            ) from None
    return tomllib.loads(text)


def _nearest(given: str, known: tuple[str, ...]) -> str:
    close = difflib.get_close_matches(given, known, n=1)
    return f" (did you mean {close[0]}?)" if close else ""


def _shown(value: Any) -> str:
    """A value for an error message, cut short: a message is one line."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
