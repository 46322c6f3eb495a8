"""DataFrames and charts as data: the typed payloads of ``ExecutionResult.data``.

The kernel (``_kernel/data.py``) adds a table or chart payload, in a mimetype
of its own, to the bundle of each DataFrame or figure it shows; ``collect``
reads them out of an execution's outputs. The kernel runs the code whose
output this is, and that code can display anything under those mimetypes: a
payload is checked field by field against the shapes below, cut to the same
caps, and left out if it does not fit them.

Shapes, as ``to_dict()`` (and so HTTP, SSE and MCP) sends them:

==========  ================================================================
TableData   ``{"type": "table", "output": int, "library": "pandas"|"polars",
            "shape": [rows, columns], "columns": [{"name", "dtype"}],
            "index": {"name", "dtype", "values": [...]} | null,
            "records": [{column name: value}], "truncated": bool}``
ChartData   ``{"type": "chart", "output": int, "library": "matplotlib",
            "kind", "title", "image": path | null, "axes": [ChartAxes],
            "truncated": bool}``
ChartAxes   ``{"kind", "title", "x_label", "y_label", "series": [ChartSeries],
            "truncated": bool}``
ChartSeries ``{"kind": "bar"|"line"|"scatter", "label", "count",
            "points": [[x, y]], "orientation": "vertical"|"horizontal"|null,
            "step": int | null, "truncated": bool}``
==========  ================================================================

Values are strict JSON: null for NaN, NaT and infinities, ISO 8601 strings for
dates and times, other objects as their ``str`` (cut to 200 characters).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from .._kernel.data import (
    CHART,
    MAX_AXES,
    MAX_CHARS,
    MAX_COLUMNS,
    MAX_POINTS,
    MAX_ROWS,
    MAX_SERIES,
    TABLE,
)

__all__ = [
    "CHART_MIMETYPE",
    "TABLE_MIMETYPE",
    "ChartAxes",
    "ChartData",
    "ChartSeries",
    "Column",
    "Data",
    "Index",
    "TableData",
    "collect",
    "data_from_dict",
    "data_schemas",
    "read_data",
]

TABLE_MIMETYPE = TABLE
CHART_MIMETYPE = CHART
Scalar = None | bool | int | float | str


class Malformed(ValueError):
    """A payload that does not have the documented shape."""


@dataclass(frozen=True)
class Column:
    """One column of a table: its name (as a string) and dtype."""

    name: str
    dtype: str


@dataclass(frozen=True)
class Index:
    """A pandas table's index: its name, dtype and the values of the rows kept."""

    name: str | None
    dtype: str
    values: list[Scalar] = field(default_factory=list)


@dataclass(frozen=True)
class TableData:
    """A DataFrame (or Series, as one column) a cell showed, as data.

    Attributes:
        output: the index in ``ExecutionResult.outputs`` of the display or
            result it came with (whose ``text/plain`` is in ``text``).
        library: "pandas" or "polars".
        shape: the whole frame's ``[rows, columns]``.
        columns: name and dtype of the columns kept (the first 50); a repeated
            name is made unique with ``.1``, ``.2``, as ``records`` keys it.
        index: pandas' index (name, dtype, values of the rows kept); None for polars.
        records: the first 20 rows, one dict per row keyed by column name.
        truncated: rows or columns were left out (``shape`` has the real size).
    """

    output: int
    library: str
    shape: list[int]
    columns: list[Column]
    records: list[dict[str, Scalar]]
    index: Index | None = None
    truncated: bool = False
    type: Literal["table"] = "table"


@dataclass(frozen=True)
class ChartSeries:
    """One bar group, line or scatter of an Axes.

    Attributes:
        kind: "bar", "line" or "scatter".
        label: its legend label; None if it has none.
        count: how many bars or points it has in all.
        points: ``[x, y]`` pairs. For bars ``x`` is the category (the tick
            label under the bar) or the bar's centre, ``y`` its height (for
            horizontal bars: the category on the y axis, then the width).
            Dates on a date axis are ISO strings.
        orientation: bars' "vertical" or "horizontal"; None for lines and scatters.
        step: lines and scatters keep every ``step``-th point (1: all) when
            they have more than 500, so the points span the whole series.
        truncated: fewer than ``count`` points were kept.
    """

    kind: str
    label: str | None
    count: int
    points: list[list[Scalar]]
    orientation: str | None = None
    step: int | None = None
    truncated: bool = False


