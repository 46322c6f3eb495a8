"""Tenants: tokens and their hashes, the tenants file read or refused, the registry reloading it.

Pure logic and small files in a temp dir: no kernel, no server.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import stat
from pathlib import Path

import pytest

from kernelexec._exceptions import ConfigurationError
from kernelexec._server._token import check_token
from kernelexec._tenants._config import DEFAULT_TENANT, parse_tenants, single_tenant
from kernelexec._tenants._models import SCOPES, Quotas, RateLimit, TenantToken
from kernelexec._tenants._registry import TenantRegistry
from kernelexec._tenants._tokens import (
    is_token_hash,
    new_token,
    token_hash,
    token_id,
    verify_token,
)

DOCS_PAGE = Path(__file__).parent.parent / "docs" / "guides" / "tenants.md"
HASH = token_hash("kx_a-token-nobody-holds")


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def replace(path: Path, text: str) -> None:
    """Writes a new file and renames it over ``path``, as editors and Kubernetes do."""
    new = path.with_suffix(".new")
    new.write_text(text, encoding="utf-8")
    os.replace(new, path)


def one_tenant(name: str, token: str, scopes: str = '["execute"]') -> str:
    return f'[tenants.{name}]\nscopes = {scopes}\ntokens = [{{ hash = "{token_hash(token)}" }}]\n'


# -- tokens


def test_a_token_is_random_prefixed_and_fits_a_bearer_header() -> None:
    tokens = {new_token() for _ in range(200)}
    assert len(tokens) == 200
    for token in tokens:
        assert token.startswith("kx_") and len(token) == 46
        assert check_token(token) == token  # what the server's --token rule allows


def test_a_hash_verifies_its_token_only() -> None:
    token = new_token()
    hashed = token_hash(token)
    assert is_token_hash(hashed) and hashed.startswith("sha256:") and len(hashed) == 71
    assert verify_token(token, hashed)
    assert not verify_token(token[:-1] + ("A" if token[-1] != "A" else "B"), hashed)
    assert not verify_token(new_token(), hashed)
    assert not verify_token("", hashed)
    assert not verify_token(token, hashed.upper())  # the stored form is lower-case hex
    assert token_id(hashed) == hashed[len("sha256:") :][:12]
    assert re.fullmatch(r"[0-9a-f]{12}", token_id(hashed))
    assert token not in token_id(hashed) and token[3:15] not in hashed


# -- a good file


def test_a_good_file_reads_back_every_field(tmp_path: Path) -> None:
    alice, laptop, ops = new_token(), new_token(), new_token()
    path = write(
        tmp_path / "tenants.toml",
        f"""
[tenants.alice]
scopes = ["sessions", "execute", "files:read"]
allow = ["packages", "network"]
quotas = {{ live_sessions = 4, queued_executions = 16, cpu_seconds_per_hour = 600 }}
rate_limit = {{ requests = 120, per_seconds = 60 }}

[[tenants.alice.tokens]]
id = "{token_id(token_hash(alice))}"
hash = "{token_hash(alice)}"

[[tenants.alice.tokens]]
id = "laptop"
hash = "{token_hash(laptop).upper().replace("SHA256:", "sha256:")}"

[tenants.ops]
scopes = {list(SCOPES)!r}

[tenants.ops.quotas]
work_dir_bytes = 1_000_000
session_lifetime_seconds = 86_400.5

