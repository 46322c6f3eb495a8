"""Session options over HTTP (``POST /sessions``): what the library takes, within the
operator's flags. A real ``kernelexec serve`` each; Docker on the real engine."""

# Fixtures from servers.py are imported by name and used as parameters:
# ruff: noqa: F401, F811

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _serverproc import ServerProcess
from servers import kernel_image

from kernelexec import AsyncClient, Client, Limits, ServerError
from kernelexec._server._options import OPTION_FIELDS

# This interpreter as named, not resolved: in a venv, bin/python links to the base
# interpreter, which lacks the venv's packages (ipykernel among them).
PYTHON = os.path.abspath(sys.executable)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A server with the default flags: only preload and lower limits allowed."""
    proc = ServerProcess(tmp_path_factory.mktemp("options") / "work", "--max-sessions", "4")
    yield proc
    assert proc.stop() == 0
    assert "Traceback" not in proc.log.read_text(), proc.log.read_text()[-3000:]


def container_of(work_dir: Path) -> dict[str, Any]:
    """The running kernelexec container that mounts ``work_dir`` (docker inspect)."""
    listed = subprocess.run(
        ["docker", "ps", "-q", "--filter", "label=kernelexec"],
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout.split()
    inspected = subprocess.run(
        ["docker", "inspect", *listed], capture_output=True, text=True, timeout=60
    )
    found = [
        c
        for c in json.loads(inspected.stdout or "[]")
        if any(m["Source"] == str(work_dir.resolve()) for m in c["Mounts"])
    ]
    assert len(found) == 1, found
    return dict(found[0])


def refusal(server: ServerProcess, body: dict[str, Any]) -> tuple[int, str, str]:
    answer = server.http.post("/sessions", json=body)
    data = answer.json()
    return answer.status_code, data["error"], data["message"]


@pytest.mark.parametrize(
    ("body", "flag"),
    [
        ({"python": "/bin/sh"}, "--allow-python"),
        ({"python": PYTHON}, "--allow-python"),
        ({"venv": "data"}, "--allow-packages"),
        ({"packages": ["rich"]}, "--allow-packages"),
        ({"python_version": "3.12"}, "--allow-packages"),
        ({"docker": {}}, "--allow-docker"),
        ({"docker": {"memory": "256m"}}, "--allow-docker"),
        ({"gateway": "http://127.0.0.1:9"}, "--allow-gateway"),
    ],
)
def test_an_option_the_operator_has_not_allowed_is_a_403_naming_the_flag(
    server: ServerProcess, body: dict[str, Any], flag: str
) -> None:
    status, code, message = refusal(server, body)
    assert (status, code) == (403, "option_not_allowed"), message
    assert flag in message
    assert server.http.get("/sessions").json()["sessions"] == []  # nothing was started


@pytest.mark.parametrize(
    ("body", "said"),
    [
        ({"limits": {"max_text_chars": 10**9}}, "max_text_chars must be a whole number"),
        ({"limits": {"max_text_chars": 999}}, "from 1,000 to 20,000"),
        ({"limits": {"max_outputs": "5"}}, "max_outputs must be a whole number"),
        ({"limits": {"max_outputs": True}}, "max_outputs must be a whole number"),
        ({"limits": {"max_memory": 5}}, "unknown limit(s) max_memory"),
        ({"limits": [1]}, "limits must be an object"),
        ({"venv": "../x"}, "must be a name"),
        ({"venv": "/tmp/elsewhere"}, "must be a name"),
        ({"packages": "rich"}, "packages must be a list"),
        ({"packages": ["--index-url=http://evil"]}, "is not a requirement"),
        ({"packages": ["rich @ file:///etc"]}, "is not a requirement"),
        ({"python_version": "2.7;rm -r"}, "must look like '3.12'"),
        ({"python": 3}, "python must be a string"),
        ({"preload": 1}, "preload must be a string"),
        ({"preload": "1/0"}, "ZeroDivisionError"),
        ({"docker": {"image": "alpine"}}, "unknown docker option(s) image"),
        ({"docker": {"volumes": ["/:/host"]}}, "unknown docker option(s) volumes"),
    ],
)
def test_a_value_that_cannot_be_used_is_a_422_saying_why(
    server: ServerProcess, body: dict[str, Any], said: str
) -> None:
    status, code, message = refusal(server, body)
    assert (status, code) == (422, "invalid_option"), message
    assert said in message


def test_a_venv_path_into_another_sessions_work_dir_is_refused(server: ServerProcess) -> None:
    other = server.create()
    other_dir = server.work_root / other
    try:
        for venv in (str(other_dir), f"../{other}", f"{other}/venv", str(other_dir / "venv")):
            status, _, message = refusal(server, {"venv": venv})
            assert status == 422 and "not a path" in message, (venv, message)
        assert sorted(p.name for p in other_dir.iterdir()) == []  # nothing made in it
    finally:
        server.http.delete(f"/sessions/{other}")


def test_preload_and_limits_shape_the_session(server: ServerProcess) -> None:
    body = {
        "preload": "import json as preloaded_json\nmarker = 'preloaded'",
        "limits": {"max_text_chars": 1000, "max_result_bytes": 500_000},
    }
    answer = server.http.post("/sessions", json=body)
    assert answer.status_code == 201, answer.text
    sid, options = answer.json()["id"], answer.json()["options"]
    try:
        assert options["preload"] == body["preload"]
        assert options["limits"]["max_text_chars"] == 1000
        # A result of 500,000 bytes has room for no 1,000,000-byte output: lowered to fit.
        assert options["limits"]["max_output_bytes"] == 500_000
        listed = server.http.get("/sessions").json()["sessions"]
        assert [s["options"]["limits"]["max_text_chars"] for s in listed] == [1000]
        seen = server.execute(sid, "print(marker, preloaded_json.dumps(1))")
        assert seen["stdout"] == "preloaded 1\n"
        long = server.execute(sid, "print('x' * 50_000)")
        assert len(long["text"]) < 3000 < len(long["stdout"])  # text cut, the stream kept
        server.http.post(f"/sessions/{sid}/restart")
        assert server.execute(sid, "print(marker)")["stdout"] == "preloaded\n"  # after restart
    finally:
        server.http.delete(f"/sessions/{sid}")


def test_the_schema_documents_every_option_within_the_caps(server: ServerProcess) -> None:
    schema = server.http.get("/openapi.json").json()
    create = schema["components"]["schemas"]["CreateSession"]["properties"]
    assert set(OPTION_FIELDS) <= set(create)
    limits = create["limits"]["properties"]
    assert limits["max_text_chars"]["maximum"] == Limits().max_text_chars
    assert limits["max_outputs"]["minimum"] == 1
    assert set(create["docker"]["properties"]) == {"memory", "cpus", "pids_limit", "network"}
    assert "--allow-python" in create["python"]["description"]
    responses = schema["paths"]["/sessions"]["post"]["responses"]
    assert {"403", "422"} <= set(responses)


def test_only_the_interpreters_the_operator_allows(tmp_path: Path) -> None:
    impostor = tmp_path / "bin" / "python3"
    impostor.parent.mkdir()
    impostor.symlink_to("/bin/sh")  # named like a Python, runs a shell
    alias = tmp_path / "bin" / "allowed-python"
    alias.symlink_to(PYTHON)
    server = ServerProcess(tmp_path / "work", "--allow-python", PYTHON)
    try:
        for python in ("/bin/sh", str(impostor), "python3", f"{PYTHON}/../sh"):
            status, code, message = refusal(server, {"python": python})
            assert (status, code) == (403, "option_not_allowed"), (python, message)
            assert PYTHON in message and "--allow-python" in message
        for python in (PYTHON, str(alias)):  # a link to an allowed one is that one
            sid = server.create(python=python)
            # The operator's spelling runs: this venv's interpreter with its packages,
            # not the base interpreter a link resolves to.
            ran = server.execute(sid, "import sys; print(sys.executable, sys.prefix)")
            assert ran["stdout"].split() == [PYTHON, sys.prefix], ran
            assert server.http.get(f"/sessions/{sid}").json()["options"] == {"python": PYTHON}
            server.http.delete(f"/sessions/{sid}")
    finally:
        assert server.stop() == 0
    assert "Traceback" not in server.log.read_text()


def test_a_bad_policy_flag_is_one_line_and_exit_2(tmp_path: Path) -> None:
    for flags, said in (
        (["--allow-python", "python3"], "--allow-python python3"),
        (["--allow-python", str(tmp_path / "missing")], "--allow-python"),
        (["--docker-max-memory", "lots"], "--docker-max-memory"),
        (["--docker-max-cpus", "0"], "--docker-max-cpus"),
    ):
        run = subprocess.run(
            [sys.executable, "-m", "kernelexec", "serve", "--port", "0", *flags],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert run.returncode == 2, (flags, run.stderr)
        assert len(run.stderr.strip().splitlines()) == 1 and said in run.stderr, run.stderr


def test_the_clients_send_the_options(server: ServerProcess) -> None:
    with Client(server.url, token=server.token) as client:
        with client.session(limits=Limits(max_text_chars=1000), preload="y = 6") as session:
            assert session.execute("print(y * 7)").text == "42\n"
            info = client.attach(session.id).last_info
            assert info.id == session.id
        with pytest.raises(ServerError) as refused:
            client.session(python="/bin/sh")
        assert refused.value.status == 403 and "--allow-python" in str(refused.value)
        with pytest.raises(ServerError) as invalid:
            client.session(limits={"max_text_chars": 10**9})
        assert invalid.value.status == 422


async def test_the_async_client_sends_the_options(server: ServerProcess) -> None:
    async with AsyncClient(server.url, token=server.token) as client:
        async with client.session(preload="z = 5", limits={"max_outputs": 3}) as session:
            result = await session.execute("for i in range(5): display(i)\nprint(z)")
            assert "5" in result.stdout and len(result.outputs) <= 4, result.outputs
        with pytest.raises(ServerError) as refused:
            await client.session(docker={"memory": "256m"})
        assert refused.value.status == 403 and "--allow-docker" in str(refused.value)


def test_a_docker_session_with_its_limits(kernel_image: str, tmp_path: Path) -> None:
    server = ServerProcess(
        tmp_path / "work",
        *("--allow-docker", "--docker-image", kernel_image),
        *("--docker-max-memory", "512m", "--docker-max-pids", "128"),
    )
    try:
        over = refusal(server, {"docker": {"memory": "1g"}})
        assert over[:2] == (422, "invalid_option") and "--docker-max-memory" in over[2]
        network = refusal(server, {"docker": {"network": "bridge"}})
        assert network[:2] == (403, "option_not_allowed")
        assert "--allow-docker-network bridge" in network[2]

        sid = server.create(docker={"memory": "256m", "cpus": 1}, limits={"max_outputs": 5})
        probe = (
            "import os\nopen('from-container.txt', 'w').write('hi')\n"
            "print(sorted(os.listdir('/sys/class/net')), os.getcwd())"
        )
        ran = server.execute(sid, probe)
        assert ran["status"] == "ok", ran["text"]
        assert ran["stdout"] == "['lo'] /workspace\n"
        host = container_of(server.work_root / sid)["HostConfig"]
        # The memory asked for, the pids cap the operator set (not asked for: never unlimited).
        assert (host["Memory"], host["NanoCpus"], host["PidsLimit"]) == (256 << 20, 10**9, 128)
        assert server.http.get(f"/sessions/{sid}/files/from-container.txt").content == b"hi"
        info = server.http.get(f"/sessions/{sid}").json()
        assert info["options"]["docker"]["network"] == "none"
        assert server.http.delete(f"/sessions/{sid}").status_code == 200
    finally:
        assert server.stop() == 0
    assert "Traceback" not in server.log.read_text()


def test_a_venv_session_with_packages_and_limits(tmp_path: Path) -> None:
    server = ServerProcess(
        tmp_path / "work", "--allow-packages", "--venv-root", str(tmp_path / "venvs")
    )
    try:
        sid = server.create(venv="richenv", packages=["rich"], limits={"max_text_chars": 1000})
        ran = server.execute(sid, "import rich, sys; print(sys.prefix)")
        assert ran["status"] == "ok", ran["text"]
        assert ran["stdout"].strip() == str((tmp_path / "venvs" / "richenv").resolve())
        assert os.path.isdir(tmp_path / "venvs" / "richenv")
    finally:
        assert server.stop() == 0
