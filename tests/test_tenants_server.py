"""Tenants on a real ``kernelexec serve --tenants``: isolation, scopes, reloads, quotas.

Every route of the app is tried, from the routes themselves (``ROUTES``,
``JUPYTER_ROUTES`` and the scope each of their methods declares), so a
route added later is in these tests without anyone listing it.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import websocket
from _serverproc import ServerProcess, wait_for
from _tenants import bearer, write_tenants

from kernelexec._server._access import OPEN
from kernelexec._server._jupyter_api import JUPYTER_ROUTES
from kernelexec._server._routes import ROUTES
from kernelexec._tenants._models import SCOPES

UNKNOWN = "0" * 32
_PARAM = re.compile(r"\{(\w+)(?::\w+)?\}")


def tenants_server(root: Path, tenants: dict[str, dict[str, Any]], *options: str) -> Any:
    """A server of these tenants; it, the tenants file and their tokens."""
    file = root / "tenants.toml"
    tokens = write_tenants(file, tenants)
    env = {k: v for k, v in os.environ.items() if k != "KERNELEXEC_TOKEN"}
    server = ServerProcess(root / "work", "--tenants", str(file), *options, token=None, env=env)
    return server, file, tokens


def client(server: ServerProcess, token: str) -> httpx.Client:
    return httpx.Client(
        base_url=server.url,
        headers=bearer(token),
        trust_env=False,
        timeout=httpx.Timeout(30.0, read=120.0),
    )


def every_operation() -> Iterator[tuple[str, str, str | None]]:
    """(method, path template, scope) of every operation of the app, but /health's."""
    for route in [*ROUTES, *JUPYTER_ROUTES]:
        for method, scope in route.scopes.items():  # type: ignore[attr-defined]
            if method != "HEAD" and scope != OPEN:
                yield method, route.path, scope  # type: ignore[attr-defined]


def concrete(template: str, ids: dict[str, str]) -> str:
    """The path of a route template with these ids (a kernel id in Jupyter's UUID form)."""

    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        if name == "kernel_id":
            return str(uuid.UUID(hex=ids["session_id"]))
        return ids[name]

    return _PARAM.sub(value, template)


# What each operation is sent: enough to do its harm if it reached the resource.
BODIES: dict[tuple[str, str], dict[str, Any]] = {
    ("POST", "/sessions/{session_id}/execute"): {"json": {"code": "x = 666"}},
    ("POST", "/sessions/{session_id}/execute/stream"): {"json": {"code": "x = 666"}},
    ("POST", "/sessions/{session_id}/executions"): {"json": {"code": "x = 666"}},
    ("POST", "/sessions/{session_id}/fork"): {"json": {}},
    ("POST", "/sessions/{session_id}/checkpoint"): {"json": {}},
    ("PUT", "/sessions/{session_id}/files/{path:path}"): {"content": b"overwritten"},
    ("POST", "/sessions"): {"json": {}},
    ("POST", "/api/kernels"): {"json": {"name": "python3"}},
}


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Alice and Bob (every scope but admin), and root (admin too), on one server;
    Alice's session, variable, file, checkpoint and execution."""
    root = tmp_path_factory.mktemp("tenants")
    server, _, tokens = tenants_server(
        root,
        {"alice": {}, "bob": {}, "root": {"scopes": list(SCOPES)}},
        "--audit-log",
        str(root / "audit.jsonl"),
    )
    alice, bob, admin = (client(server, tokens[n]) for n in ("alice", "bob", "root"))
    made = alice.post("/sessions", json={})
    assert made.status_code == 201, made.text
    session_id = made.json()["id"]
    assert alice.post(f"/sessions/{session_id}/execute", json={"code": "x = 1"}).status_code == 200
    assert alice.put(f"/sessions/{session_id}/files/a.txt", content=b"alice's").status_code == 201
    checkpoint = alice.post(f"/sessions/{session_id}/checkpoint", json={})
    assert checkpoint.status_code == 201, checkpoint.text
    started = alice.post(f"/sessions/{session_id}/executions", json={"code": "y = 2"})
    assert started.status_code == 202
    execution_id = started.json()["id"]
    assert alice.get(f"/sessions/{session_id}/executions/{execution_id}?wait=60").json()[
        "state"
    ] == ("done")
    ids = {
        "session_id": session_id,
        "checkpoint_id": checkpoint.json()["id"],
        "execution_id": execution_id,
        "name": "x",
        "path": "a.txt",
    }
    try:
        yield server, alice, bob, admin, ids, root
    finally:
        for http in (alice, bob, admin):
            http.close()
        server.stop()


