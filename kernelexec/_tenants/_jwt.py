"""JWT bearer tokens from an operator's identity provider, checked against keys read from a file.

A tenants file's ``[jwt]`` table (read by ``_config.py``) names a file of
public keys, the audience (and maybe the issuer) of the tokens meant for
this server, and the claim that names a tenant. ``parse_keys`` turns that
file's bytes into ``JwtKey`` values; ``JwtVerifier.verify`` answers a token
with the tenant it names, or None.

Why so little is accepted:

- Public keys only (PEM public keys or certificates, or a JWKS document), and
  asymmetric algorithms only. An HMAC secret is refused, not supported:
  whoever could read it could sign a token for any tenant, ``admin``
  included, which a tenants file avoids by holding only hashes; and a
  verifier holding secrets beside public keys is open to algorithm
  confusion (a token signed with HS256, a public key's PEM bytes its
  secret). With public keys and no HMAC algorithm allowed, neither happens.
- A key verifies only with the algorithms its type fits, within the
  ``[jwt]`` table's list: the key, not the token's header, says how it
  verifies. ``none`` is never one of them.
- Keys come from the file alone: a token's ``jku``, ``x5u``, ``jwk`` and
  ``x5c`` headers are never followed nor used, and nothing is fetched.
- ``exp`` and ``aud`` are required, ``iss`` when the table names an issuer;
  a header listing ``crit`` extensions is refused, none being understood.

PyJWT and cryptography (the ``jwt`` extra) are imported only for a file that
has a ``[jwt]`` table, so kernelexec works without them.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from .._exceptions import ConfigurationError
from .._extras import install_line
from ._models import JwtKey, JwtSettings, Tenant
from ._tokens import TOKEN_PREFIX

__all__ = ["ALGORITHMS", "JwtVerifier", "is_jwt", "parse_keys", "require_jwt"]

log = logging.getLogger("kernelexec.tenants")

_RSA = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512")
# An EC key's curve fixes its one algorithm (RFC 7518, section 3.4).
_CURVES = {"secp256r1": "ES256", "secp384r1": "ES384", "secp521r1": "ES512"}
ALGORITHMS = (*_RSA, *_CURVES.values(), "EdDSA")
_MIN_RSA_BITS = 2048
# A bearer header is a few kilobytes at most: a longer one is not read at all.
_MAX_TOKEN = 16_384
_SHAPE = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*")
_PEM_BLOCK = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----\r?\n(.*?)-----END \1-----", re.S)
_ID_DIGITS = 12  # as a kx_ token's id: short for a log line, and no two subjects share one


def require_jwt(where: str) -> None:
    """Checks that PyJWT and cryptography can be imported; ``where`` names the setting.

    Raises:
        ConfigurationError: one is missing; the message names the extra.
    """
    try:
        from jwt.algorithms import has_crypto
    except ImportError as exc:
        missing = exc.name or "jwt"
    else:
        if has_crypto:
            return
        missing = "cryptography"
    raise ConfigurationError(
        f"{where}: JWT bearer tokens need the jwt extra (no module named {missing!r}): "
        f"{install_line('jwt')}"
    )


def is_jwt(token: str) -> bool:
    """Whether ``token`` has a JWT's shape: three base64url parts, not a ``kx_`` token."""
    return (
        len(token) <= _MAX_TOKEN
        and not token.startswith(TOKEN_PREFIX)
        and _SHAPE.fullmatch(token) is not None
    )


def parse_keys(
    data: bytes, *, where: str, algorithms: Iterable[str] | None = None
) -> tuple[JwtKey, ...]:
    """The public keys a keys file holds, each with the algorithms it may verify.

    Args:
        data: the file's bytes: PEM blocks (public keys, certificates) or a
            JWKS document (``{"keys": [...]}``, or one JWK).
        where: how errors name the file: the tenants file, the key, the path.
        algorithms: the ``[jwt]`` table's list; None for all that fit the keys.

    Raises:
        ConfigurationError: the file holds a private key or a secret, a key
            of a type or size not accepted, or no key that fits ``algorithms``.
    """
    try:
        text = data.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise ConfigurationError(
            f"{where} is not text: write PEM public keys or a JWKS document (JSON) there"
        ) from None
    if not text:
        raise ConfigurationError(
            f"{where} is empty: put your identity provider's public keys there, as PEM or "
            "a JWKS document"
        )
    if text.startswith(("{", "[")):
        keys = _jwks(where, text)
    elif "-----BEGIN " in text:
        keys = _pem(where, text)
    else:
        raise ConfigurationError(
            f"{where} holds neither PEM public keys nor a JWKS document: write one of those "
            "(a shared HMAC secret is not accepted: whoever read it could sign for any tenant)"
        )
    if algorithms is None:
        return keys
    allowed = frozenset(algorithms)
    kept = tuple(replace(key, algorithms=key.algorithms & allowed) for key in keys)
    kept = tuple(key for key in kept if key.algorithms)
    if not kept:
        raise ConfigurationError(
            f"{where}: none of its keys fits jwt.algorithms ({', '.join(sorted(allowed))}): "
            "list algorithms its keys fit, or leave jwt.algorithms out"
        )
    return kept