@dataclass(frozen=True)
class ChartAxes:
    """One Axes (subplot) of a figure.

    Attributes:
        kind: its series' kind if they share one, "mixed", "empty" (nothing
            drawn) or "other" (only images, pies, patches: nothing read).
        title, x_label, y_label: as set; None if empty.
        series: the first 20 series: bars, then lines, then scatters.
        truncated: series or points were left out.
    """

    kind: str
    title: str | None
    x_label: str | None
    y_label: str | None
    series: list[ChartSeries]
    truncated: bool = False


@dataclass(frozen=True)
class ChartData:
    """A matplotlib figure a cell showed, as data, beside its saved image.

    Attributes:
        output: the index in ``ExecutionResult.outputs`` of its display.
        library: "matplotlib".
        kind: the one Axes' kind, "subplots" for several, "empty" for none.
        title: the figure's suptitle, if any (each Axes has its own title).
        image: the saved image of the same display, relative to the work dir.
        axes: the first 16 Axes, in the figure's order.
        truncated: Axes, series or points were left out.
    """

    output: int
    library: str
    kind: str
    title: str | None
    axes: list[ChartAxes]
    image: str | None = None
    truncated: bool = False
    type: Literal["chart"] = "chart"


Data = TableData | ChartData


def collect(
    outputs: list[dict[str, Any]], saved: Mapping[int, list[tuple[str, str]]]
) -> list[Data]:
    """The table and chart payloads of ``outputs``, in order; malformed ones left out.

    Args:
        outputs: the execution's nbformat outputs.
        saved: output index -> the (mimetype, path) of each of its parts saved as a file.
    """
    images = {
        index: next((path for mime, path in files if mime.startswith("image/")), None)
        for index, files in saved.items()
    }
    found: list[Data] = []
    for index, output in enumerate(outputs):
        bundle = output.get("data")
        if output.get("output_type") not in ("display_data", "execute_result"):
            continue
        if not isinstance(bundle, dict):
            continue
        for mimetype in (TABLE, CHART):
            payload = bundle.get(mimetype)
            if not isinstance(payload, dict):
                continue
            extra: dict[str, Any] = {"output": index}
            if mimetype == CHART:
                extra["image"] = images.get(index)
            try:
                found.append(data_from_dict({**payload, **extra}))
            except (Malformed, TypeError, ValueError, KeyError):
                continue  # the code displayed something else under our mimetype
    return found


def read_data(value: Any) -> list[Data]:
    """``ExecutionResult.data`` from its JSON list; items of another shape left out."""
    found: list[Data] = []
    for item in value if isinstance(value, list) else []:
        try:
            found.append(data_from_dict(item))
        except (Malformed, TypeError, ValueError, KeyError):
            continue  # a newer server's kind, or a bad one: the rest of the result counts
    return found


def data_from_dict(value: Any) -> Data:
    """A ``TableData`` or ``ChartData`` from its dict, checked and cut to the caps.

    Raises:
        Malformed: ``value`` does not have the documented shape.
    """
    if not isinstance(value, dict):
        raise Malformed("not an object")
    if value.get("type") == "table":
        return _table(value)
    if value.get("type") == "chart":
        return _chart(value)
    raise Malformed("type is neither table nor chart")


def _table(value: dict[str, Any]) -> TableData:
    shape = _list(value.get("shape"))
    if len(shape) != 2 or not all(type(n) is int and n >= 0 for n in shape):
        raise Malformed("shape")
    columns = [
        Column(_text(c["name"]), _text(c["dtype"]))
        for c in _list(value.get("columns"))[:MAX_COLUMNS]
        if isinstance(c, dict)
    ]
    names = {c.name for c in columns}
    records = [
        {_text(k): _scalar(v) for k, v in record.items() if k in names}
        for record in _list(value.get("records"))[:MAX_ROWS]
        if isinstance(record, dict)
    ]
    raw_index = value.get("index")
    index = None
    if isinstance(raw_index, dict):
        index = Index(
            name=_optional_text(raw_index.get("name")),
            dtype=_text(raw_index.get("dtype")),
            values=[_scalar(v) for v in _list(raw_index.get("values"))[:MAX_ROWS]],
        )
    cut = len(_list(value.get("records"))) > MAX_ROWS or len(value["columns"]) > MAX_COLUMNS
    return TableData(
        output=_count(value.get("output")),
        library=_text(value.get("library")),
        shape=shape,
        columns=columns,
        records=records,
        index=index,
        truncated=bool(value.get("truncated")) or cut,
    )


def _chart(value: dict[str, Any]) -> ChartData:
    raw = _list(value.get("axes"))
    axes = [_axes(a) for a in raw[:MAX_AXES]]
    return ChartData(
        output=_count(value.get("output")),
        library=_text(value.get("library")),
        kind=_text(value.get("kind")),
        title=_optional_text(value.get("title")),
        axes=axes,
        image=_optional_text(value.get("image")),
        truncated=bool(value.get("truncated")) or len(raw) > MAX_AXES,
    )


