"""The protocol reducer, fed messages recorded from a real kernel."""

from __future__ import annotations

import base64
import io
from typing import Any

from kernelexec import Limits
from kernelexec._execution._messages import cut_records, live_output
from kernelexec._execution._reducer import ExecutionReducer

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


def test_an_execution_count_the_kernel_forged_is_not_taken() -> None:
    # The kernel's code can send any content; the count goes into results and traces.
    reducer = ExecutionReducer("REQUEST", limits=Limits())
    reducer.feed(msg("execute_input", {"code": "", "execution_count": 4}))
    for forged in ("Leak_SECRETVALUE9", True, -1, 2**64, 4.5, None):
        reducer.feed(msg("execute_reply", {"status": "ok", "execution_count": forged}))
        assert reducer.execution_count == 4
    reducer.feed(msg("execute_reply", {"status": "ok", "execution_count": 5}))
    assert reducer.execution_count == 5


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

    from kernelexec._execution._messages import notebook_output

    kinds = ("stream", "display_data", "execute_result", "error")
    checked = 0
    for messages in recorded.values():
        for message in messages:
            if message["header"]["msg_type"] in kinds:
                assert notebook_output(message) == output_from_msg(message)
                checked += 1
    assert checked >= 10


# -- byte caps on the client's side (kernels kernelexec did not boot)

SMALL = Limits(max_output_bytes=10_000, max_image_bytes=10_000, max_result_bytes=30_000)


def spilling(limits: Limits = SMALL) -> tuple[ExecutionReducer, io.StringIO]:
    sink = io.StringIO()
    sink.close = lambda: None  # type: ignore[method-assign]  # keep it readable after finish()
    reducer = ExecutionReducer(
        "REQUEST", limits=limits, spill=lambda: sink, spill_name="outputs/0001-output.txt"
    )
    return reducer, sink


def test_a_huge_result_is_cut_on_arrival_and_kept_whole_in_the_spill() -> None:
    reducer, sink = spilling()
    message = msg("execute_result", {"data": {"text/plain": "r" * 3_000_000}, "execution_count": 1})
    reducer.feed(message)
    # Cut in place: a live listener fed the same message sees it cut too.
    shown = live_output(message)
    assert shown is not None and len(shown["data"]["text/plain"]) <= 10_000
    folded = reducer.finish()
    (output,) = folded.outputs
    text = output["data"]["text/plain"]
    assert len(text) <= 10_000 and "all of it is in outputs/0001-output.txt" in text
    assert "r" * 3_000_000 in sink.getvalue()
    assert folded.notes == [
        f"An output's text/plain (3,000,000 bytes) was cut to {len(text):,} bytes, head and "
        "tail kept; all of it is in outputs/0001-output.txt."
    ]
    assert folded.saved_files == [], "the spill file is the result's full_output, not a file"


def test_a_huge_error_is_cut_with_its_traceback_and_reported_once() -> None:
    reducer, sink = spilling()
    error = {"ename": "E", "evalue": "v" * 1_000_000, "traceback": ["T"] * 500_000}
    reducer.feed(msg("error", error))
    reducer.feed(msg("execute_reply", {"status": "error", **error}))
    folded = reducer.finish()
    assert folded.error is not None
    assert len(folded.error.evalue) <= 2_500 and len(folded.error.traceback) < 2_000
    assert len(folded.notes) == 1 and "traceback" in folded.notes[0]
    whole = sink.getvalue()
    assert whole.count("T\n") == 500_000 and "v" * 1_000_000 in whole


def test_images_and_structured_data_past_their_caps_are_left_out() -> None:
    reducer, sink = spilling()
    png = base64.b64encode(b"\x89PNG" + bytes(20_000)).decode()
    bundle = {"image/png": png, "application/json": {"k": "j" * 20_000}, "text/plain": "<Fig>"}
    reducer.feed(msg("display_data", {"data": bundle, "metadata": {}}))
    (output,) = reducer.finish().outputs
    assert output["data"] == {"text/plain": "<Fig>"}
    records = output["metadata"]["kernelexec"]["cut"]
    assert [(r["part"], r["kept"]) for r in records] == [("image/png", 0), ("application/json", 0)]
    assert png in sink.getvalue() and "j" * 20_000 in sink.getvalue()


def test_outputs_past_the_result_cap_are_left_out_and_spilled() -> None:
    reducer, sink = spilling()
    for i in range(5):
        reducer.feed(msg("display_data", {"data": {"text/plain": str(i) * 9_000}, "metadata": {}}))
    update = {"data": {"text/plain": "u" * 9_000}, "transient": {"display_id": "d"}}
    reducer.feed(msg("display_data", {**update, "metadata": {}}))
    folded = reducer.finish()
    assert [o["data"]["text/plain"][0] for o in folded.outputs] == ["0", "1", "2"]
    assert folded.left_out == 3
    assert "3 outputs past max_result_bytes (30,000 bytes) were left out" in folded.notes[-1]
    assert all(str(i) * 9_000 in sink.getvalue() for i in (3, 4))


