"""DataFrames and figures as data, beside their text and images.

Loaded by ``boot.py`` inside the kernel process (standard library and
ipykernel only). ``install`` adds two formatters to IPython's display
formatter, registered by type *name*: pandas, polars and matplotlib are never
imported here, and a formatter is only ever called with an object of theirs,
which the user's code made (so the library is already imported).

- ``TABLE`` (``application/vnd.kernelexec.table+json``): a pandas DataFrame or
  Series, or a polars DataFrame, shown as a result or a display: its shape,
  schema, index and first rows as records.
- ``CHART`` (``application/vnd.kernelexec.chart+json``): a matplotlib Figure,
  shown by the inline backend or as a result: per Axes its kind, title, axis
  labels and series with their points.

Both are capped (rows, columns, series, points, string lengths; a payload
says ``truncated: true`` and keeps the real shape and counts) and hold strict
JSON only (NaN and infinities as null, timestamps as ISO strings, numpy
scalars as Python numbers). kernelexec's side (``kernelexec._execution._data``) checks
and types them; the notebook keeps them in the output's bundle, where
JupyterLab ignores an unknown mimetype.

A formatter that raises is shown by IPython as a traceback in the cell's
outputs: these never raise, and any failure (a hostile subclass, a column
whose values raise in ``str``) leaves the bundle without the mimetype, the
cell's other outputs as they would have been.
"""

from __future__ import annotations

import datetime
import math
import sys
from typing import Any

TABLE = "application/vnd.kernelexec.table+json"
CHART = "application/vnd.kernelexec.chart+json"
MAX_ROWS = 20
MAX_COLUMNS = 50
MAX_CHARS = 200  # one string: a value, a name, a label
MAX_AXES = 16
MAX_SERIES = 20  # per Axes
MAX_POINTS = 500  # per series
MAX_FIGURE_POINTS = 5_000  # per figure, all series together

# Looked up by the class's __module__, which pandas 3 set to "pandas" (older: where defined).
_TABLE_TYPES = (
    ("pandas", "DataFrame"),
    ("pandas", "Series"),
    ("pandas.core.frame", "DataFrame"),
    ("pandas.core.series", "Series"),
    ("polars", "DataFrame"),
    ("polars.dataframe.frame", "DataFrame"),
)
# FigureBase: the inline backend pops every formatter's printer for Figure
# itself when it sets up its PNG one; a lookup walks the MRO to the base.
_CHART_TYPES = (("matplotlib.figure", "FigureBase"), ("matplotlib.figure", "Figure"))
_CATEGORICAL = frozenset({"FixedFormatter", "StrCategoryFormatter"})
# pandas 3 labels a bar plot's categories with a FuncFormatter: one that labels
# every bar is taken to name them (bars stand on categories more than lines do).
_BAR_CATEGORICAL = _CATEGORICAL | {"FuncFormatter"}
_DATES = frozenset({"AutoDateFormatter", "ConciseDateFormatter", "DateFormatter"})
_MISSING = frozenset({"NAType", "NaTType"})  # pandas' missing values


def install(shell: Any) -> None:
    """Makes ``shell``'s displays of frames and figures carry their data too."""
    from IPython.core.formatters import BaseFormatter

    class DataFormatter(BaseFormatter):
        _return_type = dict

    display = shell.display_formatter
    for mimetype, convert, types in (
        (TABLE, table, _TABLE_TYPES),
        (CHART, chart, _CHART_TYPES),
    ):
        formatter = DataFormatter(parent=display)
        formatter.format_type = mimetype
        formatter.print_method = "_repr_kernelexec_data_"  # no object has it
        for module, name in types:
            formatter.for_type_by_name(module, name, _never_raises(convert))
        display.formatters[mimetype] = formatter
    # A user (or config) may have narrowed the active types: ours join them.
    active = list(display.active_types)
    if active:
        display.active_types = active + [m for m in (TABLE, CHART) if m not in active]


def _never_raises(convert: Any) -> Any:
    def format(value: Any) -> dict[str, Any] | None:
        try:
            result: dict[str, Any] | None = convert(value)
        except Exception:
            return None  # the bundle goes without it; IPython would show a traceback
        return result

    return format


# -- tables


