"""LiveOutput: one output as it happens, for an ``on_output`` listener.

A listener gets each output while the code runs. Most listeners want text
(``on_output=print``, a log line, a chat message being streamed); some want
the notebook output itself (to render it, to forward it). A ``LiveOutput``
serves both: ``str()`` and ``.text`` are readable text, and the object is a
read-only mapping of the nbformat output (``output["output_type"]``,
``output.get("data")``), with ``.output`` the plain dict to serialize.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from ._render import render_outputs

__all__ = ["LiveOutput", "OutputListener", "json_size"]

_SIZED_NODES = 100_000  # past this many strings, numbers and containers, an output counts as huge
_SCALARS = (str, int, float, bool, type(None))


class LiveOutput(Mapping[str, Any]):
    """One output of a running execution: readable text, and the nbformat output.

    ``type`` is the nbformat ``output_type`` ("stream", "display_data",
    "execute_result", "error"), or one of the two events a live view applies
    as JupyterLab does: "clear_output" (with ``wait``) and
    "update_display_data" (with ``display_id``, ``data`` and ``metadata``).

    ``text`` is what a person would read: a stream's text exactly as printed
    (escape codes and ``\\r`` kept, for a terminal), a display's or result's
    text as ``ExecutionResult.text`` renders it (``text/plain``, markdown,
    JSON; ``[display of image/png]`` when it has no text), an error's
    traceback without colour codes; an empty string for ``clear_output``.
    ``str()`` is ``text`` without its last newline, so ``print`` shows the
    output as it was printed.

    Args:
        output: the nbformat output or event, as ``live_output`` makes it.
    """

    __slots__ = ("_output",)

    def __init__(self, output: dict[str, Any]) -> None:
        self._output = output

    @property
    def output(self) -> dict[str, Any]:
        """The nbformat output (or event) as a plain dict, as the transcript stores it."""
        return self._output

    @property
    def type(self) -> str:
        return str(self._output.get("output_type", ""))

    @property
    def text(self) -> str:
        kind = self.type
        if kind == "stream":
            text = self._output.get("text", "")
            return text if isinstance(text, str) else ""
        if kind == "clear_output":
            return ""
        # An update is rendered as the display it replaces.
        shown = {**self._output, "output_type": "display_data"}
        try:
            return render_outputs([shown if kind == "update_display_data" else self._output], {})
        except (TypeError, ValueError, AttributeError):
            # Over HTTP the output is the server's JSON: a malformed one
            # must not break the listener that only wanted to print it.
            return f"[{kind or 'output'}]\n"

    def __str__(self) -> str:
        return self.text.removesuffix("\n")

    def __repr__(self) -> str:
        return f"LiveOutput({self._output!r})"

    def __getitem__(self, key: str) -> Any:
        return self._output[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._output)

    def __len__(self) -> int:
        return len(self._output)


OutputListener = Callable[[LiveOutput], None]
"""An ``on_output`` listener: called with each ``LiveOutput`` as it happens."""


def json_size(output: Mapping[str, Any]) -> int | None:
    """About how many characters a live output takes as strict JSON, without serializing it.

    A stream's size is its text's length. Anything else is walked (without
    recursion, however deep it is nested), adding up its strings' lengths, so
    an output too big for a buffer costs no copy of it. None: not strict JSON
    (NaN or infinity, a value JSON has no type for), or more than
    ``_SIZED_NODES`` parts (huge; not walked to the end).
    """
    if output.get("output_type") == "stream":
        return len(str(output.get("text", "")))
    size, seen = 0, 0
    todo: list[Any] = [output]
    while todo:
        item = todo.pop()
        if isinstance(item, str):
            size += len(item) + 2
        elif isinstance(item, float) and not math.isfinite(item):
            return None
        elif isinstance(item, _SCALARS):
            size += 8
        elif isinstance(item, (dict, Mapping, list, tuple)):
            seen += 2 * len(item) if isinstance(item, Mapping) else len(item)
            if seen > _SIZED_NODES:
                return None  # and no list of its parts was made
            if isinstance(item, Mapping):
                size += 2 * len(item) + 2
                todo.extend(item.keys())
                todo.extend(item.values())
            else:
                size += len(item) + 2
                todo.extend(item)
        else:
            return None
    return size