class JwtVerifier:
    """Checks JWTs against a ``[jwt]`` table's keys, and finds the tenant each names.

    Made again whenever the tenants file is read, from that file's settings
    and tenants, so a verifier never mixes two files.
    """

    def __init__(self, settings: JwtSettings, tenants: Iterable[Tenant]) -> None:
        self.settings = settings
        self._tenants = {tenant.name: tenant for tenant in tenants}
        self._algorithms = frozenset(settings.algorithms)
        required = ["exp", "aud", *(["iss"] if settings.issuer is not None else [])]
        self._options: Any = {"require": required}

    def verify(self, token: str) -> tuple[Tenant, str] | None:
        """The tenant ``token`` names, and an id for the logs; None when it is refused.

        The tenant's scopes are narrowed by the token's ``scope`` and ``scp``
        claims, when it has them (``_narrowed``); a copy is returned then,
        the tenant in force otherwise. The id is ``jwt:`` and 12 hex digits
        (``_token_id``), never the token.

        Never raises. Why a token was refused is logged, never the token: at
        debug level before its signature verified (anyone may send such
        tokens, and often), at info level after (a token the identity
        provider signed and this server refuses is for an operator to see).
        """
        import jwt

        if not is_jwt(token):
            _refused(logging.DEBUG, "it does not have a JWT's shape")
            return None
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as exc:
            _refused(logging.DEBUG, f"it cannot be decoded ({exc})")
            return None
        alg = header.get("alg")
        if not isinstance(alg, str) or alg not in self._algorithms:
            accepted = ", ".join(self.settings.algorithms)
            _refused(logging.DEBUG, f"its alg {_shown(alg)} is not one of {accepted}")
            return None
        if "crit" in header:
            _refused(logging.DEBUG, "its header lists crit extensions, which are not understood")
            return None
        kid = header.get("kid")
        keys = self._keys_for(kid if isinstance(kid, str) else None, alg)
        if not keys:
            named = "" if kid is None else f" with kid {_shown(kid)}"
            _refused(logging.DEBUG, f"no key{named} verifies {alg}")
            return None
        claims = None
        for key in keys:
            try:
                claims = jwt.decode(
                    token,
                    key.key,
                    algorithms=[alg],
                    audience=list(self.settings.audience),
                    issuer=self.settings.issuer,
                    leeway=self.settings.leeway_seconds,
                    options=self._options,
                )
            except jwt.InvalidSignatureError:
                continue
            except jwt.PyJWTError as exc:
                # PyJWT checks the signature first: a claim's error means it verified.
                _refused(logging.INFO if _is_claims_error(exc) else logging.DEBUG, str(exc))
                return None
            break
        if claims is None:
            _refused(logging.DEBUG, f"its signature verifies with no key for {alg} ({len(keys)})")
            return None
        return self._tenant_of(claims, token)

    def _keys_for(self, kid: str | None, alg: str) -> list[JwtKey]:
        """The keys to try: a named key id's, else the keys without one; every key for no kid."""
        fitting = [key for key in self.settings.keys if alg in key.algorithms]
        if kid is None:
            return fitting
        return [key for key in fitting if key.kid == kid] or [
            key for key in fitting if key.kid is None
        ]

    def _tenant_of(self, claims: Mapping[str, Any], token: str) -> tuple[Tenant, str] | None:
        claim = self.settings.tenant_claim
        name = claims.get(claim)
        tenant = self._tenants.get(name) if isinstance(name, str) else None
        if tenant is None:
            _refused(logging.INFO, f"its claim {claim} names no tenant of the file: {_shown(name)}")
            return None
        scopes = _narrowed(tenant.scopes, claims)
        if not scopes:
            _refused(
                logging.INFO,
                f"its scope claims leave tenant {tenant.name!r} none of its scopes",
            )
            return None
        if scopes != tenant.scopes:
            tenant = replace(tenant, scopes=scopes)
        return tenant, _token_id(claims, token)


