"""The tenants file's ``[jwt]`` table: which identity provider's JWTs the server takes.

Read with the tenants file (``_config.py``); the keys file it names is read
at the same time, so a reload takes a rotated key too. The tokens themselves
are checked by ``_jwt.py``.
"""

from __future__ import annotations

import os
from typing import Any

from .._exceptions import ConfigurationError
from ._checks import known_keys, nearest, read_guarded, shown
from ._jwt import ALGORITHMS, parse_keys, require_jwt
from ._models import JwtSettings

__all__ = ["jwt_settings"]

# Clocks a few seconds apart must not refuse a fresh token; minutes of leeway
# would keep an expired one working.
_JWT_KEYS = ("keys", "audience", "issuer", "tenant_claim", "algorithms", "leeway_seconds")
_DEFAULT_LEEWAY = 30.0
_MAX_LEEWAY = 300.0
_KEYS_FILE_BYTES = 1 << 20  # a JWKS of a few dozen keys is some kilobytes


def jwt_settings(source: str, table: Any) -> JwtSettings:
    where = f"tenants file {source}"
    if not isinstance(table, dict):
        raise ConfigurationError(
            f'{where}, key jwt: write it as a table, [jwt], with keys = "..." and audience = "..."'
        )
    known_keys(table, _JWT_KEYS, where, "jwt.")
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
            f"{_MAX_LEEWAY:g}, not {shown(leeway)}"
        )
    path = os.path.join(os.path.dirname(source), named)  # an absolute `named` stays itself
    label = f"{where}, key jwt.keys: {path}"
    data, stamp = read_guarded(
        path,
        label,
        not_file="name a file of PEM public keys or a JWKS document",
        writable="who could add a key and sign tokens for any tenant",
        unreadable="correct the path (one that is not absolute is read from the tenants "
        "file's folder), or make the file readable by the server's user",
        limit=_KEYS_FILE_BYTES,
    )
    keys = parse_keys(data, where=label, algorithms=algorithms)
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
        raise ConfigurationError(f"{where}, key jwt.{key}: write a string, not {shown(value)}")
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
                f"{where}, {key}: unknown algorithm {shown(name)}{nearest(name, ALGORITHMS)}: "
                f"the algorithms are {', '.join(ALGORITHMS)}"
            )
    return tuple(value)
