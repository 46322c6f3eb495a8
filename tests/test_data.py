"""ExecutionResult.data: DataFrames and matplotlib figures come back as data, not only text."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import nbformat
import pytest
from _mcpclient import stdio_mcp
from _serverproc import ServerProcess

from kernelexec import AsyncSession, ChartData, Client, ExecutionResult, TableData
from kernelexec._execution._data import CHART_MIMETYPE, TABLE_MIMETYPE, collect, read_data

MIXED = """\
import pandas as pd, numpy as np
df = pd.DataFrame({
    "n": np.array([1, 2, 3], dtype="int64"),
    "x": [1.5, np.nan, np.inf],
    "s": ["a", "b", None],
    "t": pd.to_datetime(["2024-01-02 03:04:05", None, "2024-03-01 00:00:00"]),
})
df
"""
BAR = """\
import matplotlib.pyplot as plt
fig, ax = plt.subplots()
ax.bar(["apples", "pears", "plums"], [3, 5.5, -1], label="sold")
ax.set_title("Fruit")
ax.set_xlabel("kind")
ax.set_ylabel("count")
ax.legend()
plt.show()
"""
LINES = """\
import matplotlib.pyplot as plt
fig, (left, right) = plt.subplots(1, 2)
left.plot([0, 1, 2], [0, 1, 4], label="square")
left.plot([0, 1, 2], [float("nan"), 1, 2])
right.scatter([1, 2], [3, 4], label="dots")
fig.suptitle("Two")
plt.show()
"""


def _one(result: ExecutionResult, kind: type[Any]) -> Any:
    assert result.ok, result.text
    found = [d for d in result.data if isinstance(d, kind)]
    assert len(found) == 1, result.data
    return found[0]


def _no_json_in_text(result: ExecutionResult) -> None:
    # text is for reading: the table's own text, the image's file, never the payloads.
    assert "vnd.kernelexec" not in result.text
    assert '"records"' not in result.text and '"points"' not in result.text
    assert "iVBOR" not in result.text  # base64 of a PNG


@pytest.mark.usefixtures("kernel_start")
async def test_a_dataframe_result_comes_back_as_data(tmp_path: Path) -> None:
    async with AsyncSession(tmp_path / "work", timeout=60) as session:
        result = await session.execute(MIXED)
        table = _one(result, TableData)
        await session.flush()
        notebook_path = session.notebook_path
    assert table.type == "table" and table.library == "pandas"
    assert table.shape == [3, 4] and not table.truncated
    assert [(c.name, c.dtype.split("[")[0]) for c in table.columns] == [
        ("n", "int64"),
        ("x", "float64"),
        ("s", table.columns[2].dtype),  # "object" or pandas 3's "str"
        ("t", "datetime64"),
    ]
    assert table.records == [
        {"n": 1, "x": 1.5, "s": "a", "t": "2024-01-02T03:04:05"},
        {"n": 2, "x": None, "s": "b", "t": None},
        {"n": 3, "x": None, "s": None, "t": "2024-03-01T00:00:00"},
    ]
    assert table.index is not None and table.index.values == [0, 1, 2]
    assert type(table.records[0]["n"]) is int
    assert result.outputs[table.output]["output_type"] == "execute_result"
    # The text is the table's text/plain, as before.
    assert "2024-01-02 03:04:05" in result.text and "NaN" in result.text
    _no_json_in_text(result)
    wire = json.loads(json.dumps(result.to_dict(), allow_nan=False))
    assert wire["data"][0]["records"][1] == {"n": 2, "x": None, "s": "b", "t": None}
    assert ExecutionResult.from_dict(wire) == result
    # The notebook keeps the bundle, and is still a valid notebook.
    notebook = nbformat.read(notebook_path, as_version=4)
    nbformat.validate(notebook)
    kept = [o for c in notebook.cells if c.cell_type == "code" for o in c.outputs]
    assert any(TABLE_MIMETYPE in o.get("data", {}) for o in kept)


async def test_a_big_frame_is_capped(session: AsyncSession) -> None:
    tall = _one(
        await session.execute(
            "import pandas as pd\npd.DataFrame({'a': range(10_000), 'b': ['w' * 1000] * 10_000})"
        ),
        TableData,
    )
    assert tall.shape == [10_000, 2] and tall.truncated
    assert len(tall.records) == 20 and tall.records[19]["a"] == 19
    assert len(tall.records[0]["b"]) == 200 and tall.records[0]["b"].endswith("…")
    wide = await session.execute(
        "import numpy as np\nwide = pd.DataFrame(np.zeros((2, 1_000_000)))\nwide"
    )
    table = _one(wide, TableData)
    assert table.shape == [2, 1_000_000] and table.truncated
    assert len(table.columns) == 50 and len(table.records[0]) == 50
    series = _one(await session.execute("pd.Series([1, 2], name='v')"), TableData)
    assert series.shape == [2, 1] and series.records == [{"v": 1}, {"v": 2}]


async def test_a_bar_chart_comes_back_as_data(session: AsyncSession) -> None:
    result = await session.execute(BAR)
    chart = _one(result, ChartData)
    assert chart.kind == "bar" and chart.library == "matplotlib" and not chart.truncated
    (axes,) = chart.axes
    assert (axes.title, axes.x_label, axes.y_label) == ("Fruit", "kind", "count")
    (bars,) = axes.series
    assert bars.kind == "bar" and bars.label == "sold" and bars.orientation == "vertical"
    assert bars.points == [["apples", 3], ["pears", 5.5], ["plums", -1]]
    # Next to its saved image, from the same display.
    assert chart.image is not None and chart.image in result.files
    assert chart.image.endswith(".png")
    assert (session.work_dir / chart.image).read_bytes().startswith(b"\x89PNG")
    assert CHART_MIMETYPE in result.outputs[chart.output]["data"]
    _no_json_in_text(result)
    # Only the image is a file: the payload is no clutter in outputs/.
    assert not [f for f in result.files if f.endswith(".json")]
    horizontal = _one(await session.execute("plt.barh(['x', 'y'], [1, 2]); plt.show()"), ChartData)
    assert horizontal.axes[0].series[0].orientation == "horizontal"
    assert horizontal.axes[0].series[0].points == [["x", 1], ["y", 2]]
    by_pandas = _one(
        await session.execute(
            "import pandas as pd\npd.Series([4, 2], index=['p', 'q']).plot.bar(); plt.show()"
        ),
        ChartData,
    )
    assert by_pandas.axes[0].series[0].points == [["p", 4], ["q", 2]]


async def test_lines_scatters_subplots_and_an_empty_figure(session: AsyncSession) -> None:
    chart = _one(await session.execute(LINES), ChartData)
    assert chart.kind == "subplots" and chart.title == "Two"
    left, right = chart.axes
    assert left.kind == "line" and right.kind == "scatter"
    square, unlabelled = left.series
    assert square.label == "square" and square.points == [[0, 0], [1, 1], [2, 4]]
    assert unlabelled.label is None and unlabelled.points[0] == [0, None]  # NaN
    assert right.series[0].label == "dots" and right.series[0].points == [[1, 3], [2, 4]]
    empty = _one(await session.execute("fig = plt.figure()\nplt.close(fig)\nfig"), ChartData)
    assert empty.kind == "empty" and empty.axes == []
    blank = _one(await session.execute("fig = plt.subplots()[0]\nplt.close(fig)\nfig"), ChartData)
    assert blank.axes[0].kind == "empty" and blank.axes[0].series == []


async def test_a_figure_with_a_million_points_is_capped(session: AsyncSession) -> None:
    result = await session.execute(
        "import numpy as np, matplotlib.pyplot as plt\n"
        "x = np.arange(1_000_000)\n"
        "plt.plot(x, x * 2.0); plt.scatter(x[:300_000], x[:300_000]); plt.show()"
    )
    chart = _one(result, ChartData)
    line, dots = chart.axes[0].series
    assert line.count == 1_000_000 and line.truncated and len(line.points) <= 500
    assert line.step == 2_000 and line.points[1] == [2_000, 4_000.0]
    assert dots.count == 300_000 and dots.truncated and len(dots.points) <= 500
    assert chart.truncated and chart.axes[0].truncated


HOSTILE = """\
import pandas as pd, matplotlib.pyplot as plt
class Broken(pd.DataFrame):
    @property
    def ndim(self):  # its repr and HTML do not ask, our formatter does
        raise RuntimeError("no ndim for you")