def test_every_route_on_another_tenants_things_answers_as_for_unknown_ones(pair: Any) -> None:
    _, alice, bob, _, ids, _ = pair
    unknown = {**ids, "session_id": UNKNOWN, "checkpoint_id": UNKNOWN, "execution_id": UNKNOWN}
    before = alice.get(f"/sessions/{ids['session_id']}").json()
    tried = 0
    for method, template, _scope in every_operation():
        if method == "WEBSOCKET":
            continue
        extra = BODIES.get((method, template), {})
        answer = bob.request(method, concrete(template, ids), **extra)
        tried += 1
        names_one = _PARAM.search(template) is not None
        if not names_one:
            # A list, or a thing of Bob's own: none of Alice's ids in it.
            assert answer.status_code < 400, (method, template, answer.text)
            for value in (ids["session_id"], ids["checkpoint_id"], ids["execution_id"]):
                assert value not in answer.text, (method, template)
                assert str(uuid.UUID(hex=value)) not in answer.text, (method, template)
            continue
        assert answer.status_code == 404, (method, template, answer.status_code, answer.text)
        stranger = bob.request(method, concrete(template, unknown), **extra)
        assert stranger.status_code == 404, (method, template)
        said, expected = answer.json(), stranger.json()
        assert said["error"] == expected["error"], (method, template)
        for key in ("session_id", "checkpoint_id", "execution_id"):
            said["message"] = said["message"].replace(ids[key], unknown[key])
        assert said == expected, (method, template)
    assert tried >= 30  # every operation of the app, not a handful
    # Nothing of Alice's changed.
    after = alice.get(f"/sessions/{ids['session_id']}").json()
    assert after["executions"] == before["executions"]
    assert after["state"] == "idle"
    result = alice.post(f"/sessions/{ids['session_id']}/execute", json={"code": "print(x, y)"})
    assert result.json()["stdout"] == "1 2\n"  # neither replaced nor restarted
    assert alice.get(f"/sessions/{ids['session_id']}/files/a.txt").content == b"alice's"
    assert alice.get(f"/checkpoints/{ids['checkpoint_id']}").status_code == 200
    listed = alice.get(f"/sessions/{ids['session_id']}/executions").json()["executions"]
    assert all("666" not in e["code"] for e in listed)


def test_the_channels_of_another_tenants_kernel_are_refused(pair: Any) -> None:
    server, _, bob, _, ids, _ = pair
    url = f"ws://127.0.0.1:{server.port}/api/kernels/{uuid.UUID(hex=ids['session_id'])}/channels"
    with pytest.raises(websocket.WebSocketBadStatusException):
        websocket.create_connection(url, header=[f"Authorization: {bob.headers['authorization']}"])
    # Alice's own token opens them: the refusal above is the tenant's, not the route's.
    alice_auth = pair[1].headers["authorization"]
    ws = websocket.create_connection(url, header=[f"Authorization: {alice_auth}"], timeout=30)
    ws.close()


def test_an_admin_sees_every_tenants_sessions_and_checkpoints(pair: Any) -> None:
    _, _, bob, admin, ids, _ = pair
    assert ids["session_id"] in admin.get("/sessions").text
    assert ids["checkpoint_id"] in admin.get("/checkpoints").text
    assert admin.get(f"/sessions/{ids['session_id']}").status_code == 200
    assert ids["session_id"] not in bob.get("/sessions").text


