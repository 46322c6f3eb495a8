from __future__ import annotations

from typing import Any

from kernelexec import Limits
from kernelexec._execution._reducer import ExecutionReducer
from kernelexec._execution._render import cap_text, collapse_carriage_returns, render_outputs

Messages = dict[str, list[dict[str, Any]]]


def test_progress_bars_collapse_to_their_last_state(recorded: Messages) -> None:
    reducer = ExecutionReducer("REQUEST", limits=Limits())
    for m in recorded["carriage_returns"]:
        reducer.feed(m)
    text = render_outputs(reducer.finish().outputs, {})
    assert text.strip() == "2/2"
    assert collapse_carriage_returns("a\r\nb 1\rb 2\n") == "a\nb 2\n"


def test_markdown_and_json_render_as_text(recorded: Messages) -> None:
    reducer = ExecutionReducer("REQUEST", limits=Limits())
    for m in recorded["markdown_and_json"]:
        reducer.feed(m)
    text = render_outputs(reducer.finish().outputs, {})
    assert "# Title" in text
    assert '"a": 1' in text
    assert "object>" not in text


def test_saved_file_replaces_an_empty_repr_but_not_a_useful_one() -> None:
    figure = {
        "output_type": "display_data",
        "metadata": {},
        "data": {"image/png": "AAAA", "text/plain": "<Figure size 640x480 with 1 Axes>"},
    }
    frame = {
        "output_type": "execute_result",
        "metadata": {},
        "execution_count": 1,
        "data": {"text/html": "<table/>", "text/plain": "   a\n0  1"},
    }
    saved = {0: [("image/png", "outputs/0001-1.png")], 1: [("text/html", "outputs/0001-2.html")]}
    pil = {
        "output_type": "display_data",
        "metadata": {},
        "data": {"image/png": "AAAA", "text/plain": "<PIL.Image.Image image mode=RGB size=8x8>"},
    }
    assert render_outputs([pil], {0: [("image/png", "outputs/0001-3.png")]}) == (
        "[image/png saved to outputs/0001-3.png]\n"
    )
    text = render_outputs([figure, frame], saved)
    assert text == (
        "[image/png saved to outputs/0001-1.png]\n"
        "   a\n0  1\n[text/html saved to outputs/0001-2.html]\n"
    )
    assert "AAAA" not in text


def test_cap_keeps_head_and_tail_and_names_the_file() -> None:
    text = "H" * 600 + "M" * 10_000 + "T" * 600
    capped = cap_text(text, 1_000, "outputs/0001-output.txt")
    assert capped.startswith("H" * 500) and capped.endswith("T" * 500)
    assert "10,200 characters cut; the full output is in outputs/0001-output.txt" in capped
    assert cap_text("short", 1_000, None) == "short"


def test_parts_left_out_for_the_byte_caps_show_as_their_files() -> None:
    def cut(part: str, path: str | None, error: str | None = None) -> dict[str, object]:
        return {"part": part, "bytes": 50_000_000, "kept": 0, "path": path, "error": error}

    html = {
        "output_type": "display_data",
        "data": {"text/plain": "<IPython.core.display.HTML object>"},
        "metadata": {"kernelexec": {"cut": [cut("text/html", "outputs/in2-display.html")]}},
    }
    unsaved = {
        "output_type": "display_data",
        "data": {"text/plain": "'kept'"},
        "metadata": {"kernelexec": {"cut": [cut("image/png", None, "No space left on device")]}},
    }
    forged = {
        "output_type": "display_data",
        "data": {"text/plain": "'hi'"},
        "metadata": {"kernelexec": {"cut": [cut("text/html", "../../etc/passwd")]}},
    }
    assert render_outputs([html, unsaved, forged], {}) == (
        "[text/html, 50,000,000 bytes, saved to outputs/in2-display.html]\n"
        "'kept'\n[image/png, 50,000,000 bytes, left out: No space left on device]\n"
        "'hi'\n"
    )