def _narrowed(scopes: frozenset[str], claims: Mapping[str, Any]) -> frozenset[str]:
    """``scopes``, less those that the token's ``scope`` or ``scp`` claim leaves out.

    A token that says what it is for gets no more than that, within its
    tenant's scopes, and never more than them. ``scope`` is the OAuth form
    (RFC 9068: a string, names parted by spaces), ``scp`` the form some
    providers use (a list, or a string); each present narrows. Names that
    are not kernelexec's scopes (``openid``, ``email``) are no matter, and a
    claim of another type narrows to nothing.
    """
    for claim in ("scope", "scp"):
        if claim not in claims:
            continue
        value = claims[claim]
        if isinstance(value, str):
            named = frozenset(value.split())
        elif isinstance(value, list) and all(isinstance(item, str) for item in value):
            named = frozenset(value)
        else:
            named = frozenset()
        scopes &= named
    return scopes


def _token_id(claims: Mapping[str, Any], token: str) -> str:
    """``jwt:`` and 12 hex digits of a hash of who the token is for.

    Its subject (``iss`` and ``sub``) when it names one: like a ``kx_``
    token's id, that stays the same from request to request, and across the
    identity provider's renewals of the token. Else its ``jti``, else its
    signature: never anything a log reader could send as a token.
    """
    issuer = claims.get("iss") if isinstance(claims.get("iss"), str) else ""
    subject, jti = claims.get("sub"), claims.get("jti")
    if isinstance(subject, str) and subject:
        basis = f"sub\0{issuer}\0{subject}"
    elif isinstance(jti, str) and jti:
        basis = f"jti\0{issuer}\0{jti}"
    else:
        basis = "sig\0" + token.rpartition(".")[2]
    # A JSON string may hold a lone surrogate, which strict UTF-8 cannot encode.
    digest = hashlib.sha256(basis.encode("utf-8", "surrogatepass")).hexdigest()
    return "jwt:" + digest[:_ID_DIGITS]


def _is_claims_error(exc: Exception) -> bool:
    import jwt

    return isinstance(
        exc,
        (
            jwt.ExpiredSignatureError,
            jwt.ImmatureSignatureError,
            jwt.InvalidAudienceError,
            jwt.InvalidIssuerError,
            jwt.InvalidIssuedAtError,
            jwt.MissingRequiredClaimError,
        ),
    )


def _refused(level: int, reason: str) -> None:
    log.log(level, "JWT refused: %s", reason)


# -- the keys file


def _pem(where: str, text: str) -> tuple[JwtKey, ...]:
    from cryptography import x509
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives.serialization import load_pem_public_key

    blocks = _PEM_BLOCK.findall(text)
    if not blocks:
        raise ConfigurationError(
            f"{where} holds no whole PEM block: copy the keys again, BEGIN and END lines included"
        )
    keys = []
    for number, (label, body) in enumerate(blocks, 1):
        block = f"{where}, PEM block {number}"
        if "PRIVATE" in label:
            raise ConfigurationError(
                f"{block} is a private key: keep only its public key there "
                "(openssl pkey -in KEY -pubout), and make a new key if this file was ever shared"
            )
        if label not in ("PUBLIC KEY", "RSA PUBLIC KEY", "CERTIFICATE"):
            raise ConfigurationError(
                f"{block} is a {label}: write public keys (BEGIN PUBLIC KEY) or certificates"
            )
        pem = f"-----BEGIN {label}-----\n{body}-----END {label}-----\n".encode()
        try:
            if label == "CERTIFICATE":
                key: Any = x509.load_pem_x509_certificate(pem).public_key()
            else:
                key = load_pem_public_key(pem)
        except (ValueError, UnsupportedAlgorithm):
            raise ConfigurationError(
                f"{block} cannot be read as a {label.lower()}: copy it again from your "
                "identity provider"
            ) from None
        keys.append(JwtKey(kid=None, algorithms=_fitting(block, key), key=key))
    return tuple(keys)


