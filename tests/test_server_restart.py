"""A restart keeps what is on disk: ``kernelexec serve`` killed with SIGKILL in the middle of
a suspend and of a checkpoint, then started again on the same work root. Real servers and
kernels; the session records' checks against a kernel that forges them, without kernels."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from _serverproc import SLOW, TOKEN, ServerProcess, wait_for

from kernelexec import ConfigurationError
from kernelexec._server._config import ServerConfig
from kernelexec._server._records import Record, Records, claim, sweep_staging
from kernelexec._server._registry import Registry


def staging(work_dir: Path) -> list[str]:
    return [p.name for p in work_dir.glob(".kernelexec-*") if p.is_dir()]


def test_sigkill_mid_suspend_and_mid_checkpoint_then_a_restart_sweeps_resumes_and_says_lost(
    tmp_path: Path,
) -> None:
    root = tmp_path / "work"
    server = ServerProcess(root, "--idle-timeout", "2")
    try:
        suspended = server.create()
        server.execute(suspended, "import json as j\nx = {'k': [1, 2]}")
        assert wait_for(lambda: "checkpoint" in server.state(suspended).get("message", ""))
        # Two checkpoints under way when the server dies: an idle session's suspend,
        # and a POST .../checkpoint, each held up by a variable whose pickling is slow.
        suspending, checkpointing = server.create(), server.create()
        for sid in (suspending, checkpointing):
            server.execute(sid, SLOW + "slow = Slow(120)\nkept = 1")

        def checkpoint() -> None:
            try:
                httpx.post(
                    f"{server.url}/sessions/{checkpointing}/checkpoint",
                    headers=server.auth,
                    json={},
                    timeout=150,
                )
            except httpx.TransportError:
                pass  # the server was killed under it

        threading.Thread(target=checkpoint, daemon=True).start()
        assert wait_for(lambda: staging(root / suspending) and staging(root / checkpointing))
        store = root / ".checkpoints"
        assert len(list(store.iterdir())) == 3  # one made, two half made
    finally:
        server.stop(signal.SIGKILL)

    again = ServerProcess(root, "--idle-timeout", "600")
    try:
        # What the crash left is gone: staging in work dirs, half-made checkpoints.
        for sid in (suspended, suspending, checkpointing):
            assert staging(root / sid) == []
        assert len(list((root / ".checkpoints").iterdir())) == 1
        listed = {s["id"]: s for s in again.http.get("/sessions").json()["sessions"]}
        assert {sid: s["state"] for sid, s in listed.items()} == {
            suspended: "suspended",
            suspending: "lost",
            checkpointing: "lost",
        }
        for sid in (suspending, checkpointing):
            refused = again.http.post(f"/sessions/{sid}/execute", json={"code": "kept"})
            assert refused.status_code == 410, refused.text
            body = refused.json()
            assert body["error"] == "session_lost" and "the server restarted" in body["message"]
            assert again.http.get(f"/sessions/{sid}/notebook").status_code == 200  # files kept
        result = again.execute(suspended, "x['k'].append(3); j.dumps(x)")
        assert result["status"] == "ok", result
        assert result["resumed"]["restored"] == ["x"] and "[1, 2, 3]" in result["text"]
        assert again.http.get("/checkpoints").json()["checkpoints"] == []
        assert again.http.delete(f"/sessions/{suspending}").status_code == 200
        assert again.http.get(f"/sessions/{suspending}").status_code == 404
        assert not (root / ".sessions" / f"{suspending}.json").exists()
    finally:
        assert again.stop() == 0


def test_a_second_server_on_the_same_work_root_is_refused(tmp_path: Path) -> None:
    held = claim(tmp_path)
    try:
        with pytest.raises(ConfigurationError, match="another kernelexec serve"):
            claim(tmp_path)
    finally:
        held.close()
    claim(tmp_path).close()  # free again once the first lets go


# -- records a kernel may write to: nothing forged is trusted


def _record(sid: str, **changes: Any) -> Record:
    fields: dict[str, Any] = {
        "state": "live",
        "kernel_name": "python3",
        "timeout": 60.0,
        "created": time.time(),
    }
    return Record(sid, **(fields | changes))


def test_records_round_trip_and_forged_moved_or_foreign_ones_are_not_trusted(
    tmp_path: Path,
) -> None:
    records = Records(tmp_path, TOKEN)
    mine, other = "a" * 32, "b" * 32
    records.write(_record(mine, env={"K": "v"}, options={"preload": "x = 1"}))
    records.write(_record(other))
    found, refused = records.load()
    assert {r.id for r in found} == {mine, other} and refused == 0
    assert next(r for r in found if r.id == mine).env == {"K": "v"}

    folder = tmp_path / ".sessions"
    # A kernel edits a record: it names a checkpoint, its signature no longer fits.
    forged = json.loads((folder / f"{other}.json").read_text())
    forged["record"].update(state="suspended", checkpoint="c" * 32)
    (folder / f"{other}.json").write_text(json.dumps(forged))
    # ... copies one session's record under another's name ...
    (folder / f"{'d' * 32}.json").write_bytes((folder / f"{mine}.json").read_bytes())
    # ... writes one of its own, and an oversized one.
    (folder / f"{'e' * 32}.json").write_text(json.dumps({"record": {}, "mac": "0" * 64}))
    with open(folder / f"{'f' * 32}.json", "wb") as big:
        big.truncate(64 * 1024 * 1024)
    found, refused = records.load()
    assert [r.id for r in found] == [mine] and refused == 4
    # A server with another token trusts none of them, and leaves them for the right one.
    assert Records(tmp_path, "another-token-0123456789").load() == ([], 5)
    assert (folder / f"{mine}.json").exists()


def test_a_link_planted_for_the_records_is_never_followed(tmp_path: Path) -> None:
    root, elsewhere = tmp_path / "root", tmp_path / "elsewhere"
    root.mkdir()
    elsewhere.mkdir()
    (root / ".sessions").symlink_to(elsewhere)
    records = Records(root, TOKEN)
    assert records.load() == ([], 0)
    records.write(_record("a" * 32))  # the link is moved aside, the record made in place
    assert list(elsewhere.iterdir()) == []
    assert (root / ".sessions").is_dir() and not (root / ".sessions").is_symlink()
    assert [r.id for r in records.load()[0]] == ["a" * 32]


def test_the_staging_sweep_removes_only_staging_and_follows_no_link(tmp_path: Path) -> None:
    sid = "a" * 32
    work, outside = tmp_path / sid, tmp_path / "outside"
    (work / ".kernelexec-checkpoint-0123456789abcdef" / "deep" / "er").mkdir(parents=True)
    (work / ".kernelexec-restore-0123456789abcdef").mkdir()
    (work / ".kernelexec-checkpoint-notmine").mkdir()
    (outside / "keep").mkdir(parents=True)
    (work / ".kernelexec-restore-fedcba9876543210").symlink_to(outside)
    assert sweep_staging(tmp_path, sid) == 2
    names = sorted(p.name for p in work.iterdir())
    assert names == [".kernelexec-checkpoint-notmine", ".kernelexec-restore-fedcba9876543210"]
    assert (outside / "keep").is_dir()


def _checkpoint(store: Path, checkpoint_id: str, work_dir: Path) -> None:
    """A minimal checkpoint of the store, as if made from ``work_dir``."""
    folder = store / checkpoint_id
    folder.mkdir(parents=True)
    manifest = {
        "kernelexec_checkpoint": 1,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "python": {"implementation": "cpython", "version": [3, 11, 7]},
        "packages": {},
        "parent": {"work_dir": str(work_dir), "transcript": "", "cells": 0},
        "execution_count": 1,
        "variables": [],
        "modules": {},
        "skipped": [],
        "files": {"count": 0},
        "bytes": 0,
    }
    (folder / "manifest.json").write_text(json.dumps(manifest))


def test_a_record_naming_another_sessions_checkpoint_is_lost_not_resumed(
    tmp_path: Path,
) -> None:
    root = (tmp_path / "root").resolve()
    owner, thief, stranger = "a" * 32, "b" * 32, "c" * 32
    mine, yours = "1" * 32, "2" * 32
    _checkpoint(root / ".checkpoints", mine, root / owner)
    _checkpoint(root / ".checkpoints", yours, root / stranger)
    records = Records(root, TOKEN)
    records.write(_record(owner, state="suspended", checkpoint=mine))
    # Signed (as a kernel cannot), yet naming checkpoints that are not theirs.
    records.write(_record(thief, state="suspended", checkpoint=mine, created=time.time() + 1))
    records.write(_record(stranger, state="suspended", checkpoint=yours, created=time.time() + 2))
    registry = Registry(ServerConfig(token=TOKEN, work_root=root, idle_timeout=None))
    asyncio.run(registry.recover())
    states = {e.id: e.state for e in registry.entries()}
    assert states == {owner: "suspended", thief: "lost", stranger: "suspended"}
    assert registry.store.suspends == {mine: owner, yours: stranger}
    assert "is gone or is not this session's" in (registry.get(thief).lost or "")
    assert os.path.isdir(root / ".checkpoints" / mine)  # the owner's, untouched
