"""JWT bearer tokens: a tenants file's [jwt] table read or refused, tokens taken or refused.

Real keys made here with cryptography, real tokens signed with PyJWT, and the
tokens no identity provider would sign (alg none, HS256 keyed with a public
key's PEM) made by hand. Small files in a temp dir: no server, no network.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from kernelexec._exceptions import ConfigurationError
from kernelexec._extras import install_line
from kernelexec._tenants._config import parse_tenants
from kernelexec._tenants._jwt import JwtVerifier
from kernelexec._tenants._registry import TenantRegistry
from kernelexec._tenants._tokens import new_token, token_hash, token_id

DOCS_PAGE = Path(__file__).parent.parent / "docs" / "guides" / "tenants.md"
AUDIENCE = "kernelexec"
ISSUER = "https://idp.example.com/"
PrivateKey = Any  # rsa, ec or ed25519, as cryptography makes them


@pytest.fixture(scope="module")
def keys() -> dict[str, PrivateKey]:
    """One private key of each kind, made once: RSA keys take a moment to make."""
    return {
        "rsa": rsa.generate_private_key(public_exponent=65537, key_size=2048),
        "rsa2": rsa.generate_private_key(public_exponent=65537, key_size=2048),
        "ec": ec.generate_private_key(ec.SECP256R1()),
        "ec384": ec.generate_private_key(ec.SECP384R1()),
        "ed": ed25519.Ed25519PrivateKey.generate(),
    }


def public_pem(key: PrivateKey) -> str:
    return (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )


def jwks(**by_kid: PrivateKey) -> str:
    """A JWKS document of the keys' public parts, each under its kid, as a provider publishes."""
    return json.dumps({"keys": [{**public_jwk(key), "kid": kid} for kid, key in by_kid.items()]})


def public_jwk(key: PrivateKey) -> dict[str, Any]:
    if isinstance(key, rsa.RSAPrivateKey):
        writer: Any = jwt.algorithms.RSAAlgorithm
    elif isinstance(key, ec.EllipticCurvePrivateKey):
        writer = jwt.algorithms.ECAlgorithm
    else:
        writer = jwt.algorithms.OKPAlgorithm
    return {**json.loads(writer.to_jwk(key.public_key())), "use": "sig"}


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def tenants_file(
    folder: Path, keys_text: str, *, jwt_extra: str = "", tenants: str = "", name: str = "t.toml"
) -> Path:
    """A tenants file with a [jwt] table, its keys file beside it, and tenants alice and ops."""
    write(folder / "idp-keys.pem", keys_text)
    return write(
        folder / name,
        f"""
[jwt]
keys = "idp-keys.pem"
audience = "{AUDIENCE}"
issuer = "{ISSUER}"
{jwt_extra}

[tenants.alice]
scopes = ["sessions", "execute", "files:read"]

[tenants.ops]
scopes = ["sessions", "execute", "admin"]
{tenants}
""",
    )


def claims(**changes: Any) -> dict[str, Any]:
    now = int(time.time())
    found = {
        "iss": ISSUER,
        "aud": AUDIENCE,
        "sub": "agent-7",
        "tenant": "alice",
        "iat": now,
        "exp": now + 300,
    }
    found.update(changes)
    return {key: value for key, value in found.items() if value is not None}