def test_an_update_past_the_result_cap_is_not_applied() -> None:
    reducer, sink = spilling()
    shown = {"data": {"text/plain": "a"}, "metadata": {}, "transient": {"display_id": "d"}}
    reducer.feed(msg("display_data", shown))
    reducer.feed(msg("display_data", {"data": {"text/plain": "b" * 9_000}, "metadata": {}}))
    grown = {**shown, "data": {"text/plain": "u" * 9_500}}
    reducer.feed(msg("update_display_data", grown))  # 18,501 bytes: within 30,000
    reducer.feed(msg("update_display_data", {**shown, "data": {"text/plain": "w" * 9_999}}))
    reducer.feed(msg("display_data", {"data": {"text/plain": "c" * 9_000}, "metadata": {}}))
    bigger = {**shown, "data": {"text/plain": "z" * 9_999}, "metadata": {"m": "m" * 5_000}}
    reducer.feed(msg("update_display_data", bigger))  # would take 33,000 bytes
    folded = reducer.finish()
    assert folded.outputs[0]["data"]["text/plain"] == "w" * 9_999
    assert folded.left_out == 1 and "z" * 9_999 in sink.getvalue()


def test_kernel_cut_reports_name_only_files_in_outputs() -> None:
    good = {"part": "text/plain", "bytes": 9, "kept": 3, "path": "outputs/in2-result.txt"}
    forged = [
        {**good, "path": "../../etc/passwd"},
        {**good, "path": "/etc/passwd"},
        {**good, "path": "outputs/../x"},
        {**good, "path": "outputs/a/b"},
        {**good, "path": "outputs/.."},
        {**good, "kept": 10},
        {**good, "bytes": "9"},
        {**good, "part": ""},
        "not a record",
    ]
    assert cut_records({"cut": [*forged, good]}) == [{**good, "error": None}]
    assert cut_records({"cut": "no"}) == [] and cut_records(None) == []
    reducer = ExecutionReducer("REQUEST", limits=Limits())
    report = {"kernelexec": {"cut": [*forged, good]}}
    reducer.feed({**msg("execute_result", {"data": {"text/plain": "a"}}), "metadata": report})
    folded = reducer.finish()
    assert folded.saved_files == ["outputs/in2-result.txt"]
    assert len(folded.notes) == 1 and "passwd" not in folded.notes[0]


def test_a_flood_of_cuts_is_counted_past_a_thousand_not_listed() -> None:
    reducer = ExecutionReducer("REQUEST", limits=Limits())
    for i in range(1_010):
        record = {"part": "text/plain", "bytes": 9, "kept": 3, "path": f"outputs/in2-d-{i}.txt"}
        report = {"kernelexec": {"cut": [record]}}
        reducer.feed({**msg("display_data", {"data": {"text/plain": "a"}}), "metadata": report})
    folded = reducer.finish()
    assert len(folded.saved_files) == 1_000 and folded.saved_files[-1] == "outputs/in2-d-999.txt"
    assert folded.notes[-1] == "1,005 more output parts were cut likewise."


def test_dropped_messages_are_said_once_per_channel(recorded: Messages) -> None:
    reducer = ExecutionReducer("REQUEST", limits=Limits())
    reducer.dropped("iopub", cap=64_000_000, size=None, count=1)
    reducer.dropped("iopub", cap=64_000_000, size=300_000_123, count=2)
    for message in recorded["streams_and_result"]:
        reducer.feed(message)
    assert reducer.error is None  # output may be missing; the execution's outcome is known
    notes = reducer.finish().notes
    assert notes[0] == (
        "3 messages (the biggest 300,000,123 bytes) from the kernel on its iopub channel were "
        "over the host's cap of 64,000,000 bytes a message (Limits.max_message_bytes) and "
        "dropped unread: output sent then may be missing."
    )


def test_a_drop_on_the_shell_channel_fails_the_execution(recorded: Messages) -> None:
    reducer = ExecutionReducer("REQUEST", limits=Limits())
    reducer.dropped("shell", cap=1_000_000, size=5_000_000, count=1)
    for message in recorded["streams_and_result"]:  # an "ok" reply too: it may be forged
        reducer.feed(message)
    assert reducer.error is not None and reducer.error.ename == "MessageDropped"
    assert "A message of 5,000,000 bytes" in reducer.finish().notes[0]


def test_a_lost_reply_is_an_error_and_a_dead_kernel_drops_nothing() -> None:
    reducer = ExecutionReducer("REQUEST", limits=Limits(max_message_bytes=2_000_000))
    reducer.dropped(None, cap=2_000_000, size=None, count=1)
    reducer.feed(msg("status", {"execution_state": "idle"}))
    reducer.reply_lost()
    assert reducer.done and reducer.error is not None
    assert "its reply never came" in reducer.error.evalue
    assert "(on a channel it did not say)" in reducer.finish().notes[0]
    died = ExecutionReducer("REQUEST", limits=Limits())
    died.dropped("shell", cap=64_000_000, size=None, count=1)
    died.kernel_died()  # its sockets broke because it ended
    assert died.error is None and died.finish().notes == []