def table(value: Any) -> dict[str, Any] | None:
    """The table payload of a pandas DataFrame or Series, or a polars DataFrame."""
    module = type(value).__module__.split(".")[0]
    if module == "polars":
        return _polars(value)
    if not hasattr(value, "iloc"):
        return None
    if value.ndim == 1:  # a Series: a table of one column
        value = value.to_frame()
    rows, columns = (int(n) for n in value.shape)
    head = value.iloc[:MAX_ROWS, :MAX_COLUMNS]
    names = [_text(name) for name in head.columns]
    dtypes = [_text(dtype) for dtype in head.dtypes]
    values = [head.iloc[:, j].tolist() for j in range(len(names))]
    index = head.index
    payload = _table("pandas", rows, columns, names, dtypes, values, truncated=_cut(rows, columns))
    payload["index"] = {
        "name": None if index.name is None else _text(index.name),
        "dtype": _text(index.dtype),
        "values": [_json(v) for v in index.tolist()],
    }
    return payload


def _polars(value: Any) -> dict[str, Any] | None:
    rows, columns = (int(n) for n in value.shape)
    head = value.head(MAX_ROWS)
    kept = list(head.columns)[:MAX_COLUMNS]
    dtypes = [_text(head.schema[name]) for name in kept]
    values = [head.get_column(name).to_list() for name in kept]
    names = [_text(name) for name in kept]
    return _table("polars", rows, columns, names, dtypes, values, truncated=_cut(rows, columns))


def _cut(rows: int, columns: int) -> bool:
    return rows > MAX_ROWS or columns > MAX_COLUMNS


def _table(
    library: str,
    rows: int,
    columns: int,
    names: list[str],
    dtypes: list[str],
    values: list[list[Any]],
    *,
    truncated: bool,
) -> dict[str, Any]:
    keys = _unique(names)
    records = [
        {key: _json(column[i]) for key, column in zip(keys, values, strict=True)}
        for i in range(min(rows, MAX_ROWS))
    ]
    return {
        "type": "table",
        "library": library,
        "shape": [rows, columns],
        "columns": [{"name": k, "dtype": d} for k, d in zip(keys, dtypes, strict=True)],
        "records": records,
        "truncated": truncated,
    }


def _unique(names: list[str]) -> list[str]:
    """Record keys: a repeated column name gets ``.1``, ``.2`` (as pandas' read_csv does)."""
    seen: set[str] = set()
    keys = []
    for name in names:
        key, n = name, 0
        while key in seen:
            n += 1
            key = f"{name}.{n}"
        seen.add(key)
        keys.append(key)
    return keys


def _json(value: Any) -> Any:
    """``value`` as strict JSON: numbers finite or null, times as ISO strings."""
    if value is None or isinstance(value, (bool, str)):
        return _text(value) if isinstance(value, str) else value
    kind = type(value)
    if kind.__name__ in _MISSING:
        return None
    if kind.__module__ == "numpy" and hasattr(value, "item"):
        value = value.item()  # a numpy scalar: its Python twin
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat()
    return _text(value)


def _text(value: Any) -> str:
    try:
        text = value if isinstance(value, str) else str(value)
    except Exception:
        text = f"<{type(value).__name__}>"  # its __str__ raised
    return text if len(text) < MAX_CHARS else text[: MAX_CHARS - 1] + "…"


# -- charts


def chart(figure: Any) -> dict[str, Any] | None:
    """The chart payload of a matplotlib Figure."""
    axes = list(figure.axes)
    budget = [MAX_FIGURE_POINTS]
    described = [_axes(ax, budget) for ax in axes[:MAX_AXES]]
    suptitle = getattr(figure, "_suptitle", None)
    kind = "empty" if not axes else described[0]["kind"] if len(axes) == 1 else "subplots"
    return {
        "type": "chart",
        "library": "matplotlib",
        "kind": kind,
        "title": _text(suptitle.get_text()) if suptitle is not None else None,
        "axes": described,
        "truncated": len(axes) > MAX_AXES or any(a["truncated"] for a in described),
    }


