"""Variables without a cell: listed and inspected on the control channel, while a cell runs."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from _mcpclient import stdio_mcp, texts
from _serverproc import ServerProcess, wait_for
from conftest import SOON, once_it_says

from kernelexec import AsyncSession, Session

SETUP = """\
import pandas as pd, numpy as np, time
x = 42
words = ["a", "b", "c"]
df = pd.DataFrame({"a": [1, 2, 3], "b": ["x", "y", "z"], "t": pd.to_datetime(["2024-01-01"] * 3)})
arr = np.zeros((3, 4), dtype="float32")
"""
HOSTILE = """\
import time as _t
class Sleeper:
    def __repr__(self):
        while True:
            _t.sleep(1)
    def __len__(self):
        while True:
            _t.sleep(1)
class Raiser:
    def __repr__(self):
        raise RuntimeError("no repr for you")
    def __len__(self):
        raise RuntimeError("no len for you")
sleeper = Sleeper()
raiser = Raiser()
ok = "still here"
"""


async def test_variables_answer_during_a_running_cell_and_touch_nothing(
    session: AsyncSession,
) -> None:
    assert (await session.execute(SETUP)).ok
    before = (await session.execute("n_in = len(In); n_in")).execution_count
    notebook_before = session.notebook_path.read_bytes()
    # Asked once the cell runs (it says so): a fixed wait could end before it began.
    running = await once_it_says(session, "print('running', flush=True)\ntime.sleep(5)\nlate = 1")
    assert not running.done()
    listed = await session.variables()
    assert not running.done()  # answered while the cell still ran
    by_name = {v.name: v for v in listed}
    assert {"x", "words", "df", "arr", "n_in"} <= set(by_name)
    assert "late" not in by_name  # not after the cell: it would have set late
    # IPython's own names, underscores and modules are left out.
    assert not {"In", "Out", "get_ipython", "exit", "quit", "_", "_i1", "pd", "np", "time"} & set(
        by_name
    )
    assert by_name["x"].type == "int" and by_name["x"].repr == "42"
    assert by_name["words"].length == 3
    assert by_name["arr"].shape == [3, 4] and by_name["arr"].dtype == "float32"
    assert by_name["arr"].bytes == 48
    assert by_name["df"].shape == [3, 3] and by_name["df"].type.endswith("DataFrame")
    assert all(v.repr is None or len(v.repr) <= 100 for v in listed)
    detail = await session.inspect("df")
    assert detail is not None and not running.done()
    result = await running
    assert result.ok
    # Nothing counted, nothing in In, nothing in the transcript.
    assert result.execution_count == before + 1
    after = await session.execute("len(In) - n_in")
    assert after.execution_count == before + 2
    assert after.text.strip() == "2"  # the sleeping cell and this one: no more
    await session.flush()
    cells = json.loads(session.notebook_path.read_text())["cells"]
    notebook_cells = json.loads(notebook_before)["cells"]
    assert len(cells) == len(notebook_cells) + 2
    assert "variables" not in json.dumps(cells[len(notebook_cells) :])


async def test_inspect_a_dataframe_and_an_unknown_name(session: AsyncSession) -> None:
    assert (
        await session.execute(SETUP + "wide = pd.DataFrame({f'c{i}': [i] for i in range(150)})")
    ).ok
    detail = await session.inspect("df")
    assert detail is not None
    assert detail.columns == [
        {"name": "a", "dtype": "int64"},
        {"name": "b", "dtype": detail.columns[1]["dtype"]},  # object or str, by pandas version
        {"name": "t", "dtype": detail.columns[2]["dtype"]},
    ]
    assert detail.columns[2]["dtype"].startswith("datetime64")
    assert detail.head is not None and detail.head[0]["a"] == 1 and detail.head[2]["b"] == "z"
    assert detail.head[0]["t"].startswith("2024-01-01")
    assert detail.to_dict()["columns_truncated"] is False
    wide = await session.inspect("wide")
    assert wide is not None and wide.columns is not None
    assert len(wide.columns) == 100 and wide.columns_truncated
    other = await session.inspect("words")
    assert other is not None and other.length == 3 and other.repr == "['a', 'b', 'c']"
    assert {"name": "append", "type": "builtin_function_or_method"} in other.attributes
    assert await session.inspect("no_such_thing") is None
    assert await session.inspect("pd") is None  # a module is not a variable
    assert await session.inspect("In") is None
    json.dumps(detail.to_dict())  # plain JSON


async def test_a_hostile_repr_or_len_does_not_stop_the_listing(session: AsyncSession) -> None:
    assert (await session.execute(HOSTILE)).ok
    for _ in range(2):  # a stuck object stays stuck; asking again still answers
        started = time.monotonic()
        by_name = {v.name: v for v in await session.variables()}
        # Its repr and len never return: a listing that waited on them would never end.
        assert time.monotonic() - started < SOON
        assert by_name["ok"].repr == "'still here'"
        assert by_name["sleeper"].unavailable is not None
        assert "time" in by_name["sleeper"].unavailable
        assert by_name["raiser"].unavailable is not None
        assert "RuntimeError" in by_name["raiser"].unavailable
    detail = await session.inspect("sleeper")
    assert detail is not None and detail.unavailable is not None
    # The kernel still runs cells.
    assert (await session.execute("print(ok)")).text.strip() == "still here"


def test_sync_session_and_a_session_not_started(tmp_path: Path) -> None:
    with Session(tmp_path / "work") as s:
        assert s.variables() == [] and s.inspect("x") is None  # no kernel yet: nothing
        s.execute("y = {'k': 1}")
        assert [v.name for v in s.variables()] == ["y"]
        found = s.inspect("y")
        assert found is not None and found.length == 1


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = ServerProcess(tmp_path_factory.mktemp("server") / "work", "--max-timeout", "60")
    yield proc
    assert proc.stop() == 0


def test_http_variables_while_a_cell_runs(server: ServerProcess) -> None:
    sid = server.create(timeout=60)
    assert server.execute(sid, SETUP)["status"] == "ok"
    http = server.http
    with server.http.stream(
        "POST", f"/sessions/{sid}/execute/stream", json={"code": "time.sleep(5)\nlate = 1"}
    ) as stream:
        # Asked once the server runs the cell: a fixed wait could end before it began.
        assert wait_for(lambda: server.state(sid)["state"] == "busy", 60)
        listed = http.get(f"/sessions/{sid}/variables")
        assert listed.status_code == 200, listed.text
        names = {v["name"] for v in listed.json()["variables"]}
        assert {"x", "words", "df", "arr"} <= names
        assert "late" not in names  # answered while the cell ran, not after it
        detail = http.get(f"/sessions/{sid}/variables/df")
        assert detail.status_code == 200
        assert [c["name"] for c in detail.json()["columns"]] == ["a", "b", "t"]
        assert "result" in "".join(stream.iter_text())
    for name in ("nope", "In", "pd", "%00", "a%2Fb", "x" * 5000):
        missing = http.get(f"/sessions/{sid}/variables/{name}")
        assert missing.status_code == 404, (name, missing.text)
        assert missing.json()["error"] in ("variable_not_found", "not_found")
    assert http.get("/sessions/" + "0" * 32 + "/variables").status_code == 404
    assert server.execute(sid, "len(In)")["execution_count"] == 3


async def test_mcp_list_and_inspect(tmp_path: Path) -> None:
    async with stdio_mcp(tmp_path / "root") as client:
        listed = await client.call_tool("list_variables", {})
        assert listed.is_error and "no session 'default'" in texts(listed)  # not made yet
        ran = await client.call_tool("execute_code", {"code": SETUP})
        assert not ran.is_error
        listed = await client.call_tool("list_variables", {"session": "default"})
        assert {"x", "df"} <= {v["name"] for v in json.loads(texts(listed))}
        detail = await client.call_tool("inspect_variable", {"name": "df"})
        assert not detail.is_error
        assert json.loads(texts(detail))["head"][1]["b"] == "y"
        missing = await client.call_tool("inspect_variable", {"name": "nope"})
        assert missing.is_error and "no variable 'nope'" in texts(missing)
        unknown = await client.call_tool("list_variables", {"session": "ghost"})
        assert unknown.is_error