def test_a_restore_from_another_tenants_checkpoint_is_an_unknown_checkpoint(pair: Any) -> None:
    _, _, bob, _, ids, _ = pair
    theirs = bob.post("/sessions", json={"checkpoint": ids["checkpoint_id"]})
    unknown = bob.post("/sessions", json={"checkpoint": UNKNOWN})
    assert theirs.status_code == unknown.status_code == 404
    assert theirs.json()["error"] == unknown.json()["error"] == "checkpoint_not_found"


def test_a_session_keeps_its_tenant_across_a_restart(tmp_path: Path) -> None:
    server, file, tokens = tenants_server(tmp_path, {"alice": {}, "bob": {}})
    alice, bob = client(server, tokens["alice"]), client(server, tokens["bob"])
    session_id = alice.post("/sessions", json={}).json()["id"]
    server.stop()
    again = ServerProcess(
        tmp_path / "work",
        "--tenants",
        str(file),
        token=None,
        env={k: v for k, v in os.environ.items() if k != "KERNELEXEC_TOKEN"},
    )
    try:
        alice, bob = client(again, tokens["alice"]), client(again, tokens["bob"])
        assert alice.get(f"/sessions/{session_id}").status_code == 200
        assert bob.get(f"/sessions/{session_id}").status_code == 404
    finally:
        again.stop()


# -- scopes, and the file read again


def _wait_for_scope(http: httpx.Client, probe: tuple[str, str, Any], refused: bool) -> None:
    """Waits until the server has read the file again: ``probe`` (an operation on
    unknown ids, so that it changes nothing when allowed) is refused, or no longer."""
    method, path, extra = probe

    def settled() -> bool:
        answer = http.request(method, path, **extra)
        return (answer.status_code == 403) == refused

    assert wait_for(settled, 30), f"the tenants file was not read again ({probe})"


def test_each_scope_removed_in_turn_its_routes_answer_403_naming_it(tmp_path: Path) -> None:
    everything = {"carol": {"scopes": list(SCOPES)}}
    server, file, tokens = tenants_server(tmp_path, everything)
    carol = client(server, tokens["carol"])
    try:
        session_id = carol.post("/sessions", json={}).json()["id"]
        carol.put(f"/sessions/{session_id}/files/c.txt", content=b"c")
        checkpoint_id = carol.post(f"/sessions/{session_id}/checkpoint", json={}).json()["id"]
        started = carol.post(f"/sessions/{session_id}/executions", json={"code": "v = 1"})
        ids = {
            "session_id": session_id,
            "checkpoint_id": checkpoint_id,
            "execution_id": started.json()["id"],
            "name": "v",
            "path": "c.txt",
        }
        needs: dict[str, list[tuple[str, str]]] = {}
        for method, template, scope in every_operation():
            if scope is not None:
                needs.setdefault(scope, []).append((method, template))
        assert set(needs) == set(SCOPES) - {"admin"}  # admin widens what a tenant sees
        for scope, operations in needs.items():
            write_tenants(file, {"carol": {"scopes": [s for s in SCOPES if s != scope]}}, tokens)
            server.proc.send_signal(signal.SIGHUP)
            method, template = next(
                (m, t) for m, t in operations if m != "WEBSOCKET" and _PARAM.search(t)
            )
            unknown = {**ids, "session_id": UNKNOWN, "checkpoint_id": UNKNOWN}
            probe = (method, concrete(template, unknown), BODIES.get((method, template), {}))
            _wait_for_scope(carol, probe, refused=True)
            for method, template in operations:
                if method == "WEBSOCKET":
                    url = f"ws://127.0.0.1:{server.port}{concrete(template, ids)}"
                    with pytest.raises(websocket.WebSocketBadStatusException):
                        websocket.create_connection(
                            url, header=[f"Authorization: Bearer {tokens['carol']}"]
                        )
                    continue
                extra = BODIES.get((method, template), {})
                answer = carol.request(method, concrete(template, ids), **extra)
                assert answer.status_code == 403, (scope, method, template, answer.text)
                assert answer.json()["scope"] == scope
                assert f"'{scope}' scope" in answer.json()["message"]
            # What needs another scope still works.
            assert carol.get("/openapi.json").status_code == 200
            write_tenants(file, everything, tokens)
            server.proc.send_signal(signal.SIGHUP)
            _wait_for_scope(carol, probe, refused=False)
    finally:
        carol.close()
        server.stop()