def _axes(value: Any) -> ChartAxes:
    if not isinstance(value, dict):
        raise Malformed("axes")
    raw = _list(value.get("series"))
    return ChartAxes(
        kind=_text(value.get("kind")),
        title=_optional_text(value.get("title")),
        x_label=_optional_text(value.get("x_label")),
        y_label=_optional_text(value.get("y_label")),
        series=[_series(s) for s in raw[:MAX_SERIES]],
        truncated=bool(value.get("truncated")) or len(raw) > MAX_SERIES,
    )


def _series(value: Any) -> ChartSeries:
    if not isinstance(value, dict):
        raise Malformed("series")
    raw = _list(value.get("points"))
    points = []
    for point in raw[:MAX_POINTS]:
        pair = _list(point)
        if len(pair) != 2:
            raise Malformed("a point is not an [x, y] pair")
        points.append([_scalar(pair[0]), _scalar(pair[1])])
    step = value.get("step")
    return ChartSeries(
        kind=_text(value.get("kind")),
        label=_optional_text(value.get("label")),
        count=_count(value.get("count")),
        points=points,
        orientation=_optional_text(value.get("orientation")),
        step=None if step is None else _count(step),
        truncated=bool(value.get("truncated")) or len(raw) > MAX_POINTS,
    )


def _list(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise Malformed("expected a list")
    return value


def _count(value: Any) -> int:
    if type(value) is not int or value < 0:
        raise Malformed("expected a count")
    return value


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise Malformed("expected a string")
    return value if len(value) <= MAX_CHARS else value[: MAX_CHARS - 1] + "…"


def _optional_text(value: Any) -> str | None:
    return None if value is None else _text(value)


def _scalar(value: Any) -> Scalar:
    """A JSON scalar; a non-finite number is null, anything nested is not a value."""
    if value is None or isinstance(value, (bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, str):
        return _text(value)
    raise Malformed("expected a JSON scalar")


def data_schemas() -> dict[str, Any]:
    """The OpenAPI (JSON Schema) components of ``TableData`` and ``ChartData``."""
    text, nullable = {"type": "string"}, {"type": ["string", "null"]}
    count = {"type": "integer", "minimum": 0}
    scalar = {"type": ["string", "number", "boolean", "null"]}
    flag = {"type": "boolean"}
    return {
        "TableData": {
            "type": "object",
            "description": "see kernelexec.TableData",
            "required": ["type", "output", "library", "shape", "columns", "records"],
            "properties": {
                "type": {"const": "table"},
                "output": count,
                "library": text,
                "shape": {"type": "array", "items": count, "minItems": 2, "maxItems": 2},
                "columns": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["name", "dtype"],
                        "properties": {"name": text, "dtype": text},
                    },
                },
                "index": {
                    "oneOf": [
                        {"type": "null"},
                        {
                            "type": "object",
                            "required": ["name", "dtype", "values"],
                            "properties": {
                                "name": nullable,
                                "dtype": text,
                                "values": {"type": "array", "items": scalar},
                            },
                        },
                    ]
                },
                "records": {
                    "type": "array",
                    "items": {"type": "object", "additionalProperties": scalar},
                },
                "truncated": flag,
            },
        },
        "ChartData": {
            "type": "object",
            "description": "see kernelexec.ChartData",
            "required": ["type", "output", "library", "kind", "axes"],
            "properties": {
                "type": {"const": "chart"},
                "output": count,
                "library": text,
                "kind": text,
                "title": nullable,
                "image": nullable,
                "axes": {"type": "array", "items": {"$ref": "#/components/schemas/ChartAxes"}},
                "truncated": flag,
            },
        },
        "ChartAxes": {
            "type": "object",
            "required": ["kind", "series"],
            "properties": {
                "kind": text,
                "title": nullable,
                "x_label": nullable,
                "y_label": nullable,
                "series": {
                    "type": "array",
                    "items": {"$ref": "#/components/schemas/ChartSeries"},
                },
                "truncated": flag,
            },
        },
        "ChartSeries": {
            "type": "object",
            "required": ["kind", "count", "points"],
            "properties": {
                "kind": text,
                "label": nullable,
                "count": count,
                "points": {
                    "type": "array",
                    "items": {"type": "array", "items": scalar, "minItems": 2, "maxItems": 2},
                },
                "orientation": nullable,
                "step": {"type": ["integer", "null"]},
                "truncated": flag,
            },
        },
    }