def sign(key: PrivateKey, alg: str, *, kid: str | None = None, **changes: Any) -> str:
    return jwt.encode(claims(**changes), key, algorithm=alg, headers={"kid": kid} if kid else None)


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def by_hand(header: dict[str, Any], payload: dict[str, Any], secret: bytes | None = None) -> str:
    """A token as no careful library signs one: HS256 with ``secret``, or no signature at all."""
    signing_input = f"{b64(json.dumps(header).encode())}.{b64(json.dumps(payload).encode())}"
    if secret is None:
        return signing_input + "."
    signature = hmac.new(secret, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{b64(signature)}"


# -- tokens taken


@pytest.mark.parametrize(
    ("kind", "alg"), [("rsa", "RS256"), ("rsa", "PS384"), ("ec", "ES256"), ("ed", "EdDSA")]
)
def test_a_valid_token_is_its_tenant(
    tmp_path: Path, keys: dict[str, PrivateKey], kind: str, alg: str
) -> None:
    registry = TenantRegistry.from_file(tenants_file(tmp_path, public_pem(keys[kind])))
    settings = registry.config.jwt
    assert settings is not None and settings.audience == (AUDIENCE,) and settings.issuer == ISSUER
    assert settings.tenant_claim == "tenant" and settings.leeway_seconds == 30.0
    assert settings.keys_file == str(tmp_path / "idp-keys.pem")

    token = sign(keys[kind], alg)
    found = registry.authenticate(token)
    assert found is not None
    assert found.tenant is registry.config.get("alice")  # no scope claim: the tenant itself
    assert re.fullmatch(r"jwt:[0-9a-f]{12}", found.token_id)
    assert found.token_id not in token
    # The id is the subject's: the same for its next token, another for another subject.
    later = registry.authenticate(sign(keys[kind], alg, iat=int(time.time()) - 5, jti="x"))
    assert later is not None and later.token_id == found.token_id
    other = registry.authenticate(sign(keys[kind], alg, sub="agent-8"))
    assert other is not None and other.token_id != found.token_id
    ops = registry.authenticate(sign(keys[kind], alg, tenant="ops"))
    assert ops is not None and ops.tenant.name == "ops" and ops.tenant.can("admin")


def test_a_jwks_picks_the_key_a_token_names(tmp_path: Path, keys: dict[str, PrivateKey]) -> None:
    path = tenants_file(tmp_path, jwks(one=keys["rsa"], two=keys["ec"], three=keys["rsa2"]))
    registry = TenantRegistry.from_file(path)
    settings = registry.config.jwt
    assert settings is not None
    assert [key.kid for key in settings.keys] == ["one", "two", "three"]
    assert settings.algorithms == ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256")

    assert registry.authenticate(sign(keys["rsa"], "RS256", kid="one")) is not None
    assert registry.authenticate(sign(keys["ec"], "ES256", kid="two")) is not None
    assert registry.authenticate(sign(keys["rsa2"], "RS256", kid="three")) is not None
    assert registry.authenticate(sign(keys["rsa"], "RS256")) is not None  # no kid: each key tried
    # Named another key's kid, or one the file does not have: refused.
    assert registry.authenticate(sign(keys["rsa"], "RS256", kid="three")) is None
    assert registry.authenticate(sign(keys["rsa"], "RS256", kid="four")) is None


def test_jwks_keys_for_encryption_are_left_out(tmp_path: Path, keys: dict[str, PrivateKey]) -> None:
    document = json.loads(jwks(sig=keys["rsa"], enc=keys["rsa2"]))
    document["keys"][1]["use"] = "enc"
    registry = TenantRegistry.from_file(tenants_file(tmp_path, json.dumps(document)))
    assert registry.config.jwt is not None
    assert [key.kid for key in registry.config.jwt.keys] == ["sig"]
    assert registry.authenticate(sign(keys["rsa2"], "RS256", kid="enc")) is None


def test_a_jwk_alg_and_the_algorithms_list_narrow_what_a_key_verifies(
    tmp_path: Path, keys: dict[str, PrivateKey]
) -> None:
    document = json.loads(jwks(one=keys["rsa"]))
    document["keys"][0]["alg"] = "PS256"
    registry = TenantRegistry.from_file(tenants_file(tmp_path, json.dumps(document)))
    assert registry.authenticate(sign(keys["rsa"], "PS256", kid="one")) is not None
    assert registry.authenticate(sign(keys["rsa"], "RS256", kid="one")) is None

    path = tenants_file(
        tmp_path,
        public_pem(keys["rsa"]) + public_pem(keys["ec"]),
        jwt_extra='algorithms = ["ES256"]',
    )
    registry = TenantRegistry.from_file(path)
    assert registry.config.jwt is not None and registry.config.jwt.algorithms == ("ES256",)
    assert len(registry.config.jwt.keys) == 1  # the RSA key fits none of the list: left out
    assert registry.authenticate(sign(keys["ec"], "ES256")) is not None
    assert registry.authenticate(sign(keys["rsa"], "RS256")) is None


def test_the_tenant_claim_and_leeway_are_settings(
    tmp_path: Path, keys: dict[str, PrivateKey]
) -> None:
    path = tenants_file(
        tmp_path, public_pem(keys["rsa"]), jwt_extra='tenant_claim = "org"\nleeway_seconds = 0'
    )
    registry = TenantRegistry.from_file(path)
    found = registry.authenticate(sign(keys["rsa"], "RS256", tenant=None, org="ops"))
    assert found is not None and found.tenant.name == "ops"
    assert registry.authenticate(sign(keys["rsa"], "RS256")) is None  # `tenant` is not the claim
    expired = sign(keys["rsa"], "RS256", org="ops", exp=int(time.time()) - 10)
    assert registry.authenticate(expired) is None  # no leeway

    registry = TenantRegistry.from_file(tenants_file(tmp_path, public_pem(keys["rsa"])))
    recent = sign(keys["rsa"], "RS256", exp=int(time.time()) - 10)
    assert registry.authenticate(recent) is not None  # within the default 30 s


def test_a_scope_claim_narrows_the_tenant_and_never_widens_it(
    tmp_path: Path, keys: dict[str, PrivateKey]
) -> None:
    registry = TenantRegistry.from_file(tenants_file(tmp_path, public_pem(keys["ec"])))
    alice = registry.config.get("alice")
    assert alice is not None

    found = registry.authenticate(sign(keys["ec"], "ES256", scope="openid execute admin"))
    assert found is not None and found.tenant.name == "alice"
    assert found.tenant.scopes == {"execute"}  # admin is not alice's; openid is not a scope
    assert found.tenant is not alice and alice.scopes == {"sessions", "execute", "files:read"}
    assert found.tenant.quotas is alice.quotas and found.tenant.allow == alice.allow

    found = registry.authenticate(sign(keys["ec"], "ES256", scp=["files:read", "sessions"]))
    assert found is not None and found.tenant.scopes == {"files:read", "sessions"}
    both = sign(keys["ec"], "ES256", scope="execute sessions", scp=["sessions", "fork"])
    found = registry.authenticate(both)
    assert found is not None and found.tenant.scopes == {"sessions"}  # each claim narrows
    found = registry.authenticate(sign(keys["ec"], "ES256", scope="sessions execute files:read"))
    assert found is not None and found.tenant is alice  # all of them: the tenant itself

    for nothing in ("openid email", "", 7, ["execute", 7]):
        assert registry.authenticate(sign(keys["ec"], "ES256", scope=nothing)) is None


# -- tokens refused


def refusals(keys: dict[str, PrivateKey]) -> dict[str, str]:
    now = int(time.time())
    rsa_key = keys["rsa"]
    pem_bytes = public_pem(rsa_key).encode()
    return {
        "expired": sign(rsa_key, "RS256", exp=now - 120),
        "not yet valid": sign(rsa_key, "RS256", nbf=now + 120),
        "issued in the future": sign(rsa_key, "RS256", iat=now + 120),
        "signed by another key": sign(keys["rsa2"], "RS256"),
        "another audience": sign(rsa_key, "RS256", aud="someone-else"),
        "no audience": sign(rsa_key, "RS256", aud=None),
        "another issuer": sign(rsa_key, "RS256", iss="https://evil.example.com/"),
        "no issuer": sign(rsa_key, "RS256", iss=None),
        "no exp": sign(rsa_key, "RS256", exp=None),
        "alg none": by_hand({"alg": "none", "typ": "JWT"}, claims()),
        "alg None": by_hand({"alg": "None"}, claims()),
        "HS256 keyed with the public key's PEM": by_hand({"alg": "HS256"}, claims(), pem_bytes),
        "an unknown tenant": sign(rsa_key, "RS256", tenant="mallory"),
        "no tenant claim": sign(rsa_key, "RS256", tenant=None),
        "a tenant claim that is a list": sign(rsa_key, "RS256", tenant=["alice"]),
        "a signature cut short": sign(rsa_key, "RS256")[:-4],
        "a payload swapped after signing": (
            lambda parts: f"{parts[0]}.{b64(json.dumps(claims(tenant='ops')).encode())}.{parts[2]}"
        )(sign(rsa_key, "RS256").split(".")),
        "a crit header": jwt.encode(
            claims(), rsa_key, algorithm="RS256", headers={"crit": ["exp"]}
        ),
        "an EC algorithm for an RSA key": sign(keys["ec"], "ES256"),
    }


def test_tokens_that_must_not_pass_are_refused_and_never_logged(
    tmp_path: Path, keys: dict[str, PrivateKey], caplog: pytest.LogCaptureFixture
) -> None:
    registry = TenantRegistry.from_file(tenants_file(tmp_path, public_pem(keys["rsa"])))
    assert registry.authenticate(sign(keys["rsa"], "RS256")) is not None  # the file works
    caplog.set_level(logging.DEBUG, logger="kernelexec.tenants")
    for case, token in refusals(keys).items():
        caplog.clear()
        assert registry.authenticate(token) is None, case
        said = [r.getMessage() for r in caplog.records if r.name == "kernelexec.tenants"]
        assert len(said) == 1 and said[0].startswith("JWT refused: "), (case, said)
        for part in token.split("."):
            assert len(part) < 8 or part not in said[0], case


def test_a_refusal_the_operator_should_see_is_logged_at_info(
    tmp_path: Path, keys: dict[str, PrivateKey], caplog: pytest.LogCaptureFixture
) -> None:
    registry = TenantRegistry.from_file(tenants_file(tmp_path, public_pem(keys["rsa"])))
    caplog.set_level(logging.INFO, logger="kernelexec.tenants")
    expired = sign(keys["rsa"], "RS256", exp=int(time.time()) - 120)
    assert registry.authenticate(sign(keys["rsa2"], "RS256")) is None  # debug: not shown
    assert registry.authenticate(expired) is None
    assert registry.authenticate(sign(keys["rsa"], "RS256", tenant="mallory")) is None
    said = [r.getMessage() for r in caplog.records if r.name == "kernelexec.tenants"]
    assert said == [
        "JWT refused: Signature has expired",
        "JWT refused: its claim tenant names no tenant of the file: 'mallory'",
    ]


def test_junk_is_refused_without_an_exception(tmp_path: Path, keys: dict[str, PrivateKey]) -> None:
    rsa_key = keys["rsa"]
    registry = TenantRegistry.from_file(tenants_file(tmp_path, public_pem(rsa_key)))
    signed = jwt.api_jws.PyJWS()
    junk = [
        "a.b.c",
        "a.b.",
        "..",
        "x" * 20_000 + ".a.b",
        f"{b64(b'[1]')}.{b64(b'{}')}.",
        f"{b64(b'not json')}.{b64(b'{}')}.sig",
        by_hand({"alg": ["RS256"]}, claims()),
        by_hand({"alg": "RS256", "kid": 7}, claims()),
        by_hand({"alg": "RS256", "kid": "k"}, claims()) + "AAAA",
        signed.encode(b"[1, 2]", rsa_key, algorithm="RS256"),
        signed.encode(b"not json", rsa_key, algorithm="RS256"),
        sign(rsa_key, "RS256", exp="tomorrow"),
        sign(rsa_key, "RS256", aud=[1, 2]),
        new_token(),
    ]
    for token in junk:
        assert registry.authenticate(token) is None, token[:60]
    # A subject no strict UTF-8 encodes still gets an id.
    found = registry.authenticate(sign(rsa_key, "RS256", sub="\ud800"))
    assert found is not None and found.token_id.startswith("jwt:")


def test_the_verifier_alone_answers_name_id_and_scopes(
    tmp_path: Path, keys: dict[str, PrivateKey]
) -> None:
    config = parse_tenants(
        tenants_file(tmp_path, public_pem(keys["ed"])).read_text(), source=str(tmp_path / "t.toml")
    )
    assert config.jwt is not None
    verifier = JwtVerifier(config.jwt, config.tenants)
    found = verifier.verify(sign(keys["ed"], "EdDSA", sub=None, jti="token-1", scope="execute"))
    assert found is not None
    tenant, ident = found
    assert tenant.name == "alice" and tenant.scopes == {"execute"}
    assert ident == "jwt:" + hashlib.sha256(f"jti\0{ISSUER}\0token-1".encode()).hexdigest()[:12]
    assert verifier.verify("kx_" + sign(keys["ed"], "EdDSA")) is None  # never a kx_ token


# -- kx_ tokens beside [jwt]


def test_a_kx_token_still_authenticates_as_before(
    tmp_path: Path, keys: dict[str, PrivateKey]
) -> None:
    token = new_token()
    hashed = token_hash(token)
    path = tenants_file(
        tmp_path,
        public_pem(keys["rsa"]),
        tenants=f'tokens = [{{ hash = "{hashed}" }}]',  # the last table: ops's
    )
    registry = TenantRegistry.from_file(path)
    alice, ops = registry.config.tenants
    assert alice.tokens == () and len(ops.tokens) == 1  # a tenant that comes in by JWT only
    found = registry.authenticate(token)
    assert found is not None and found.tenant is ops and found.token_id == token_id(hashed)
    assert registry.authenticate(new_token()) is None
    assert registry.authenticate(sign(keys["rsa"], "RS256")) is not None


# -- the file read again


def test_a_rotated_keys_file_takes_effect_on_reload(
    tmp_path: Path, keys: dict[str, PrivateKey]
) -> None:
    path = tenants_file(tmp_path, public_pem(keys["rsa"]))
    registry = TenantRegistry.from_file(path)
    old, new = sign(keys["rsa"], "RS256"), sign(keys["rsa2"], "RS256")
    assert registry.authenticate(old) is not None and registry.authenticate(new) is None

    write(tmp_path / "idp-keys.pem", public_pem(keys["rsa2"]))  # in place: SIGHUP's case
    outcome = registry.reload()
    assert outcome.reloaded and outcome.error is None
    assert registry.authenticate(new) is not None and registry.authenticate(old) is None


def test_refresh_reads_a_replaced_keys_file_and_keeps_the_old_one_when_it_breaks(
    tmp_path: Path, keys: dict[str, PrivateKey], caplog: pytest.LogCaptureFixture
) -> None:
    path = tenants_file(tmp_path, jwks(a=keys["ec"]))
    registry = TenantRegistry.from_file(path)
    one, two = sign(keys["ec"], "ES256", kid="a"), sign(keys["ec384"], "ES384", kid="b")
    assert registry.refresh().reloaded is False  # nothing changed
    assert registry.authenticate(one) is not None and registry.authenticate(two) is None

    keys_file = tmp_path / "idp-keys.pem"
    replace = tmp_path / "idp-keys.new"
    write(replace, jwks(a=keys["ec"], b=keys["ec384"]))
    os.replace(replace, keys_file)  # as a job rotating the provider's JWKS does; t.toml unchanged
    assert registry.refresh().reloaded is True
    assert registry.authenticate(one) is not None and registry.authenticate(two) is not None
    assert registry.refresh().reloaded is False

    caplog.set_level(logging.WARNING, logger="kernelexec.tenants")
    write(replace, "")
    os.replace(replace, keys_file)
    outcome = registry.refresh()
    assert not outcome.reloaded and "is empty" in (outcome.error or "")
    assert registry.authenticate(one) is not None and registry.authenticate(two) is not None
    assert registry.refresh().reloaded is False  # tried once per change
    assert len([r for r in caplog.records if r.name == "kernelexec.tenants"]) == 1

    write(replace, jwks(b=keys["ec384"]))
    os.replace(replace, keys_file)
    assert registry.refresh().reloaded is True
    assert registry.authenticate(one) is None and registry.authenticate(two) is not None


# -- the [jwt] table: mistakes are one line naming the file, the key and the fix


def bad_jwt(folder: Path, table: str, keys_text: str | None = "") -> str:
    """The one-line error for a tenants file with ``table`` as its [jwt] table."""
    if keys_text is not None:
        write(folder / "idp-keys.pem", keys_text)
    text = f'[jwt]\n{table}\n[tenants.alice]\nscopes = ["execute"]\n'
    with pytest.raises(ConfigurationError) as raised:
        parse_tenants(text, source=str(folder / "tenants.toml"))
    message = str(raised.value)
    assert message.startswith(f"tenants file {folder / 'tenants.toml'}"), message
    assert "\n" not in message and len(message) < 400, message
    error = raised.value
    assert error.__cause__ is None and (error.__context__ is None or error.__suppress_context__)
    return message


KEYS = 'keys = "idp-keys.pem"'
AUD = 'audience = "kernelexec"'


def test_a_jwt_table_without_audience_or_keys_is_refused(tmp_path: Path) -> None:
    message = bad_jwt(tmp_path, KEYS)
    assert "key jwt.audience is missing: audience = " in message
    assert "key jwt.keys is missing" in bad_jwt(tmp_path, AUD)
    assert "key jwt.audience: write a string" in bad_jwt(tmp_path, f"{KEYS}\naudience = []")
    assert "key jwt.audience: write a string" in bad_jwt(tmp_path, f"{KEYS}\naudience = 1")
    with pytest.raises(ConfigurationError, match=r"key jwt: write it as a table, \[jwt\]"):
        parse_tenants('jwt = 1\n[tenants.alice]\nscopes = ["execute"]\n', source="t.toml")


def test_an_unknown_key_in_jwt_is_refused(tmp_path: Path) -> None:
    message = bad_jwt(tmp_path, f"{KEYS}\n{AUD}\naudiance = 1")
    assert "unknown key jwt.audiance (did you mean audience?)" in message
    assert "the keys there are keys, audience, issuer, tenant_claim" in message


def test_a_keys_file_that_cannot_be_read_is_named_with_the_fix(
    tmp_path: Path, keys: dict[str, PrivateKey]
) -> None:
    message = bad_jwt(tmp_path, f'keys = "missing.pem"\n{AUD}', None)
    assert f"key jwt.keys: {tmp_path / 'missing.pem'} cannot be read (No such file" in message
    assert "from the tenants file's folder" in message
    assert "is not a file" in bad_jwt(tmp_path, f'keys = "."\n{AUD}', None)
    write(tmp_path / "idp-keys.pem", public_pem(keys["rsa"])).chmod(0o666)
    message = bad_jwt(tmp_path, f"{KEYS}\n{AUD}", None)
    assert "may be written by any user, who could add a key" in message
    assert "chmod o-w" in message


@pytest.mark.parametrize(
    ("keys_text", "expected"),
    [
        ("", "is empty: put your identity provider's public keys there"),
        ("  \n\n", "is empty"),
        ("c2VjcmV0LXNoYXJlZC13aXRoLXRoZS1pZHA=\n", "a shared HMAC secret is not accepted"),
        ("-----BEGIN PUBLIC KEY-----\nMFkw\n", "holds no whole PEM block"),
        ("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n", "cannot be read as"),
        ("-----BEGIN DH PARAMETERS-----\nAAAA\n-----END DH PARAMETERS-----\n", "is a DH PAR"),
        ('{"keys": []}', "holds no signing key"),
        ('{"keys": {}}', 'write its "keys" as a list'),
        ('{"keys": [1]}', "keys[0]: write each key as a JSON object"),
        ("[1, 2]", "is JSON but not a JWKS document"),
        ("{nope", "is not valid JSON"),
        ('{"keys": [{"kty": "oct", "k": "c2VjcmV0"}]}', "is a shared secret (kty oct)"),
        ('{"keys": [{"kty": "RSA", "kid": "x"}]}', "keys[0] (kid 'x') is not an RSA public key"),
        ('{"keys": [{"kty": "DSA"}]}', "kty 'DSA' is not accepted"),
    ],
)
def test_a_keys_file_with_no_usable_key_is_refused(
    tmp_path: Path, keys_text: str, expected: str
) -> None:
    message = bad_jwt(tmp_path, f"{KEYS}\n{AUD}", keys_text)
    assert f"key jwt.keys: {tmp_path / 'idp-keys.pem'}" in message
    assert expected in message, message


def test_private_keys_weak_keys_and_wrong_algorithms_are_refused(
    tmp_path: Path, keys: dict[str, PrivateKey]
) -> None:
    private = (
        keys["ec"]
        .private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        .decode()
    )
    message = bad_jwt(tmp_path, f"{KEYS}\n{AUD}", public_pem(keys["rsa"]) + private)
    assert "PEM block 2 is a private key: keep only its public key there" in message
    assert private.splitlines()[1][:20] not in message

    document = json.loads(jwks(a=keys["ec"]))
    document["keys"][0]["d"] = "c2VjcmV0"
    message = bad_jwt(tmp_path, f"{KEYS}\n{AUD}", json.dumps(document))
    assert "keys[0] (kid 'a') holds a private key (d)" in message and "c2VjcmV0" not in message

    document = json.loads(jwks(a=keys["ec"]))
    document["keys"][0]["alg"] = "RS256"
    message = bad_jwt(tmp_path, f"{KEYS}\n{AUD}", json.dumps(document))
    assert "its alg 'RS256' does not fit its key: write one of ES256" in message

    weak = rsa.generate_private_key(public_exponent=65537, key_size=1024)
    message = bad_jwt(tmp_path, f"{KEYS}\n{AUD}", public_pem(weak))
    assert "an RSA key of 1024 bits is too weak" in message

    curve = public_pem(ec.generate_private_key(ec.SECP256K1()))
    assert "the EC curve secp256k1 is not accepted" in bad_jwt(tmp_path, f"{KEYS}\n{AUD}", curve)

    pem = public_pem(keys["rsa"])
    for algorithms, expected in [
        ('["none"]', "none means a token without a signature"),
        ('["HS256"]', "HS256 needs a shared secret"),
        ('["RS257"]', "unknown algorithm 'RS257' (did you mean RS256?)"),
        ("[]", 'write a list of strings, ["RS256"]'),
        ('["ES256"]', "none of its keys fits jwt.algorithms (ES256)"),
    ]:
        message = bad_jwt(tmp_path, f"{KEYS}\n{AUD}\nalgorithms = {algorithms}", pem)
        assert expected in message, message
    for leeway in ("-1", "301", "true", '"30"', "nan"):
        message = bad_jwt(tmp_path, f"{KEYS}\n{AUD}\nleeway_seconds = {leeway}", pem)
        assert "key jwt.leeway_seconds: write a number of seconds from 0 to 300" in message
    assert "key jwt.issuer: write a string" in bad_jwt(tmp_path, f'{KEYS}\n{AUD}\nissuer = ""', pem)


def test_a_jwt_table_without_pyjwt_names_the_extra(
    tmp_path: Path, keys: dict[str, PrivateKey], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("jwt", "jwt.algorithms"):
        monkeypatch.setitem(sys.modules, name, None)  # as if not installed
    message = bad_jwt(tmp_path, f"{KEYS}\n{AUD}", public_pem(keys["rsa"]))
    assert "[jwt]: JWT bearer tokens need the jwt extra (no module named 'jwt" in message
    assert message.endswith(install_line("jwt")), message


# -- the guide


def test_the_guides_jwt_example_reads(tmp_path: Path, keys: dict[str, PrivateKey]) -> None:
    section = DOCS_PAGE.read_text(encoding="utf-8").split("## JWT from your identity provider")[1]
    example = re.findall(r"```toml\n(.*?)```", section, re.S)[0]
    write(tmp_path / "idp-keys.pem", public_pem(keys["rsa"]))
    path = write(tmp_path / "tenants.toml", example)
    registry = TenantRegistry.from_file(path)
    found = registry.authenticate(sign(keys["rsa"], "RS256"))
    assert found is not None and found.tenant.name == "alice" and found.tenant.tokens == ()

    samples = re.findall(r"```text\n(.*?)```", section, re.S)[0].splitlines()
    said = []
    for table in ('keys = "idp-keys.pem"', 'keys = "idp-keys.pem"\naudience = "k"\ntenant = "x"'):
        with pytest.raises(ConfigurationError) as raised:
            parse_tenants(
                f'[jwt]\n{table}\n[tenants.a]\nscopes = ["execute"]\n', source="tenants.toml"
            )
        said.append(str(raised.value))
    assert samples == said