def test_a_rotated_token_works_at_once_and_the_old_one_no_more(tmp_path: Path) -> None:
    server, file, tokens = tenants_server(tmp_path, {"dave": {}})
    try:
        old = client(server, tokens["dave"])
        assert old.get("/sessions").status_code == 200
        rotated = write_tenants(file, {"dave": {}})  # a new token; no signal: the file changed
        new = client(server, rotated["dave"])
        assert wait_for(lambda: new.get("/sessions").status_code == 200, 30)
        assert old.get("/sessions").status_code == 401
        # A broken file keeps the tenants in force: no one is locked out, or let in.
        file.write_text("[tenants.dave\nscopes = ")
        server.proc.send_signal(signal.SIGHUP)
        # Asked once the server has read the broken file (it says so), not after a
        # fixed time in which a loaded machine may not have read it yet.
        assert wait_for(lambda: "stay in force" in server.log.read_text(), 60), (
            server.log.read_text()
        )
        assert new.get("/sessions").status_code == 200
        assert old.get("/sessions").status_code == 401
    finally:
        server.stop()


# -- JWTs from an identity provider


def _jwt_server(tmp_path: Path) -> Any:
    import jwt
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key, stranger = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    (tmp_path / "idp.pem").write_bytes(public)
    file = tmp_path / "tenants.toml"
    file.write_text(
        '[jwt]\nkeys = "idp.pem"\naudience = "kernelexec"\nissuer = "https://idp.test/"\n\n'
        '[tenants.erin]\nscopes = ["sessions", "execute"]\n'
    )
    file.chmod(0o600)
    env = {k: v for k, v in os.environ.items() if k != "KERNELEXEC_TOKEN"}
    server = ServerProcess(tmp_path / "work", "--tenants", str(file), token=None, env=env)

    def token(signer: Any = key, **claims: Any) -> str:
        body = {
            "iss": "https://idp.test/",
            "aud": "kernelexec",
            "sub": "erin@example.test",
            "tenant": "erin",
            "exp": int(time.time()) + 300,
            **claims,
        }
        return jwt.encode(body, signer, algorithm="ES256")

    return server, token, stranger


def test_a_jwt_maps_to_its_tenant_and_bad_ones_answer_401(tmp_path: Path) -> None:
    import base64
    import json

    server, token, stranger = _jwt_server(tmp_path)
    try:
        good = client(server, token())
        made = good.post("/sessions", json={})
        assert made.status_code == 201, made.text
        assert made.json()["id"] in good.get("/sessions").text
        # Scopes are the tenant's: erin has no files:read.
        assert good.get(f"/sessions/{made.json()['id']}/files").status_code == 403

        def b64(data: dict[str, Any]) -> str:
            raw = json.dumps(data).encode()
            return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

        claims = {"iss": "https://idp.test/", "aud": "kernelexec", "tenant": "erin"}
        unsigned = f"{b64({'alg': 'none', 'typ': 'JWT'})}.{b64(claims | {'exp': 2**31})}."
        bad = {
            "expired": token(exp=int(time.time()) - 3600),
            "wrong key": token(stranger),
            "wrong audience": token(aud="another-service"),
            "alg none": unsigned,
            "unknown tenant": token(tenant="mallory"),
        }
        for why, value in bad.items():
            answer = client(server, value).get("/sessions")
            assert answer.status_code == 401, (why, answer.text)
    finally:
        server.stop()


def test_the_guides_table_of_scopes_is_the_routes_own() -> None:
    page = Path(__file__).parent.parent / "docs" / "guides" / "tenants.md"
    rows = re.findall(r"^\| `([A-Z, ]+) (/[^`]*)` \| (.+) \|$", page.read_text(), re.MULTILINE)
    documented: dict[tuple[str, str], str | None] = {}
    for methods, path, said in rows:
        found = re.fullmatch(r"`([a-z:]+)`", said)
        scope = found.group(1) if found else (OPEN if said.startswith("none") else None)
        for method in methods.split(", "):
            documented[(method, path)] = scope
    routes: dict[tuple[str, str], str | None] = {}
    for route in [*ROUTES, *JUPYTER_ROUTES]:
        for method, scope in route.scopes.items():  # type: ignore[attr-defined]
            if method != "HEAD":
                routes[(method, _PARAM.sub(r"{\1}", route.path))] = scope  # type: ignore[attr-defined]
    assert documented == routes


