"""The protocol reducer, fed messages recorded from a real kernel."""

from __future__ import annotations

import io
from typing import Any

from kernelexec import Limits
from kernelexec._reducer import ExecutionReducer

Messages = dict[str, list[dict[str, Any]]]


def fold(messages: list[dict[str, Any]], limits: Limits | None = None) -> ExecutionReducer:
    reducer = ExecutionReducer("REQUEST", limits=limits or Limits())
    for msg in messages:
        assert reducer.feed(msg)
    return reducer


def msg(msg_type: str, content: dict[str, Any], parent: str = "REQUEST") -> dict[str, Any]:
    return {
        "header": {"msg_type": msg_type},
        "parent_header": {"msg_id": parent},
        "content": content,
    }


def test_streams_kept_apart_and_result(recorded: Messages) -> None:
    reducer = fold(recorded["streams_and_result"])
    assert reducer.done
    folded = reducer.finish()
    assert folded.stdout == "out\n"
    assert folded.stderr == "err\n"
    assert folded.outputs[-1]["output_type"] == "execute_result"
    assert folded.outputs[-1]["data"]["text/plain"] == "42"
    assert folded.error is None
    assert folded.execution_count == folded.outputs[-1]["execution_count"]


def test_error_keeps_earlier_output_and_strips_ansi(recorded: Messages) -> None:
    folded = fold(recorded["error_after_output"]).finish()
    assert folded.stdout == "before\n"
    assert folded.error is not None and folded.error.ename == "ZeroDivisionError"
    assert all("\x1b" not in line for line in folded.error.traceback)
    assert any("\x1b" in line for line in folded.outputs[-1]["traceback"]), (
        "transcript keeps colour"
    )


def test_clear_output_wait_leaves_only_the_last_step(recorded: Messages) -> None:
    folded = fold(recorded["clear_output_wait"]).finish()
    assert folded.outputs == [{"output_type": "stream", "name": "stdout", "text": "step 2\n"}]


def test_update_display_replaces_the_output_in_place(recorded: Messages) -> None:
    folded = fold(recorded["update_display"]).finish()
    assert len(folded.outputs) == 1
    assert folded.outputs[0]["data"]["text/plain"] == "'second'"


def test_messages_of_other_requests_are_ignored(recorded: Messages) -> None:
    reducer = ExecutionReducer("OTHER", limits=Limits())
    assert not any(reducer.feed(m) for m in recorded["streams_and_result"])
    assert reducer.finish().outputs == [] and not reducer.done


def test_not_done_until_idle_and_reply() -> None:
    reducer = ExecutionReducer("REQUEST", limits=Limits())
    reducer.feed(msg("status", {"execution_state": "idle"}))
    assert not reducer.done
    reducer.feed(msg("execute_reply", {"status": "ok", "execution_count": 3}))
    assert reducer.done and reducer.execution_count == 3


def test_error_only_in_reply_is_reported() -> None:
    reducer = fold(
        [
            msg(
                "execute_reply",
                {
                    "status": "error",
                    "ename": "E",
                    "evalue": "v",
                    "traceback": ["\x1b[31mline\x1b[0m"],
                },
            )
        ]
    )
    assert reducer.error is not None and reducer.error.traceback == ["line"]


def test_malformed_messages_cost_only_themselves() -> None:
    folded = fold(
        [
            msg("display_data", {"data": None}),
            msg("stream", {"name": "stdout"}),
            msg("stream", {"name": "stdout", "text": "fine\n"}),
        ]
    ).finish()
    assert folded.bad_messages == 2
    assert folded.stdout == "fine\n"


def test_flood_keeps_head_and_tail_and_spills_everything() -> None:
    sink = io.StringIO()
    sink.close = lambda: None  # type: ignore[method-assign]  # keep it readable after finish()
    limits = Limits(max_text_chars=1_000, max_stream_chars=10_000)
    reducer = ExecutionReducer("REQUEST", limits=limits, spill=lambda: sink)
    chunks = [f"{i:06d}" + "x" * 994 for i in range(1_000)]  # 1 MB in 1000 messages
    for chunk in chunks:
        reducer.feed(msg("stream", {"name": "stdout", "text": chunk}))
    folded = reducer.finish()
    assert sink.getvalue() == "".join(chunks)
    assert len(folded.stdout) < 10_000 + 200
    assert folded.stdout.startswith("000000x")
    assert folded.stdout.endswith(chunks[-1])
    assert f"{1_000_000 - 10_000:,} characters cut" in folded.stdout
    assert folded.cut_chars == 1_000_000 - 10_000


def test_rich_outputs_past_the_limit_are_dropped_and_counted() -> None:
    limits = Limits(max_outputs=3)
    folded = fold(
        [msg("display_data", {"data": {"text/plain": str(i)}, "metadata": {}}) for i in range(5)],
        limits,
    ).finish()
    assert len(folded.outputs) == 3 and folded.dropped_outputs == 2


def test_outputs_are_built_as_nbformat_builds_them(recorded: Messages) -> None:
    from nbformat.v4 import output_from_msg

    from kernelexec._reducer import notebook_output

    kinds = ("stream", "display_data", "execute_result", "error")
    checked = 0
    for messages in recorded.values():
        for message in messages:
            if message["header"]["msg_type"] in kinds:
                assert notebook_output(message) == output_from_msg(message)
                checked += 1
    assert checked >= 10