class Unprintable:
    def __str__(self):
        raise RuntimeError("no str for you")
    __repr__ = lambda self: "Unprintable()"
"""


async def test_a_formatter_that_fails_leaves_the_outputs_as_they_were(
    session: AsyncSession,
) -> None:
    assert (await session.execute(HOSTILE)).ok
    broken = await session.execute("Broken({'a': [1, 2]})")
    assert broken.ok and broken.data == [] and broken.stderr == ""
    assert [o["output_type"] for o in broken.outputs] == ["execute_result"]
    assert "text/plain" in broken.outputs[0]["data"] and "a" in broken.text
    # pandas' own text fails on it (IPython shows that traceback); the data does not.
    odd = await session.execute("pd.DataFrame({'o': [Unprintable(), 1]})")
    assert odd.error is not None and "no str for you" in odd.error.evalue
    (table,) = odd.data
    assert isinstance(table, TableData) and table.records == [{"o": "<Unprintable>"}, {"o": 1}]
    # Drawing never reads an Axes' containers; our formatter does, and fails.
    figure = await session.execute(
        "fig, ax = plt.subplots()\nax.plot([1, 2])\nax.containers = None\nplt.show()"
    )
    assert figure.ok and figure.data == [] and figure.stderr == ""
    assert [f for f in figure.files if f.endswith(".png")]
    assert figure.error is None and all(o["output_type"] != "error" for o in figure.outputs)
    # The code may display anything under our mimetypes: a bad payload is left out.
    faked = await session.execute(
        "from IPython.display import display\n"
        f"display({{'{TABLE_MIMETYPE}': {{'type': 'table', 'shape': 'huge'}},"
        f" '{CHART_MIMETYPE}': [1], 'text/plain': 'fake'}}, raw=True)\n"
        f"display({{'{TABLE_MIMETYPE}': {{'type': 'table', 'library': 'x', 'shape': [1, 1],"
        " 'columns': [{'name': 'a', 'dtype': 'd'}], 'records': [{'a': float('nan')}]},"
        " 'text/plain': 'nan'}, raw=True)"
    )
    assert faked.ok and "fake" in faked.text
    (fake,) = faked.data
    # NaN is never sent as NaN: jupyter_client's packer makes it null (orjson) or "nan".
    assert isinstance(fake, TableData) and fake.records in ([{"a": None}], [{"a": "nan"}])


def test_payloads_from_the_kernel_are_checked() -> None:
    good: dict[str, Any] = {
        "type": "chart",
        "library": "m",
        "kind": "line",
        "title": None,
        "axes": [],
    }
    outputs: list[dict[str, Any]] = [
        {"output_type": "display_data", "data": {CHART_MIMETYPE: good}, "metadata": {}},
        {"output_type": "stream", "name": "stdout", "text": "x"},
        {"output_type": "display_data", "data": {CHART_MIMETYPE: {**good, "axes": [3]}}},
        {"output_type": "display_data", "data": {TABLE_MIMETYPE: {"type": "table"}}},
        {"output_type": "display_data", "data": {CHART_MIMETYPE: {**good, "title": 7}}},
        {"output_type": "display_data", "data": [CHART_MIMETYPE]},
    ]
    (chart,) = collect(outputs, {0: [("image/png", "outputs/1.png")]})
    assert isinstance(chart, ChartData) and chart.image == "outputs/1.png" and chart.output == 0
    assert read_data([{"type": "other"}, chart.__dict__ | {"axes": []}, None]) == [chart]
    many = {
        "kind": "line",
        "label": None,
        "count": 10**6,
        "points": [[i, i] for i in range(10_000)],
    }
    (capped,) = read_data([good | {"output": 0, "axes": [{"kind": "line", "series": [many] * 50}]}])
    assert isinstance(capped, ChartData) and capped.axes[0].truncated
    assert len(capped.axes[0].series) == 20 and len(capped.axes[0].series[0].points) == 500


def _validate(result: dict[str, Any], openapi: dict[str, Any]) -> None:
    schema = {
        "components": openapi["components"],
        **openapi["components"]["schemas"]["ExecutionResult"],
    }
    jsonschema.validate(result, schema, cls=jsonschema.Draft202012Validator)


def test_data_over_http_and_sse(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "work", "--max-timeout", "60")
    try:
        openapi = server.http.get("/openapi.json").json()
        sid = server.create(timeout=60)
        result = server.execute(sid, MIXED)
        _validate(result, openapi)
        (table,) = result["data"]
        assert table["type"] == "table" and table["shape"] == [3, 4]
        assert table["records"][1] == {"n": 2, "x": None, "s": "b", "t": None}
        with server.http.stream(
            "POST", f"/sessions/{sid}/execute/stream", json={"code": BAR}
        ) as stream:
            events = _events("".join(stream.iter_text()))
        outputs = [data for name, data in events if name == "output"]
        assert any(CHART_MIMETYPE in o.get("data", {}) for o in outputs)
        name, final = events[-1]
        assert name == "result"
        _validate(final, openapi)
        (chart,) = final["data"]
        assert chart["type"] == "chart" and chart["image"] in final["files"]
        assert chart["axes"][0]["series"][0]["points"][1] == ["pears", 5.5]
        with Client(server.url, token=server.token) as client:
            remote = client.session(timeout=60)
            try:
                over_sse = remote.execute(BAR, on_output=lambda _: None)
                plain = remote.execute(MIXED)
            finally:
                remote.close()
        assert isinstance(over_sse.data[0], ChartData)
        assert over_sse.data[0].axes[0].series[0].label == "sold"
        assert isinstance(plain.data[0], TableData) and plain.data[0].shape == [3, 4]
    finally:
        assert server.stop() == 0


def _events(body: str) -> list[tuple[str, Any]]:
    events = []
    for block in body.split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if "event" in lines:
            events.append((lines["event"], json.loads(lines["data"])))
    return events


async def test_data_over_mcp(tmp_path: Path) -> None:
    async with stdio_mcp(tmp_path / "root") as client:
        table = await client.call_tool("execute_code", {"code": MIXED})
        chart = await client.call_tool("execute_code", {"code": BAR})
    assert not table.is_error and table.structured_content is not None
    (frame,) = table.structured_content["data"]
    assert frame["type"] == "table" and frame["records"][0]["t"] == "2024-01-02T03:04:05"
    assert chart.structured_content is not None
    (figure,) = chart.structured_content["data"]
    assert figure["kind"] == "bar" and figure["axes"][0]["title"] == "Fruit"
    assert figure["axes"][0]["series"][0]["points"][0] == ["apples", 3]
    for block in table.content + chart.content:
        if block.type == "text":
            assert "vnd.kernelexec" not in block.text and '"records"' not in block.text
