"""on_output listeners: readable text for print, the nbformat output for whoever wants it."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from _serverproc import ServerProcess

from kernelexec import AsyncSession, Client, LiveOutput, Session

SHOWS_EVERY_KIND = (
    "from IPython.display import Markdown, display\n"
    "print('hello')\n"
    "display('shown')\n"
    "display(Markdown('**bold**'))\n"
    "'the result'"
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = ServerProcess(tmp_path_factory.mktemp("callbacks") / "work")
    yield proc
    assert proc.stop() == 0


async def test_print_as_a_listener_shows_text_not_dicts(
    session: AsyncSession, capsys: pytest.CaptureFixture[str]
) -> None:
    result = await session.execute(SHOWS_EVERY_KIND, on_output=print)
    assert result.ok
    shown = capsys.readouterr().out
    assert shown == "hello\n'shown'\n**bold**\n'the result'\n"
    failed = await session.execute("print('before')\n1/0", on_output=print)
    assert failed.error is not None
    shown = capsys.readouterr().out
    assert shown.startswith("before\n")
    assert "ZeroDivisionError: division by zero" in shown
    assert "\x1b[" not in shown and "output_type" not in shown  # no colour codes, no dicts


async def test_odd_displays_from_the_kernel_still_print_as_text(
    session: AsyncSession, capsys: pytest.CaptureFixture[str]
) -> None:
    # Raw bundles no IPython repr would make: a list, an object, an image
    # that is not base64, nothing at all.
    result = await session.execute(
        "from IPython.display import display\n"
        "display({'text/plain': ['li', 'st']}, raw=True)\n"
        "display({'text/plain': {'a': 1}}, raw=True)\n"
        "display({'image/png': 'x'}, raw=True)\n"
        "display({}, raw=True)\n"
        "print('\\x1b[31mred\\x1b[0m')",
        on_output=print,
    )
    assert result.ok, result.text
    assert capsys.readouterr().out == (
        "list\n{'a': 1}\n[display of image/png]\n\n\x1b[31mred\x1b[0m\n"  # streams as printed
    )


def test_a_sync_session_prints_text_too(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with Session(tmp_path) as s:
        assert s.execute("print('sync hi')", on_output=print).ok
    assert capsys.readouterr().out == "sync hi\n"


async def test_the_nbformat_output_stays_available(session: AsyncSession) -> None:
    seen: list[LiveOutput] = []
    result = await session.execute(SHOWS_EVERY_KIND, on_output=seen.append)
    assert [o.output for o in seen] == result.outputs  # the very dicts the result holds
    for live in seen:
        assert isinstance(live, Mapping) and dict(live) == live.output
        assert live["output_type"] == live.type
        json.dumps(live.output)  # plain JSON, to forward as it is
    assert [o.type for o in seen] == ["stream", "display_data", "display_data", "execute_result"]
    # The dict form, as listeners written before LiveOutput read it.
    assert seen[0].get("text") == "hello\n" and seen[0] == {
        "output_type": "stream",
        "name": "stdout",
        "text": "hello\n",
    }
    assert seen[1]["data"]["text/plain"] == "'shown'"


async def test_live_events_read_as_what_they_show(session: AsyncSession) -> None:
    seen: list[LiveOutput] = []
    await session.execute(
        "from IPython.display import clear_output\n"
        "h = display('a', display_id=True)\nh.update('b')\n"
        "clear_output()\nprint('partial', end='', flush=True)",
        on_output=seen.append,
    )
    assert [(o.type, o.text) for o in seen] == [
        ("display_data", "'a'\n"),
        ("update_display_data", "'b'\n"),
        ("clear_output", ""),
        ("stream", "partial"),  # exactly as printed
    ]
    assert [str(o) for o in seen] == ["'a'", "'b'", "", "partial"]


def test_a_remote_session_prints_text_as_a_local_one(
    server: ServerProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    seen: list[LiveOutput] = []

    def listener(output: LiveOutput) -> None:
        seen.append(output)
        print(output)

    with Client(server.url, token=server.token) as client, client.session() as s:
        result = s.execute(SHOWS_EVERY_KIND, on_output=listener)
    assert result.ok
    assert capsys.readouterr().out == "hello\n'shown'\n**bold**\n'the result'\n"
    assert [o.output for o in seen] == result.outputs


@pytest.mark.parametrize(
    ("output", "text"),
    [
        ({"output_type": "stream", "name": "stdout", "text": "\x1b[31mred\x1b[0m\r50%"}, None),
        (
            {
                "output_type": "error",
                "ename": "ValueError",
                "evalue": "bad",
                "traceback": ["\x1b[31mValueError\x1b[0m: bad"],
            },
            "ValueError: bad\n",
        ),
        (
            {"output_type": "display_data", "data": {"image/png": "iVBOR"}, "metadata": {}},
            "[display of image/png]\n",
        ),
        (
            {"output_type": "execute_result", "data": {"application/json": {"a": 1}}},
            '{\n  "a": 1\n}\n',
        ),
        # What a misbehaving server could send: text, never an exception.
        ({"output_type": "error", "traceback": 5}, "[error]\n"),
        ({"output_type": "display_data", "data": "nope"}, "[display_data]\n"),
        ({"output_type": "stream", "text": ["not", "text"]}, ""),
        ({}, ""),
    ],
)
def test_text_of_each_kind_of_output(output: dict[str, Any], text: str | None) -> None:
    live = LiveOutput(output)
    expected = output["text"] if text is None else text  # a stream: as printed
    assert live.text == expected
    assert str(live) == expected.removesuffix("\n")
    assert repr(live) == f"LiveOutput({output!r})"
