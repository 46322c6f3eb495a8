"""Every door gives the same answer: the library and the HTTP clients return the same types,
field by field, for the same data (issue 26), and every time is ISO 8601 UTC text.

One local session and one remote session do the same things (variables, a
checkpoint, a restore, a fork, a background execution); the shapes of what they
return are compared: each field's name and type, down into lists of
dataclasses. The only differences allowed are the ones listed, each with why.
"""

from __future__ import annotations

import dataclasses
import datetime
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _serverproc import ServerProcess

from kernelexec import (
    AsyncClient,
    AsyncSession,
    Checkpoint,
    CheckpointInfo,
    CheckpointVariable,
    Client,
    ExecutionResult,
    FileInfo,
    ForkReport,
    RestoreReport,
    Session,
    SessionInfo,
    SkippedVariable,
    Variable,
    VariableDetail,
)
from kernelexec._times import iso

SETUP = "import math\nx = 41\nitems = {'a': [1, 2]}\ngen = (i for i in range(3))"
ISO_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
# What a checkpoint has on one side only, and why.
LOCAL_ONLY = {"path", "manifest"}  # a folder of the caller's; the server's stays on the server
REMOTE_ONLY = {"id", "session", "suspend"}  # in the server's store: its id, whose, why made
# An execution's attributes a person reads, on both sides.
EXECUTION = (
    "id",
    "state",
    "status",
    "code",
    "language",
    "created",
    "started",
    "finished",
    "events_end",
    "result",
    "error",
)


