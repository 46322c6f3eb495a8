"""The execution stream's pure parts: the server's OutputQueue, the clients' StreamReader."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from kernelexec import ExecutionResult, ServerError
from kernelexec._client._sse import StreamReader
from kernelexec._server._sse import OutputQueue, execution_events, frame


def stream(text: str, name: str = "stdout") -> dict[str, Any]:
    return {"output_type": "stream", "name": name, "text": text}


def parse(frames: list[str]) -> list[tuple[str, Any]]:
    events = []
    for item in frames:
        event, data = item.rstrip("\n").split("\n")
        events.append((event.removeprefix("event: "), json.loads(data.removeprefix("data: "))))
    return events


async def test_a_slow_reader_gets_stream_text_merged_per_stream() -> None:
    queue = OutputQueue(max_chars=1_000)
    for text in ("a", "b", "c"):
        queue.put(stream(text))
    queue.put(stream("E", "stderr"))
    queue.put(stream("d"))
    assert parse(queue.take()) == [
        ("output", stream("abc")),
        ("output", stream("E", "stderr")),
        ("output", stream("d")),
    ]
    assert queue.take() == []


async def test_queued_output_is_bounded_and_drops_are_reported() -> None:
    queue = OutputQueue(max_chars=1_000)
    for _ in range(10_000):
        queue.put(stream("x" * 100))  # 1 MB offered, 1 kB kept
    display = {"output_type": "display_data", "data": {"text/plain": "later"}, "metadata": {}}
    queue.put(display)
    events = parse(queue.take())
    assert events[0] == ("output", stream("x" * 1_000))
    # A display left out is sized without being framed: about its JSON's length.
    kind, dropped = events[1]
    assert kind == "dropped" and dropped["outputs"] == 9_991
    framed = len(frame("output", display))
    assert 9_990 * 100 + framed / 2 < dropped["chars"] < 9_990 * 100 + framed * 2
    assert len(events) == 2
    queue.put(display)  # drained: room again
    assert parse(queue.take()) == [("output", display)]


async def test_events_end_with_the_result_after_every_output() -> None:
    queue = OutputQueue(max_chars=10_000)

    async def run() -> ExecutionResult:
        for i in range(3):
            queue.put(stream(f"{i}\n"))
            await asyncio.sleep(0.01)
        return ExecutionResult(status="ok", stdout="0\n1\n2\n")

    task = asyncio.get_running_loop().create_task(run())
    body = [chunk.decode() async for chunk in execution_events(task, queue)]
    events = parse(body)
    assert events[-1][0] == "result" and events[-1][1]["stdout"] == "0\n1\n2\n"
    assert "".join(d["text"] for e, d in events if e == "output") == "0\n1\n2\n"


async def test_keepalive_comments_while_nothing_happens() -> None:
    queue = OutputQueue(max_chars=10_000)

    async def run() -> ExecutionResult:
        await asyncio.sleep(0.35)
        return ExecutionResult(status="ok")

    task = asyncio.get_running_loop().create_task(run())
    body = [chunk async for chunk in execution_events(task, queue, keepalive=0.1)]
    assert b": keep-alive\n\n" in body and body[-1].startswith(b"event: result")


def test_stream_reader_dispatches_outputs_and_returns_the_result() -> None:
    seen: list[dict[str, Any]] = []
    reader = StreamReader(seen.append)
    result = ExecutionResult(status="ok", stdout="hi\n")
    lines = (
        frame("output", stream("hi\n")) + ": keep-alive\n\n" + frame("result", result.to_dict())
    ).split("\n")
    for line in lines:
        reader.feed(line)
    assert seen == [stream("hi\n")] and reader.result() == result


def test_stream_reader_survives_a_broken_listener() -> None:
    calls = []

    def broken(output: dict[str, Any]) -> None:
        calls.append(output)
        raise RuntimeError("listener bug")

    reader = StreamReader(broken)
    for line in (
        frame("output", stream("a"))
        + frame("output", stream("b"))
        + frame("result", {"status": "ok"})
    ).split("\n"):
        reader.feed(line)
    assert len(calls) == 1 and reader.result().ok


def test_stream_reader_raises_for_an_error_event_or_a_cut_stream() -> None:
    reader = StreamReader(None)
    for line in frame("error", {"error": "session_closed", "message": "gone"}).split("\n"):
        reader.feed(line)
    with pytest.raises(ServerError, match="gone") as raised:
        reader.result()
    assert raised.value.code == "session_closed"
    cut = StreamReader(None)
    cut.feed("event: output")
    with pytest.raises(ServerError, match="without a result"):
        cut.result()