def _jwks(where: str, text: str) -> tuple[JwtKey, ...]:
    try:
        document = json.loads(text)
    except ValueError as exc:  # its message says where, never what is there
        raise ConfigurationError(f"{where} is not valid JSON: {exc}") from None
    if isinstance(document, dict) and "keys" in document:
        entries = document["keys"]
    elif isinstance(document, dict) and "kty" in document:
        entries = [document]  # one JWK on its own
    else:
        raise ConfigurationError(
            f'{where} is JSON but not a JWKS document: write {{"keys": [...]}}, as your '
            "identity provider publishes it"
        )
    if not isinstance(entries, list):
        raise ConfigurationError(f'{where}: write its "keys" as a list of JWKs')
    keys = [_jwk(f"{where}, keys[{index}]", entry) for index, entry in enumerate(entries)]
    found = tuple(key for key in keys if key is not None)
    if not found:
        raise ConfigurationError(
            f'{where} holds no signing key (those with a "use" other than "sig" are left '
            "out): copy the JWKS document your identity provider signs tokens with"
        )
    return found


def _jwk(where: str, entry: Any) -> JwtKey | None:
    """One JWK of a JWKS document; None for one that is not for signatures (encryption keys)."""
    from jwt import PyJWTError
    from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm

    if not isinstance(entry, dict):
        raise ConfigurationError(f"{where}: write each key as a JSON object, a JWK")
    kid = entry.get("kid")
    if kid is not None and not isinstance(kid, str):
        raise ConfigurationError(f"{where}: its kid {_shown(kid)} is not a string: write one")
    if kid:
        where = f"{where} (kid {_shown(kid)})"
    operations = entry.get("key_ops")
    if entry.get("use", "sig") != "sig" or (
        isinstance(operations, list) and "verify" not in operations
    ):
        return None
    kty = entry.get("kty")
    if kty == "oct":
        raise ConfigurationError(
            f"{where} is a shared secret (kty oct): only public keys are accepted, since "
            "whoever read a secret could sign tokens for any tenant"
        )
    if "d" in entry:
        raise ConfigurationError(
            f"{where} holds a private key (d): keep only its public part there, and make a "
            "new key if this file was ever shared"
        )
    loaders: dict[Any, Any] = {"RSA": RSAAlgorithm, "EC": ECAlgorithm, "OKP": OKPAlgorithm}
    if kty not in loaders:
        raise ConfigurationError(
            f"{where}: kty {_shown(kty)} is not accepted: use RSA, EC or OKP (Ed25519) keys"
        )
    try:
        key = loaders[kty].from_jwk(entry)
    except (PyJWTError, ValueError, TypeError, KeyError):
        raise ConfigurationError(
            f"{where} is not an {kty} public key that can be read: copy it again from your "
            "identity provider"
        ) from None
    fits = _fitting(where, key)
    alg = entry.get("alg")
    if alg is not None:
        if not isinstance(alg, str) or alg not in fits:
            raise ConfigurationError(
                f"{where}: its alg {_shown(alg)} does not fit its key: write one of "
                f"{', '.join(sorted(fits))}, or leave alg out"
            )
        fits = frozenset({alg})
    return JwtKey(kid=kid or None, algorithms=fits, key=key)


def _fitting(where: str, key: Any) -> frozenset[str]:
    """The algorithms a public key may verify; refuses a weak key and a type JWTs do not use."""
    from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa

    if isinstance(key, rsa.RSAPublicKey):
        if key.key_size < _MIN_RSA_BITS:
            raise ConfigurationError(
                f"{where}: an RSA key of {key.key_size} bits is too weak to trust: use one of "
                f"{_MIN_RSA_BITS} bits or more"
            )
        return frozenset(_RSA)
    if isinstance(key, ec.EllipticCurvePublicKey):
        if key.curve.name not in _CURVES:
            raise ConfigurationError(
                f"{where}: the EC curve {key.curve.name} is not accepted: use P-256, P-384 or P-521"
            )
        return frozenset({_CURVES[key.curve.name]})
    if isinstance(key, (ed25519.Ed25519PublicKey, ed448.Ed448PublicKey)):
        return frozenset({"EdDSA"})
    raise ConfigurationError(
        f"{where}: a {type(key).__name__} does not sign JWTs: use an RSA, EC (P-256, P-384, "
        "P-521) or Ed25519 key"
    )


def _shown(value: Any) -> str:
    """A value for a message or a log line, cut short; repr escapes what could forge a line."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
