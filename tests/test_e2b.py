"""E2B's own Python SDK, from PyPI, against ``kernelexec serve --e2b`` (issue #31).

The SDK calls E2B's cloud unless told otherwise, so it never runs in the test's
own network: ``_e2b_sandbox.py`` runs in a namespace with only loopback
(``_netns``), starts the server there with two tenants, and runs code written
for E2B with only the SDK's settings changed. Each test here reads one part of
what it saw; the run is shared (one server start, one namespace).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
from _netns import netns_missing, run_in_netns

SCRIPT = Path(__file__).with_name("_e2b_sandbox.py")


def _missing() -> str | None:
    if importlib.util.find_spec("e2b_code_interpreter") is None:
        return "E2B's SDK is not installed (the test extra has e2b-code-interpreter)"
    return netns_missing()


@pytest.fixture(scope="module")
def seen() -> dict[str, Any]:
    why = _missing()
    if why is not None:
        pytest.skip(why)
    run = run_in_netns(SCRIPT, timeout=400)
    assert run.answer["error"] is None, run.answer["error"] + run.log
    assert run.leaked == [], f"left running in the namespace: {run.leaked}"
    answer: dict[str, Any] = run.answer
    return answer


def test_an_e2b_script_runs_unchanged(seen: dict[str, Any]) -> None:
    done = seen["acceptance"]
    # Three cells that keep state, streamed to the callbacks as they ran.
    assert done["third"] == {
        "stdout": ["x is 42\n"],
        "stderr": ["warn\n"],
        "text": "42",
        "count": 3,
    }
    assert done["callbacks"] == {"stdout": ["x is 42\n"], "results": ["42"]}
    # A matplotlib chart's PNG in results, a DataFrame's HTML.
    assert "png" in done["chart"]["formats"][0]
    assert done["chart"]["png_head"] == "iVBORw0KGgoA"  # base64 of PNG's signature
    assert done["html"] == [True]
    # A file written and read back, by the SDK and by the kernel; listed, checked, removed.
    assert done["written"] == ["notes.txt", "/home/user/data/notes.txt"]
    assert done["read_back"] == "kernelexec"
    assert done["kernel_reads"] == "'kernelexec'"
    assert done["listed"] == ["notes.txt"]
    assert done["exists"] == [True, False]
    assert done["removed"] is False
    # The user's error is data.
    assert done["error"] == ["ValueError", "no such thing", True]
    # A second context: its own variables, in its own cwd, the sandbox's files.
    assert done["context"] == {"cwd": "/home/user/data", "text": "True", "listed": True}
    assert done["after"] == "42"
    assert done["command"] == [0, "from bash\n", "oops\n"]
    greeting, cwd = done["placed"].splitlines()
    assert greeting == "hi" and cwd.endswith("/data"), done["placed"]
    assert done["exit_error"] == ["CommandExitException", 3, "partial\n"]
    assert done["running"] is True
    assert done["via_connect"] == "42"
    assert done["killed"] is True
    assert done["running_after_kill"] is False


def test_a_wrong_key_is_the_sdks_authentication_error(seen: dict[str, Any]) -> None:
    refused = seen["refusals"]
    assert refused["wrong_key"]["type"] == "AuthenticationException"
    assert refused["wrong_key"]["message"].startswith("401: Unauthorized")
    assert "E2B_API_KEY" in refused["wrong_key"]["message"]
    assert refused["no_key"]["type"] == "AuthenticationException"  # the SDK's own, sent nowhere
    assert refused["no_key_raw"] == [401, 401]


def test_a_call_not_served_is_an_error_naming_it(seen: dict[str, Any]) -> None:
    refused = seen["refusals"]
    assert refused["pause"]["type"] == "SandboxException"
    assert (
        "501: kernelexec does not support E2B's call POST /sandboxes/"
        in refused["pause"]["message"]
    )
    assert "/pause" in refused["pause"]["message"]
    assert "language 'javascript'" in refused["javascript"]["message"]
    assert "filesystem.Filesystem/CreateWatcher" in refused["watch_dir"]["message"]


def test_no_path_reaches_outside_the_work_dir(seen: dict[str, Any]) -> None:
    refused = seen["refusals"]
    for name in ("etc_passwd", "climbing", "relative_climb", "write_outside"):
        assert refused[name]["type"] == "SandboxException", refused[name]
        assert "is outside the sandbox" in refused[name]["message"]
    assert "symlink" in refused["planted"]["message"], refused["planted"]
    assert "read" not in refused["planted"]


def test_another_tenants_sandbox_is_not_found(seen: dict[str, Any]) -> None:
    theirs = seen["refusals"]["other_tenant"]
    assert theirs["connect"]["type"] == "SandboxNotFoundException"
    assert theirs["get_info"]["type"] == "SandboxNotFoundException"
    assert theirs["kill"] == {"answer": "False"}
    assert "was not found" in theirs["run_code"]["message"]
    assert theirs["files_read"]["type"] == "SandboxNotRunningException", theirs["files_read"]
    assert len(theirs["listed"]) == 1  # their own sandbox only
    assert seen["refusals"]["still_running"] is True  # the first tenant's, untouched


def test_run_code_timeout_interrupts_and_keeps_state(seen: dict[str, Any]) -> None:
    timeout = seen["refusals"]["timeout"]
    assert timeout["raised"]["type"] == "TimeoutException"
    assert "Execution timed out" in timeout["raised"]["message"]
    assert timeout["kept"] == "7" and timeout["error"] is None
    assert timeout["seconds"] < 30  # the 60 s sleep was interrupted, not waited out


def test_hostile_bodies_at_the_e2b_door_are_refused_in_words(tmp_path: Path) -> None:
    # The server alone, on 127.0.0.1 (no SDK, so no namespace is needed). A body nested
    # too deep was a 500 (RecursionError), on the API and on envd's Connect routes.
    from _serverproc import TOKEN, ServerProcess

    server = ServerProcess(tmp_path / "work", "--e2b", "--max-body-mb", "1")
    try:
        key = {"X-API-KEY": TOKEN}
        seen = {}
        for name, body in (
            ("deep", b"[" * 100_000),
            ("nan", b'{"timeout": NaN}'),
            ("big", b'{"metadata": {"a": "' + b"x" * 2_000_000 + b'"}}'),
        ):
            answer = server.http.post("/e2b/sandboxes", content=body, headers=key)
            seen[name] = [answer.status_code, answer.json()["error"]]
        assert seen == {
            "deep": [400, "invalid_json"],
            "nan": [400, "invalid_json"],
            "big": [413, seen["big"][1]],
        }, seen
        made = server.http.post("/e2b/sandboxes", json={}, headers=key).json()["sandboxID"]
        envd = {"X-Access-Token": TOKEN, "E2b-Sandbox-Id": made}
        deep = server.http.post(
            "/e2b/sandbox/filesystem.Filesystem/Stat", content=b"[" * 100_000, headers=envd
        )
        assert deep.status_code == 400 and deep.json()["code"] == "invalid_argument", deep.text
        assert "nested too deep" in deep.json()["message"]
    finally:
        server.stop()