def test_the_schema_gives_every_operation_its_scope_and_its_403_and_429() -> None:
    from kernelexec._server._config import ServerConfig
    from kernelexec._server._openapi import openapi_schema

    schema = openapi_schema(ServerConfig(token="t" * 16, work_root=Path("unused")), ["python3"])
    operations = {
        (method.upper(), path): op
        for path, ops in schema["paths"].items()
        for method, op in ops.items()
        if method != "parameters"
    }
    for method, template, scope in every_operation():
        if method == "WEBSOCKET":
            continue  # not HTTP: the schema leaves it out
        op = operations[(method, _PARAM.sub(r"{\1}", template))]
        assert op.get("x-kernelexec-scope") == scope, (method, template)
        if template != "/openapi.json":
            assert {"401", "403", "429"} <= set(op["responses"]), (method, template)


def test_the_python_client_carries_a_tenants_token(pair: Any) -> None:
    from kernelexec import Client

    server, alice, _, _, ids, _ = pair
    token = alice.headers["authorization"].removeprefix("Bearer ")
    with Client(server.url, token=token) as sdk:
        assert ids["session_id"] in [info.id for info in sdk.sessions()]


def test_a_tenants_kernel_reaches_neither_the_records_key_nor_the_tenants_file(pair: Any) -> None:
    """What would let a kernel forge whose a session is, or read the tenants' hashes."""
    _, _, bob, _, ids, root = pair
    session_id = bob.post("/sessions", json={}).json()["id"]
    work = root / "work"
    targets = [
        work / ".records-key",
        work / ".sessions" / f"{ids['session_id']}.json",
        work / ".sessions" / f"checkpoint-{ids['checkpoint_id']}.json",
        root / "tenants.toml",
    ]
    assert all(path.exists() for path in targets)  # they are there to be reached
    code = (
        "import json\nfound = {}\n"
        f"for path in {[str(p) for p in targets]!r}:\n"
        "    try:\n"
        "        found[path] = open(path).read()[:20]\n"
        "    except OSError as exc:\n"
        "        found[path] = type(exc).__name__\n"
        "print(json.dumps(found))"
    )
    result = bob.post(f"/sessions/{session_id}/execute", json={"code": code}).json()
    found = json.loads(result["stdout"])
    for path in targets:
        assert found[str(path)] in ("FileNotFoundError", "PermissionError"), found
    bob.delete(f"/sessions/{session_id}")


@pytest.mark.parametrize("command", [["serve"], ["mcp", "--http"]])
@pytest.mark.parametrize(
    "mistake",
    ["missing tenants file", "broken tenants file", "audit log in no folder", "token too"],
)
def test_a_wrong_tenants_start_is_one_line_and_leaves_nothing(
    tmp_path: Path, command: list[str], mistake: str
) -> None:
    import subprocess
    import sys

    good = tmp_path / "tenants.toml"
    write_tenants(good, {"alice": {}})
    broken = tmp_path / "broken.toml"
    broken.write_text("[tenants.alice\n")
    broken.chmod(0o600)
    options = {
        "missing tenants file": ["--tenants", str(tmp_path / "absent.toml")],
        "broken tenants file": ["--tenants", str(broken)],
        "audit log in no folder": ["--tenants", str(good), "--audit-log", "/absent/a.jsonl"],
        "token too": ["--tenants", str(good), "--token", "t" * 16],
    }[mistake]
    temp = tmp_path / "temp"
    temp.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "KERNELEXEC_TOKEN"} | {"TMPDIR": str(temp)}
    proc = subprocess.run(
        [sys.executable, "-m", "kernelexec", *command, "--port", "0", *options],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "serving" not in proc.stdout + proc.stderr
    assert list(temp.iterdir()) == []  # no work root made for it, none left behind