def shape(value: Any) -> Any:
    """A value's type, recursively: a dataclass as {field: shape}, a list as [its items']."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            type(value).__name__: {
                f.name: shape(getattr(value, f.name)) for f in dataclasses.fields(value)
            }
        }
    if isinstance(value, (list, tuple)):
        return [type(value).__name__, *sorted({repr(shape(item)) for item in value})]
    if isinstance(value, dict):
        return ["dict", *sorted({f"{type(k).__name__}: {shape(v)!r}" for k, v in value.items()})]
    return type(value).__name__


def fields_of(value: Any, names: tuple[str, ...] | None = None) -> dict[str, Any]:
    names = names or tuple(f.name for f in dataclasses.fields(value))
    return {name: shape(getattr(value, name)) for name in names}


def is_time(text: Any) -> bool:
    return (
        isinstance(text, str)
        and bool(ISO_UTC.match(text))
        and bool(datetime.datetime.fromisoformat(text.replace("Z", "+00:00")))
    )


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = ServerProcess(tmp_path_factory.mktemp("shapes") / "work", "--max-sessions", "6")
    yield proc
    assert proc.stop() == 0


def test_checkpoints_variables_forks_restores_and_executions_have_one_shape(
    server: ServerProcess, tmp_path: Path
) -> None:
    with (
        Session(tmp_path / "local", timeout=60) as local,
        Client(server.url, token=server.token) as client,
    ):
        remote = client.session(timeout=60)
        for door in (local, remote):
            assert door.execute(SETUP).ok

        # Variables, listed and inspected, without running a cell.
        here, there = local.variables(), remote.variables()
        assert all(type(v) is Variable for v in [*here, *there])
        assert [(v.name, v.type) for v in here] == [(v.name, v.type) for v in there]
        assert [shape(v) for v in here] == [shape(v) for v in there]
        detail_here, detail_there = local.inspect("items"), remote.inspect("items")
        assert type(detail_here) is type(detail_there) is VariableDetail
        assert shape(detail_here) == shape(detail_there)
        assert local.inspect("missing") is None and remote.inspect("missing") is None

        # A checkpoint: the same field types (variables are CheckpointVariable on both).
        saved = local.checkpoint(tmp_path / "checkpoint")
        stored = remote.checkpoint()
        assert type(saved) is Checkpoint and type(stored) is CheckpointInfo
        local_fields = {f.name for f in dataclasses.fields(saved)} | {"size"}
        remote_fields = {f.name for f in dataclasses.fields(stored)}
        assert local_fields - remote_fields == LOCAL_ONLY
        assert remote_fields - local_fields == REMOTE_ONLY
        common = tuple(sorted(local_fields & remote_fields))
        assert fields_of(saved, common) == fields_of(stored, common)
        for made in (saved, stored):
            assert [type(v) for v in made.variables] == [CheckpointVariable] * 2
            assert [(s.name, type(s)) for s in made.skipped] == [("gen", SkippedVariable)]
            assert is_time(made.created), made.created
        assert [v.name for v in saved.variables] == [v.name for v in stored.variables]
        assert CheckpointInfo.from_dict(stored.to_dict()) == stored  # the wire round-trips

        # A restore and a fork report, as they come back on each side.
        restored_here = Session.restore(saved, tmp_path / "restored")
        restored_there = client.restore(stored)
        try:
            reports = (restored_here.restore_report, restored_there.restore_report)
            assert all(type(r) is RestoreReport for r in reports)
            assert shape(reports[0]) == shape(reports[1])
        finally:
            restored_here.close()
            restored_there.close()
        fork_here, fork_there = local.fork(tmp_path / "fork"), remote.fork()
        try:
            forks = (fork_here.fork_report, fork_there.fork_report)
            assert all(type(r) is ForkReport for r in forks)
            assert shape(forks[0]) == shape(forks[1])
        finally:
            fork_here.close()
            fork_there.close()

        # A background execution, once it has ended.
        runs = [door.execute("print(x + 1)", background=True) for door in (local, remote)]
        results = [run.wait(timeout=60) for run in runs]
        assert all(type(r) is ExecutionResult and r.stdout == "42\n" for r in results)
        here_run, there_run = (fields_of(run, EXECUTION) for run in runs)
        assert here_run == there_run, (here_run, there_run)
        for run in runs:
            assert all(is_time(t) for t in (run.created, run.started, run.finished))
            assert run.created <= run.started <= run.finished
        assert results[0].to_dict().keys() == results[1].to_dict().keys()

        # The session and its files: times in the same format.
        info, (listed,) = remote.info(), [f for f in remote.files() if f.path == "transcript.ipynb"]
        assert type(info) is SessionInfo and type(listed) is FileInfo
        assert is_time(info.created) and is_time(info.last_activity) and is_time(listed.modified)
        remote.close()


async def test_the_async_doors_match_too(server: ServerProcess, tmp_path: Path) -> None:
    async with (
        AsyncSession(tmp_path / "local", timeout=60) as local,
        AsyncClient(server.url, token=server.token) as client,
    ):
        remote = await client.session(timeout=60)
        try:
            for door in (local, remote):
                assert (await door.execute(SETUP)).ok
            here, there = await local.variables(), await remote.variables()
            assert [shape(v) for v in here] == [shape(v) for v in there]
            assert await remote.inspect("missing") is None
            runs = [await door.execute("x", background=True) for door in (local, remote)]
            for run in runs:
                assert (await run.wait(timeout=60)).text == "41\n"  # type: ignore[union-attr]
            assert fields_of(runs[0], EXECUTION) == fields_of(runs[1], EXECUTION)
            stored = await remote.checkpoint()
            assert {type(v) for v in stored.variables} == {CheckpointVariable}
        finally:
            await remote.close()


def test_times_are_iso_8601_utc_to_the_millisecond() -> None:
    assert iso(0) == "1970-01-01T00:00:00.000Z"
    assert iso(1_750_000_000.2504) == "2025-06-15T15:06:40.250Z"
    assert iso(1_750_000_000.9999) == "2025-06-15T15:06:40.999Z"  # never the next second's
    assert sorted([iso(2.5), iso(10.0), iso(1.25)]) == [iso(1.25), iso(2.5), iso(10.0)]
