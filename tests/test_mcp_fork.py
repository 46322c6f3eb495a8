"""fork_session, checkpoint_session and restore_session over MCP: local and ``--server``."""

from __future__ import annotations

import json
from pathlib import Path

from _mcpclient import stdio_mcp, texts
from _pids import default_fork_method
from _serverproc import ServerProcess
from test_mcp_remote import call, remote_mcp


async def test_local_fork_checkpoint_and_restore(tmp_path: Path) -> None:
    async with stdio_mcp(tmp_path / "work") as client:
        await call(client, "execute_code", code="x = [1]\ng = (i for i in x)", session="a")
        forked = await call(client, "fork_session", session="a")
        assert not forked.is_error, texts(forked)
        info = json.loads(texts(forked))
        assert info["name"] == "a-fork-1" and info["fork_report"]["method"] == default_fork_method()
        child = await call(client, "execute_code", code="x.append(2); x", session="a-fork-1")
        assert texts(child) == "[1, 2]\n"
        parent = await call(client, "execute_code", code="x", session="a")
        assert texts(parent) == "[1]\n"

        made = await call(client, "checkpoint_session", session="a")
        checkpoint = json.loads(texts(made))
        assert [v["name"] for v in checkpoint["variables"]] == ["x"]
        assert "g (generator)" in checkpoint["text"]
        store = tmp_path / "work" / ".checkpoints" / checkpoint["id"]
        assert (store / "manifest.json").is_file()

        restored = await call(client, "restore_session", checkpoint=checkpoint["id"], name="b")
        assert not restored.is_error, texts(restored)
        assert json.loads(texts(restored))["restore_report"]["restored"] == ["x"]
        assert texts(await call(client, "execute_code", code="x", session="b")) == "[1]\n"

        for bad in ("../x", "0" * 32):
            refused = await call(client, "restore_session", checkpoint=bad)
            assert refused.is_error and "no checkpoint" in texts(refused)
        taken = await call(client, "fork_session", session="a", new_name="b")
        assert taken.is_error and "exists" in texts(taken)
        asked = await call(client, "fork_session", session="a", method="checkpoint")
        report = json.loads(texts(asked))["fork_report"]
        assert report["method"] == "checkpoint" and "method='checkpoint'" in report["reason"]


async def test_remote_fork_checkpoint_and_restore(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "work", "--max-sessions", "4", "--idle-timeout", "0")
    try:
        async with remote_mcp(server, tmp_path / "mcp.log") as client:
            await call(client, "execute_code", code="y = 'made'", session="a")
            forked = json.loads(
                texts(await call(client, "fork_session", session="a", new_name="f"))
            )
            assert forked["name"] == "f"
            assert forked["fork_report"]["method"] == default_fork_method()
            assert texts(await call(client, "execute_code", code="y", session="f")) == "'made'\n"
            asked = await call(client, "fork_session", session="a", method="checkpoint")
            assert json.loads(texts(asked))["fork_report"]["method"] == "checkpoint"
            checkpoint = json.loads(texts(await call(client, "checkpoint_session", session="a")))
            assert checkpoint["variables"][0]["name"] == "y"
            restored = await call(client, "restore_session", checkpoint=checkpoint["id"])
            info = json.loads(texts(restored))
            assert info["restore_report"]["restored"] == ["y"]
            # Named by its server id; the HTTP API sees the same sessions.
            assert texts(await call(client, "execute_code", code="y", session=info["id"])) == (
                "'made'\n"
            )
            listed = {s["id"] for s in server.http.get("/sessions").json()["sessions"]}
            assert {forked["id"], info["id"]} <= listed
            refused = await call(client, "restore_session", checkpoint="../x")
            assert refused.is_error and "checkpoint_not_found" in texts(refused)
    finally:
        assert server.stop() == 0