def _axes(ax: Any, budget: list[int]) -> dict[str, Any]:
    x_of, y_of = _converter(ax.xaxis, _CATEGORICAL), _converter(ax.yaxis, _CATEGORICAL)
    x_bar, y_bar = _converter(ax.xaxis, _BAR_CATEGORICAL), _converter(ax.yaxis, _BAR_CATEGORICAL)
    series: list[dict[str, Any]] = []
    found = 0
    bars: set[int] = set()
    for container in ax.containers:
        if type(container).__name__ != "BarContainer":
            continue
        bars.update(id(p) for p in container.patches)
        found += 1
        if len(series) < MAX_SERIES:
            series.append(_bars(container, x_bar, y_bar, budget))
    for line in ax.lines:
        found += 1
        if len(series) < MAX_SERIES:
            series.append(_points("line", line.get_label(), line.get_xydata(), x_of, y_of, budget))
    for collection in ax.collections:
        if type(collection).__name__ != "PathCollection":
            continue
        found += 1
        if len(series) < MAX_SERIES:
            offsets = collection.get_offsets()
            series.append(_points("scatter", collection.get_label(), offsets, x_of, y_of, budget))
    other = bool(ax.images) or any(id(p) not in bars for p in ax.patches)
    kinds = {s["kind"] for s in series}
    kind = kinds.pop() if len(kinds) == 1 else ("mixed" if kinds else "empty")
    if other and kind == "empty":
        kind = "other"  # images, pies, patches: nothing this reads
    return {
        "kind": kind,
        "title": _text(ax.get_title()) or None,
        "x_label": _text(ax.get_xlabel()) or None,
        "y_label": _text(ax.get_ylabel()) or None,
        "series": series,
        "truncated": found > len(series) or any(s["truncated"] for s in series),
    }


def _converter(axis: Any, categorical: frozenset[str]) -> Any:
    """Maps a position on ``axis`` to what it stands for: a category, a date, a number.

    A position is a category if the axis' formatter is one of ``categorical``
    and a tick with a label stands exactly there.
    """
    formatter = axis.get_major_formatter()
    name = type(formatter).__name__
    if name in categorical:
        labels = {}
        for loc, label in zip(axis.get_majorticklocs(), axis.get_majorticklabels(), strict=False):
            if label.get_text():
                labels[float(loc)] = label.get_text()
        return lambda x: _text(labels[x]) if x in labels else _number(x)
    dates = sys.modules.get("matplotlib.dates")
    if name in _DATES and dates is not None:
        return lambda x: _date(dates, x)
    return _number


def _date(dates: Any, x: Any) -> Any:
    number = _number(x)
    return None if number is None else dates.num2date(number).isoformat()


def _number(x: Any) -> Any:
    try:
        number = float(x)
    except (TypeError, ValueError):
        return None  # a masked point
    if not math.isfinite(number):
        return None
    return int(number) if number.is_integer() and abs(number) < 2**53 else number


def _bars(container: Any, x_of: Any, y_of: Any, budget: list[int]) -> dict[str, Any]:
    patches = container.patches
    horizontal = getattr(container, "orientation", None) == "horizontal"
    room = max(min(MAX_POINTS, budget[0]), 0)
    points = []
    for patch in patches[:room]:
        if horizontal:  # the category is on y, the value along x
            where = y_of(patch.get_y() + patch.get_height() / 2)
            points.append([where, _number(patch.get_width())])
        else:
            points.append(
                [x_of(patch.get_x() + patch.get_width() / 2), _number(patch.get_height())]
            )
    budget[0] -= len(points)
    return {
        "kind": "bar",
        "label": _label(container.get_label()),
        "orientation": "horizontal" if horizontal else "vertical",
        "count": len(patches),
        "points": points,
        "truncated": len(points) < len(patches),
    }


def _points(
    kind: str, label: Any, xy: Any, x_of: Any, y_of: Any, budget: list[int]
) -> dict[str, Any]:
    count = len(xy)
    room = max(min(MAX_POINTS, budget[0]), 0)
    # Every step-th point: the shape of the whole series, not only its start.
    step = max(math.ceil(count / room), 1) if room else count + 1
    kept = xy[::step] if room else xy[:0]
    points = [[x_of(x), y_of(y)] for x, y in kept.tolist()]
    budget[0] -= len(points)
    return {
        "kind": kind,
        "label": _label(label),
        "count": count,
        "step": step if room else None,
        "points": points,
        "truncated": len(points) < count,
    }


def _label(label: Any) -> str | None:
    # matplotlib names unlabelled artists "_child0", "_line1", "_container0": no legend entry.
    text = _text(label) if label is not None else ""
    return None if not text or text.startswith("_") else text
