"""One JupyterLab watching a server's live sessions, within a tenant's scope.

JupyterLab takes its kernels and its contents from ``kernelexec serve`` under
one tenant's token (``kernelexec.integrations.jupyterlab.SessionsContents``):
its file browser holds that tenant's sessions' transcripts, read through the
server, never another tenant's, never through a link a kernel planted. In
Chromium, an open transcript follows its agent live.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _labproc import LabProcess
from _serverproc import ServerProcess
from test_browser import CHROMIUM, CHROMIUM_ARGS, VIEWPORT, _need_browser, _output
from test_tenants_server import client, tenants_server

CONTENTS = "kernelexec.integrations.jupyterlab.SessionsContents"
FILE_IDS = "jupyter_server_fileid.manager.ArbitraryFileIdManager"
SESSIONS = "kernelexec.integrations.jupyterlab.TranscriptSessions"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, Any]]:
    _need_browser()
    root = tmp_path_factory.mktemp("lab-contents")
    server, _, tokens = tenants_server(root, {"alice": {}, "bob": {}})
    yield server, tokens
    server.stop()


@pytest.fixture(scope="module")
def lab(
    served: tuple[ServerProcess, Any], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LabProcess]:
    """Alice's JupyterLab: the server's kernels and sessions, under her token."""
    server, tokens = served
    argv = (
        f"--GatewayClient.url={server.url}",
        f"--GatewayClient.auth_token={tokens['alice']}",
        f"--ServerApp.contents_manager_class={CONTENTS}",
        f"--FileIdExtension.file_id_manager_class={FILE_IDS}",
        f"--ServerApp.session_manager_class={SESSIONS}",
    )
    proc = LabProcess(tmp_path_factory.mktemp("alices-lab") / "root", None, argv)
    yield proc
    proc.stop()


def test_the_file_browser_holds_the_tenants_sessions_alone(
    served: tuple[ServerProcess, Any], lab: LabProcess
) -> None:
    server, tokens = served
    alice, bob = client(server, tokens["alice"]), client(server, tokens["bob"])
    try:
        mine = alice.post("/sessions", json={}).json()["id"]
        theirs = bob.post("/sessions", json={}).json()["id"]
        alice.post(f"/sessions/{mine}/execute", json={"code": "print('alice ran this')"})
        bob.post(f"/sessions/{theirs}/execute", json={"code": "print('bob ran this')"})
        # Alice's kernel plants links in its work dir: to Bob's folder, and to /.
        plant = f"import os; os.symlink('../{theirs}', 'to-bob'); os.symlink('/', 'root')"
        alice.post(f"/sessions/{mine}/execute", json={"code": plant})
        listed = lab.http.get("/api/contents/").json()
        assert [f["name"] for f in listed["content"]] == [mine], listed
        folder = lab.http.get(f"/api/contents/{mine}").json()
        assert [f["name"] for f in folder["content"]] == ["transcript.ipynb"], folder
        notebook = lab.http.get(f"/api/contents/{mine}/transcript.ipynb").json()
        assert notebook["type"] == "notebook" and notebook["writable"] is False
        sources = [c["source"] for c in notebook["content"]["cells"]]
        assert "print('alice ran this')" in sources, sources
        # Bob's session, and what his kernel planted, are not there for Alice.
        for path in (
            theirs,
            f"{theirs}/transcript.ipynb",
            f"{mine}/to-bob",
            f"{mine}/to-bob/transcript.ipynb",
            f"{mine}/root/etc/passwd",
        ):
            assert lab.http.get(f"/api/contents/{path}").status_code == 404, path
        # Read-only: a transcript is its agent's record.
        saved = lab.http.put(f"/api/contents/{mine}/transcript.ipynb", json=notebook)
        assert saved.status_code == 403 and "read-only" in saved.text, saved.text
        assert lab.http.delete(f"/api/contents/{mine}/transcript.ipynb").status_code == 403
        new = lab.http.post("/api/contents/", json={"type": "notebook"})
        assert new.status_code in (403, 405), new.text

        # A session JupyterLab opens on a transcript gets that session's kernel, and only
        # the tenant's: Bob's id under a path of Alice's is no kernel of hers.
        def open_transcript(session_id: str) -> dict[str, Any]:
            body = {"path": f"{session_id}/transcript.ipynb", "type": "notebook"}
            body["kernel"] = {"name": "python3"}
            opened: dict[str, Any] = lab.http.post("/api/sessions", json=body).json()
            return opened

        opened = open_transcript(mine)
        assert opened["kernel"]["id"].replace("-", "") == mine, opened
        assert len(alice.get("/sessions").json()["sessions"]) == 1
        other = open_transcript(theirs)
        assert other["kernel"]["id"].replace("-", "") not in (mine, theirs), other
    finally:
        alice.close()
        bob.close()


def test_a_transcript_opened_from_the_server_follows_its_agent_live(
    served: tuple[ServerProcess, Any], lab: LabProcess
) -> None:
    from playwright.sync_api import expect, sync_playwright

    server, tokens = served
    alice = client(server, tokens["alice"])
    try:
        session = alice.post("/sessions", json={}).json()["id"]
        alice.post(f"/sessions/{session}/execute", json={"code": "print('first cell')"})
        watched_before = len(alice.get("/sessions").json()["sessions"])
        with sync_playwright() as p:
            chromium = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = chromium.new_page(viewport=VIEWPORT)
            try:
                where = f"{lab.url}/lab/workspaces/alice/tree/{session}/transcript.ipynb"
                page.goto(f"{where}?reset&token={lab.token}")
                expect(_output(page, "first cell")).to_be_visible(timeout=120_000)
                page.evaluate("window.kernelexecNotReloaded = true")
                seconds = []
                for number in (2, 3):
                    code = f"print('cell {number} of alice')"
                    alice.post(f"/sessions/{session}/execute", json={"code": code})
                    began = time.monotonic()
                    expect(_output(page, f"cell {number} of alice")).to_be_visible(timeout=60_000)
                    seconds.append(round(time.monotonic() - began, 2))
                assert page.evaluate("window.kernelexecNotReloaded") is True
                print("seconds from a result to its cell, through the server:", seconds)
                # Watching cost no session: the tab is on the agent's own kernel.
                ids = [s["id"] for s in alice.get("/sessions").json()["sessions"]]
                assert ids.count(session) == 1 and len(ids) == watched_before, lab.sessions()
                (tab,) = [t for t in lab.sessions() if t["path"].startswith(session)]
                assert tab["kernel"]["id"].replace("-", "") == session, tab
            finally:
                page.screenshot(path=str(Path(lab.root).parent / "lab-contents.png"))
                chromium.close()
    finally:
        alice.close()
