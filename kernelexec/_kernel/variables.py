"""The user namespace, listed and inspected without running a cell.

Loaded by ``boot.py`` inside the kernel (standard library and ipykernel only;
numpy and pandas are looked at only if the user's code already imported them).
The owner sends a ``kernelexec_variables_request`` on the CONTROL channel,
which ipykernel 7 serves on a thread of its own: so the answer comes while a
cell runs, and nothing of a cell's (execution count, In/Out, history, the
transcript) is touched.

The user's objects run code when asked their repr, length or size, and that
code may raise, sleep or loop: each object is looked at in a worker thread
with a time box; an object that does not answer in time is reported as
unavailable and its worker left behind (a daemon; a thread cannot be killed).
A whole request has a budget too: objects past it are listed by name and type.

Request: ``{"name": None}`` lists; ``{"name": "df"}`` inspects one variable.
Reply: ``{"status": "ok", "variables": [...]}`` or ``{"status": "ok",
"variable": {...}}``, or ``{"status": "error", "kind": "not_found", "why"}``.
"""

from __future__ import annotations

import functools
import json
import sys
import threading
import time
from typing import Any

REQUEST = "kernelexec_variables_request"
REPLY = "kernelexec_variables_reply"
OBJECT_TIMEOUT = 0.2  # seconds one object may take to describe itself
BUDGET = 0.6  # seconds for a whole request: the answer must come within a second
SHORT_REPR = 100
LONG_REPR = 2000
MAX_VARIABLES = 1000
MAX_COLUMNS = 100
MAX_ROWS = 5
MAX_ATTRIBUTES = 50
_HIDDEN = frozenset({"In", "Out", "get_ipython", "exit", "quit"})


def install(kernel: Any) -> None:
    """Lets ``kernel`` answer variable requests on its control channel."""
    kernel.control_handlers[REQUEST] = functools.partial(_on_request, kernel)


def _on_request(kernel: Any, stream: Any, ident: Any, parent: dict[str, Any]) -> None:
    content = parent.get("content") or {}
    name = content.get("name")
    try:
        reply = _answer(kernel.shell, name)
    except Exception as exc:  # never leave the owner without a reply
        reply = {"status": "error", "kind": "failed", "why": f"{type(exc).__name__}: {exc}"}
    kernel.session.send(stream, REPLY, reply, parent, ident)


def _answer(shell: Any, name: Any) -> dict[str, Any]:
    names = _user_names(shell)
    ns = shell.user_ns
    if name is None:
        deadline = time.monotonic() + BUDGET
        listed = [_describe(n, ns.get(n), deadline, detail=False) for n in names[:MAX_VARIABLES]]
        return {"status": "ok", "variables": listed, "truncated": len(names) > MAX_VARIABLES}
    if not isinstance(name, str) or name not in names:
        return {"status": "error", "kind": "not_found", "why": f"no variable named {name!r}"}
    deadline = time.monotonic() + BUDGET
    return {"status": "ok", "variable": _describe(name, ns.get(name), deadline, detail=True)}


def _user_names(shell: Any) -> list[str]:
    # A copy first: the cell running meanwhile may add names (a dict must not
    # change size while it is iterated).
    items = list(shell.user_ns.items())
    hidden = shell.user_ns_hidden
    missing = object()
    names = []
    for name, value in items:
        if not isinstance(name, str) or name.startswith("_"):
            continue
        if hidden.get(name, missing) is value or (name in _HIDDEN and name in hidden):
            continue
        if isinstance(value, type(sys)):  # a module: an import, not data
            continue
        names.append(name)
    return sorted(names)


def _describe(name: str, value: Any, deadline: float, *, detail: bool) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": name, "type": _type_name(value)}
    left = deadline - time.monotonic()
    if left <= 0:
        entry["unavailable"] = "not looked at: the request's time budget was spent"
        return entry
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["facts"] = _facts(value, detail=detail)
        except BaseException as exc:  # the user's code may raise anything, SystemExit too
            box["error"] = f"{type(exc).__name__}"

    worker = threading.Thread(target=work, name="kernelexec-variables", daemon=True)
    worker.start()
    worker.join(min(OBJECT_TIMEOUT * (10 if detail else 1), left))
    if worker.is_alive():
        entry["unavailable"] = "did not describe itself in time"
    elif "error" in box:
        entry["unavailable"] = f"describing it raised {box['error']}"
    else:
        entry.update(box["facts"])
    return entry