[[tenants.ops.tokens]]
hash = "{token_hash(ops)}"
""".replace("'", '"'),
    )
    registry = TenantRegistry.from_file(path)
    config = registry.config
    assert config.source == str(path)
    assert [t.name for t in config.tenants] == ["alice", "ops"]

    first = config.get("alice")
    assert first is not None
    assert first.scopes == {"sessions", "execute", "files:read"}
    assert first.allow == {"packages", "network"}
    assert first.quotas == Quotas(live_sessions=4, queued_executions=16, cpu_seconds_per_hour=600)
    assert isinstance(first.quotas.cpu_seconds_per_hour, float)
    assert first.rate_limit == RateLimit(requests=120, per_seconds=60.0)
    assert first.tokens == (
        TenantToken(id=token_id(token_hash(alice)), hash=token_hash(alice)),
        TenantToken(id="laptop", hash=token_hash(laptop)),  # upper-case hex read as lower
    )
    assert first.can("execute") and not first.can("admin")

    second = config.get("ops")
    assert second is not None
    assert second.scopes == set(SCOPES) and second.allow == frozenset()  # no allow: none
    assert second.quotas == Quotas(work_dir_bytes=1_000_000, session_lifetime_seconds=86_400.5)
    assert second.rate_limit is None
    assert second.tokens == (TenantToken(id=token_id(token_hash(ops)), hash=token_hash(ops)),)
    assert config.get("nobody") is None

    found = registry.authenticate(alice)
    assert (
        found is not None
        and found.tenant is first
        and found.token_id == token_id(token_hash(alice))
    )
    found = registry.authenticate(laptop)
    assert found is not None and found.tenant is first and found.token_id == "laptop"
    found = registry.authenticate(ops)
    assert found is not None and found.tenant is second
    for wrong in (new_token(), "", alice + "x", alice[:-1], token_hash(alice), "laptop"):
        assert registry.authenticate(wrong) is None
    with pytest.raises(ValueError, match="no such scope 'exec'"):
        first.can("exec")
    assert token_hash(alice) not in repr(first)  # hashes are kept out of reprs and logs


def test_the_docs_example_file_reads(tmp_path: Path) -> None:
    blocks = re.findall(r"```toml\n(.*?)```", DOCS_PAGE.read_text(encoding="utf-8"), re.S)
    snippet, example = blocks[0], blocks[1]
    config = parse_tenants(example, source="tenants.md")
    assert [t.name for t in config.tenants] == ["alice", "ops"]
    alice, ops = config.tenants
    assert alice.quotas.live_sessions == 4 and alice.rate_limit == RateLimit(120, 60.0)
    assert [t.id for t in alice.tokens] == ["66385ad2104a", "laptop"]
    assert ops.can("admin") and ops.quotas.work_dir_bytes == 10_000_000_000
    assert ops.tokens[0].id == token_id(ops.tokens[0].hash) == "0eb7624104e2"
    # `kernelexec token`'s sample output is the lines of alice's first token.
    lines = parse_tenants(
        '[tenants.alice]\nscopes = ["execute"]\n' + snippet, source="snippet"
    ).tenants[0]
    assert lines.tokens == alice.tokens[:1]


def test_a_server_with_one_token_has_one_tenant_with_every_scope() -> None:
    token = new_token()
    config = single_tenant(token)
    (tenant,) = config.tenants
    assert tenant.name == DEFAULT_TENANT and config.source is None
    assert tenant.scopes == set(SCOPES) and all(tenant.can(scope) for scope in SCOPES)
    assert tenant.allow is None  # the server's --allow-* flags decide, as before tenants
    assert tenant.quotas == Quotas() and tenant.rate_limit is None
    registry = TenantRegistry.single(token)
    found = registry.authenticate(token)
    assert found is not None and found.tenant == tenant
    assert found.token_id == token_id(token_hash(token))
    assert registry.authenticate(new_token()) is None
    assert registry.reload().reloaded is False and registry.refresh().error is None


# -- bad input: one line naming the file, the tenant and the key, never a traceback

TOKENS = f'tokens = [{{ hash = "{HASH}" }}]'
BAD = {
    "not TOML": ("[tenants.alice\n", ["is not valid TOML", "line 1"]),
    "no tenant": ("# nothing yet\n", ["declares no tenant", "[tenants.NAME]"]),
    "a misspelt top-level key": (
        '[tenant.alice]\nscopes = ["execute"]\n',
        ["unknown key tenant (did you mean tenants?)"],
    ),
    "a name with a space": ('[tenants."al ice"]\nscopes = ["execute"]\n', ["'al ice' is not one"]),
    "a tenant that is not a table": ("tenants = { alice = 1 }\n", ["'alice'", "[tenants.alice]"]),
    "no scopes": (f"[tenants.alice]\n{TOKENS}\n", ["'alice'", "key scopes is missing"]),
    "empty scopes": ("[tenants.alice]\nscopes = []\n", ["key scopes", "the list is empty"]),
    "scopes as a string": (
        '[tenants.alice]\nscopes = "execute"\n',
        ["key scopes", "write a list of strings"],
    ),
    "an unknown scope": (
        '[tenants.alice]\nscopes = ["file:read"]\n',
        ["'alice'", "key scopes", "unknown scope 'file:read' (did you mean files:read?)"],
    ),
    "a misspelt tenant key": (
        '[tenants.alice]\nscopes = ["execute"]\nqoutas = {}\n',
        ["'alice'", "unknown key qoutas (did you mean quotas?)"],
    ),
    "an unknown option in allow": (
        '[tenants.alice]\nscopes = ["execute"]\nallow = ["pip"]\n',
        ["key allow", "unknown session option 'pip'", "python, packages, docker"],
    ),
    "a misspelt quota": (
        '[tenants.alice]\nscopes = ["execute"]\nquotas = { live_session = 2 }\n',
        ["'alice'", "unknown key quotas.live_session (did you mean live_sessions?)"],
    ),
    "a zero quota": (
        '[tenants.alice]\nscopes = ["execute"]\nquotas = { live_sessions = 0 }\n',
        ["'alice'", "key quotas.live_sessions: write a whole number above 0, not 0"],
    ),
    "a negative quota": (
        '[tenants.alice]\nscopes = ["execute"]\nquotas = { cpu_seconds_per_hour = -1.5 }\n',
        ["key quotas.cpu_seconds_per_hour: write a number above 0, not -1.5"],
    ),
    "an infinite quota": (
        '[tenants.alice]\nscopes = ["execute"]\nquotas = { session_lifetime_seconds = inf }\n',
        ["key quotas.session_lifetime_seconds: write a number above 0, not inf"],
    ),
    "a fraction of a session": (
        '[tenants.alice]\nscopes = ["execute"]\nquotas = { live_sessions = 2.5 }\n',
        ["key quotas.live_sessions", "write a whole number above 0, not 2.5"],
    ),
    "true for a number": (
        '[tenants.alice]\nscopes = ["execute"]\nquotas = { work_dir_bytes = true }\n',
        ["key quotas.work_dir_bytes", "not True"],
    ),
    "a quota in quotes": (
        '[tenants.alice]\nscopes = ["execute"]\nquotas = { work_dir_bytes = "1g" }\n',
        ["key quotas.work_dir_bytes", "write a whole number above 0, not '1g'"],
    ),
    "a rate limit without its period": (
        '[tenants.alice]\nscopes = ["execute"]\nrate_limit = { requests = 10 }\n',
        ["'alice'", "key rate_limit.per_seconds is missing"],
    ),
    "a rate limit as a number": (
        '[tenants.alice]\nscopes = ["execute"]\nrate_limit = 10\n',
        ["key rate_limit", "requests = 120, per_seconds = 60"],
    ),
    "a token without its hash": (
        '[tenants.alice]\nscopes = ["execute"]\ntokens = [{ id = "x" }]\n',
        ["'alice'", "key tokens[0].hash is missing"],
    ),
    "a hash that is not one": (
        '[tenants.alice]\nscopes = ["execute"]\ntokens = [{ hash = "md5:0123abcd" }]\n',
        ["key tokens[0].hash is not a token's hash", "sha256: and 64 hex digits"],
    ),
    "a token id with a space": (
        f'[tenants.alice]\nscopes = ["execute"]\ntokens = [{{ id = "my key", hash = "{HASH}" }}]\n',
        ["key tokens[0].id", "'my key' is not a token id"],
    ),
    "a misspelt token key": (
        f'[tenants.alice]\nscopes = ["execute"]\ntokens = [{{ hsh = "x", hash = "{HASH}" }}]\n',
        ["unknown key tokens[0].hsh (did you mean hash?)"],
    ),
    "one token for two tenants": (
        f'[tenants.alice]\nscopes = ["execute"]\n{TOKENS}\n'
        f'[tenants.bob]\nscopes = ["execute"]\n{TOKENS}\n',
        ["tenants 'alice' and 'bob' hold the same token hash"],
    ),
    "one id for two tokens": (
        f'[tenants.alice]\nscopes = ["execute"]\ntokens = [{{ id = "ci", hash = "{HASH}" }}]\n'
        f'[tenants.bob]\nscopes = ["execute"]\n'
        f'tokens = [{{ id = "ci", hash = "{token_hash("kx_another")}" }}]\n',
        ["the token id 'ci' is given twice (tenants 'alice' and 'bob')"],
    ),
}


@pytest.mark.parametrize("text, expected", list(BAD.values()), ids=list(BAD))
def test_bad_input_is_one_line_naming_the_file_tenant_and_key(
    text: str, expected: list[str]
) -> None:
    with pytest.raises(ConfigurationError) as raised:
        parse_tenants(text, source="/etc/kernelexec/tenants.toml")
    message = str(raised.value)
    assert message.startswith("tenants file /etc/kernelexec/tenants.toml"), message
    assert "\n" not in message and len(message) < 400, message
    for part in expected:
        assert part in message, message
    # Nothing chained to it: main prints the one line, with no traceback behind it.
    error = raised.value
    assert error.__cause__ is None and (error.__context__ is None or error.__suppress_context__)


def test_the_docs_sample_messages_are_what_the_file_gets() -> None:
    text = DOCS_PAGE.read_text(encoding="utf-8").split("## Mistakes in the file", 1)[1]
    samples = re.search(r"```text\n(.*?)```", text, re.S)
    assert samples is not None
    alice = '[tenants.alice]\nscopes = ["execute"]\n'
    mistakes = [
        '[tenants.alice]\nscopes = ["file:read"]\n',
        alice + "qoutas = {}\n",
        alice + "quotas = { live_sessions = 0 }\n",
        alice + f'tokens = [{{ hash = "{new_token()}" }}]\n',
    ]
    said = []
    for mistake in mistakes:
        with pytest.raises(ConfigurationError) as raised:
            parse_tenants(mistake, source="tenants.toml")
        said.append(str(raised.value))
    assert samples[1].splitlines() == said


@pytest.mark.parametrize("where", ["hash", "token"])
def test_a_token_written_into_the_file_is_refused_and_never_repeated(where: str) -> None:
    token = new_token()
    text = f'[tenants.alice]\nscopes = ["execute"]\ntokens = [{{ {where} = "{token}" }}]\n'
    with pytest.raises(ConfigurationError) as raised:
        parse_tenants(text, source="tenants.toml")
    message = str(raised.value)
    assert f"key tokens[0].{where}" in message and "make a new token" in message, message
    assert token not in message and token[3:] not in message


def test_a_malformed_hash_is_not_repeated() -> None:
    secret = "kx" + "Z" * 40  # not quite a token, not a hash: someone's secret all the same
    text = f'[tenants.alice]\nscopes = ["execute"]\ntokens = [{{ hash = "{secret}" }}]\n'
    with pytest.raises(ConfigurationError, match=r"is not a token's hash") as raised:
        parse_tenants(text)
    assert "Z" * 10 not in str(raised.value)


def test_a_file_that_cannot_be_read_is_named_with_the_fix(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"cannot be read \(No such file or directory\)"):
        TenantRegistry.from_file(tmp_path / "missing.toml")
    with pytest.raises(ConfigurationError, match=r"tenants file .* is not a file"):
        TenantRegistry.from_file(tmp_path)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(ConfigurationError, match=r"is not a file"):  # and no wait for a writer
        TenantRegistry.from_file(fifo)
    binary = tmp_path / "latin1.toml"
    binary.write_bytes(b"# caf\xe9\n")
    with pytest.raises(ConfigurationError, match=r"is not UTF-8 \(byte 5\): save it as UTF-8"):
        TenantRegistry.from_file(binary)


def test_a_file_anyone_may_write_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path / "tenants.toml", one_tenant("alice", new_token()))
    path.chmod(0o666)
    with pytest.raises(ConfigurationError, match=r"may be written by any user.*chmod o-w"):
        TenantRegistry.from_file(path)
    path.chmod(0o664)  # a group that runs the server may edit it
    assert TenantRegistry.from_file(path).config.tenants[0].name == "alice"
    assert not path.stat().st_mode & stat.S_IWOTH


# -- the registry: rotation, reload, a broken file


def test_a_rotated_token_works_after_reload_and_the_old_one_stops(tmp_path: Path) -> None:
    old, new = new_token(), new_token()
    path = write(tmp_path / "tenants.toml", one_tenant("alice", old))
    registry = TenantRegistry.from_file(path)
    assert registry.authenticate(old) is not None and registry.authenticate(new) is None
    # Rewritten in place with the same size, maybe within the same clock tick: the
    # stamp may not change, so this is SIGHUP's case, a reload on demand.
    write(path, one_tenant("alice", new))
    outcome = registry.reload()
    assert outcome.reloaded and outcome.error is None
    found = registry.authenticate(new)
    assert found is not None and found.tenant.name == "alice"
    assert found.token_id == token_id(token_hash(new))
    assert registry.authenticate(old) is None


def test_refresh_reads_a_replaced_file_once(tmp_path: Path) -> None:
    old, new = new_token(), new_token()
    path = write(tmp_path / "tenants.toml", one_tenant("alice", old))
    registry = TenantRegistry.from_file(path)
    assert registry.refresh().reloaded is False  # nothing changed
    replace(path, one_tenant("bob", new, '["execute", "fork"]'))
    assert registry.refresh().reloaded is True
    found = registry.authenticate(new)
    assert found is not None and found.tenant.name == "bob" and found.tenant.can("fork")
    assert registry.authenticate(old) is None
    assert registry.refresh().reloaded is False


def test_a_broken_file_keeps_the_tenants_before_and_says_why(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    token, later = new_token(), new_token()
    path = write(tmp_path / "tenants.toml", one_tenant("alice", token))
    registry = TenantRegistry.from_file(path)
    before = registry.config
    caplog.set_level(logging.WARNING, logger="kernelexec.tenants")

    replace(path, one_tenant("alice", later, '["execute", "admn"]'))
    outcome = registry.refresh()
    assert not outcome.reloaded and outcome.error is not None
    assert "tenant 'alice', key scopes: unknown scope 'admn' (did you mean admin?)" in outcome.error
    assert registry.last_error == outcome.error
    assert registry.config is before
    assert registry.authenticate(token) is not None and registry.authenticate(later) is None
    # Tried once per change: the next polls neither read it again nor log it again.
    assert registry.refresh() == registry.refresh() == type(outcome)(reloaded=False)
    assert registry.reload().error == outcome.error  # SIGHUP reads it whatever its stamp
    warnings = [r.getMessage() for r in caplog.records if r.name == "kernelexec.tenants"]
    assert len(warnings) == 1 and "the tenants read before stay in force" in warnings[0]

    path.unlink()  # gone: still the tenants before
    outcome = registry.refresh()
    assert not outcome.reloaded and "cannot be read" in (outcome.error or "")
    assert registry.authenticate(token) is not None

    write(path, one_tenant("alice", later))  # mended
    assert registry.refresh().reloaded
    assert registry.last_error is None
    assert registry.authenticate(later) is not None and registry.authenticate(token) is None


def test_watch_takes_a_changed_file_without_a_restart(tmp_path: Path) -> None:
    old, new = new_token(), new_token()
    path = write(tmp_path / "tenants.toml", one_tenant("alice", old))
    registry = TenantRegistry.from_file(path)

    async def main() -> float:
        watcher = asyncio.create_task(registry.watch(interval=0.01))
        try:
            replace(path, one_tenant("alice", new))
            loop = asyncio.get_running_loop()
            start = loop.time()
            while registry.authenticate(new) is None:
                assert loop.time() - start < 10, "the changed file was not read"
                await asyncio.sleep(0.01)
            return loop.time() - start
        finally:
            watcher.cancel()

    asyncio.run(main())
    assert registry.authenticate(old) is None
