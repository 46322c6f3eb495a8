"""``kernelexec token`` as an operator runs it: a real process, its output into a real file."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from subprocess import CompletedProcess
from typing import IO

from kernelexec._tenants._registry import TenantRegistry
from kernelexec._tenants._tokens import token_id, verify_token

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib


def kernelexec(*args: str, stdout: int | IO[str] = subprocess.PIPE) -> CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kernelexec", *args],
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        timeout=60,
    )


def test_token_prints_the_token_once_and_lines_whose_hash_verifies_it() -> None:
    proc = kernelexec("token", "alice")
    assert proc.returncode == 0, proc.stderr
    token = proc.stderr.strip()
    assert proc.stderr == token + "\n" and token.startswith("kx_") and len(token) == 46
    assert token not in proc.stdout and token[3:] not in proc.stdout  # only its hash is kept

    (entry,) = tomllib.loads(proc.stdout)["tenants"]["alice"]["tokens"]
    assert set(entry) == {"id", "hash"}
    assert verify_token(token, entry["hash"])
    assert entry["id"] == token_id(entry["hash"])
    assert f"token {entry['id']}," in proc.stdout  # the comment names the id too

    again = kernelexec("token", "alice")
    assert again.returncode == 0 and again.stderr.strip() != token


def test_appended_to_a_tenants_file_the_token_lets_its_tenant_in(tmp_path: Path) -> None:
    path = tmp_path / "tenants.toml"
    path.write_text('[tenants.alice]\nscopes = ["sessions", "execute"]\n\n[tenants.bob]\n')
    path.write_text(path.read_text() + 'scopes = ["execute"]\n\n')
    tokens: dict[str, list[str]] = {}
    for name in ("alice", "bob", "alice"):
        with path.open("a") as file:  # kernelexec token NAME >> tenants.toml
            proc = kernelexec("token", name, stdout=file)
        assert proc.returncode == 0, proc.stderr
        tokens.setdefault(name, []).append(proc.stderr.strip())
    registry = TenantRegistry.from_file(path)
    assert [len(t.tokens) for t in registry.config.tenants] == [2, 1]
    for name, held in tokens.items():
        for token in held:
            found = registry.authenticate(token)
            assert found is not None and found.tenant.name == name
    assert tokens["alice"][0] not in path.read_text()


def test_a_name_that_cannot_name_a_tenant_is_one_line_and_exit_2() -> None:
    proc = kernelexec("token", "al ice")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("kernelexec: 'al ice' cannot name a tenant: use 1 to 64 ")
    assert proc.stderr.count("\n") == 1
    proc = kernelexec("token")
    assert proc.returncode == 2 and "the following arguments are required: TENANT" in proc.stderr


def test_the_command_is_listed_with_an_example() -> None:
    proc = kernelexec("--help")
    assert proc.returncode == 0 and "\n    token " in proc.stdout
    proc = kernelexec("token", "--help")
    assert proc.returncode == 0
    assert "  kernelexec token alice >> tenants.toml" in proc.stdout.split("\nexample:\n")[1]