def _type_name(value: Any) -> str:
    kind = type(value)
    module = getattr(kind, "__module__", None)
    name = getattr(kind, "__qualname__", None) or getattr(kind, "__name__", "?")
    if not isinstance(name, str) or not isinstance(module, str):
        return "?"
    return name if module == "builtins" else f"{module}.{name}"


def _facts(value: Any, *, detail: bool) -> dict[str, Any]:
    facts: dict[str, Any] = {}
    shape = _shape(value)
    if shape is not None:
        facts["shape"] = shape
    elif hasattr(type(value), "__len__"):
        length = len(value)
        if isinstance(length, int):
            facts["length"] = length
    dtype = _dtype(value)
    if dtype is not None:
        facts["dtype"] = dtype
    size = _bytes(value)
    if size is not None:
        facts["bytes"] = size
    facts["repr"] = _repr(value, LONG_REPR if detail else SHORT_REPR)
    if detail:
        frame = _frame_detail(value)
        if frame is not None:
            facts.update(frame)
        else:
            facts["attributes"] = _attributes(value)
    return facts


def _is(value: Any, module: str, name: str) -> bool:
    """Whether ``value`` is a ``module.name``, looked for only if already imported."""
    kind = getattr(sys.modules.get(module), name, None)
    return isinstance(kind, type) and isinstance(value, kind)


def _shape(value: Any) -> list[int] | None:
    if _is(value, "numpy", "ndarray") or any(
        _is(value, "pandas", k) for k in ("DataFrame", "Series", "Index")
    ):
        return [int(n) for n in value.shape]
    return None


def _dtype(value: Any) -> str | None:
    if _is(value, "pandas", "DataFrame"):
        return None  # one per column: see inspect
    dtype = getattr(value, "dtype", None) if _shape(value) is not None else None
    return None if dtype is None else str(dtype)


def _bytes(value: Any) -> int | None:
    if _is(value, "pandas", "DataFrame"):
        return int(value.memory_usage(index=True, deep=False).sum())
    if _is(value, "pandas", "Series"):
        return int(value.memory_usage(index=True, deep=False))
    if _is(value, "numpy", "ndarray"):
        return int(value.nbytes)
    size = sys.getsizeof(value)
    if isinstance(value, (list, tuple, set, frozenset, dict)):
        # Shallow and approximate: the containers' items, one level down.
        items = value.values() if isinstance(value, dict) else value
        size += sum(sys.getsizeof(item) for item in list(items)[:10_000])
    return int(size)


def _repr(value: Any, cap: int) -> str:
    text = repr(value)
    if not isinstance(text, str):
        return "?"
    return text if len(text) <= cap else text[: cap - 1] + "…"


def _frame_detail(value: Any) -> dict[str, Any] | None:
    if not _is(value, "pandas", "DataFrame"):
        return None
    columns = [
        {"name": str(column), "dtype": str(dtype)}
        for column, dtype in list(value.dtypes.items())[:MAX_COLUMNS]
    ]
    head = value.iloc[:MAX_ROWS, :MAX_COLUMNS]
    # Through to_json: numpy scalars, timestamps and NaN become plain JSON.
    rows = json.loads(head.to_json(orient="records", date_format="iso", default_handler=str))
    return {
        "columns": columns,
        "columns_truncated": value.shape[1] > MAX_COLUMNS,
        "head": rows,
    }


def _attributes(value: Any) -> list[dict[str, str]]:
    found = []
    for attribute in sorted(n for n in dir(value) if not n.startswith("_"))[:MAX_ATTRIBUTES]:
        try:
            kind = type(getattr(value, attribute)).__name__
        except Exception as exc:  # a property may raise
            kind = f"<{type(exc).__name__}>"
        found.append({"name": attribute, "type": kind})
    return found
