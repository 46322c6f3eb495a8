"""The Jupyter messaging protocol, folded into one execution's outputs.

No I/O happens here: every backend feeds the kernel's messages for one
``execute_request`` to an ``ExecutionReducer`` and reads the outcome when it is
done. Recorded messages are enough to test it.
"""

from __future__ import annotations

import contextlib
import json
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TextIO

from .._kernel.caps import Capper, Caps, Cut
from ._messages import (
    Record,
    count_from,
    cut_records,
    error_from,
    live_output,
    notebook_output,
    usage_from,
)
from ._models import ExecutionError, Limits, Usage

__all__ = ["DROPPED_ERROR", "ExecutionReducer", "Folded", "stream_cut_marker"]

Message = dict[str, Any]

# The files our kernel names (outputs/in<N>-<kind>.<ext>): one name in outputs/.
_NOTED_CUTS = 5  # cuts described one by one in the result's message
_KEPT_CUTS = 1_000  # cuts listed (their files in the result's files); the rest counted
_USAGE_KEY = "kernelexec_usage"  # the execute_reply's metadata, from _kernel/usage.py
DROPPED_ERROR = "MessageDropped"  # the ename of an execution whose reply may be lost
MISSING_ERROR = "ReplyMissing"  # the ename of one the kernel went idle without answering


@dataclass(frozen=True)
class Folded:
    """What the messages of one execution came to."""

    outputs: list[dict[str, Any]]
    stdout: str
    stderr: str
    error: ExecutionError | None
    execution_count: int | None
    cut_chars: int
    dropped_outputs: int
    bad_messages: int
    left_out: int = 0  # outputs past max_result_bytes
    stream_chars: int = 0  # all the stream text, ``cut_chars`` of it not kept
    cut_at: int | None = None  # the output whose text starts with the stream cut's marker
    saved_files: list[str] = field(default_factory=list)  # the whole of cut outputs
    notes: list[str] = field(default_factory=list)  # what the cuts were, for the message
    usage: Usage | None = None  # as the kernel measured it, if it did


class ExecutionReducer:
    """Folds the messages of one execute request into notebook outputs.

    It applies ``clear_output`` (also ``wait=True``) and
    ``update_display_data`` as JupyterLab does, merges consecutive stream text,
    and keeps memory bounded under a flood: past ``limits.max_stream_chars``
    only the head and a rolling tail of the streams are kept, and once the
    streams outgrow ``limits.max_text_chars`` every chunk is also written to
    the sink that ``spill`` opens, so nothing printed is lost.

    Messages the host dropped unread, over ``Limits.max_message_bytes``, are
    noted through ``dropped`` (the result's message says what was lost); one
    dropped on the shell channel, where the reply comes, makes the execution
    an error: its reply may be the one lost, or forged.

    Displays, results and errors are cut to the byte caps as they arrive
    (``max_output_bytes``, ``max_image_bytes``), the same way our kernel cuts
    them before sending, so a kernel we did not boot gets the same result; the
    whole of a cut part, and any output past ``max_outputs`` or
    ``max_result_bytes``, goes to the spill sink too. A cut message's content
    is replaced in place, so a live listener fed the same message sees it cut.

    Args:
        msg_id: the ``execute_request``'s id; other messages are ignored.
        limits: the caps to apply.
        spill: opens the sink for the complete stream output; None keeps none.
        spill_name: how results name that sink (its path in the work dir).
    """

    def __init__(
        self,
        msg_id: str,
        *,
        limits: Limits,
        spill: Callable[[], TextIO] | None = None,
        spill_name: str | None = None,
        output_begins: bool = True,
    ) -> None:
        self.msg_id = msg_id
        self.idle = False
        self.heard = False  # a message of this execution's has come (its busy status first)
        self.replied = False
        self.began = False  # the kernel has begun the code (see feed)
        self.announced = False  # its execute_input came
        self._output_begins = output_begins
        self.execution_count: int | None = None
        self.error: ExecutionError | None = None
        self.usage: Usage | None = None
        self._limits = limits
        self._outputs: list[dict[str, Any]] = []
        self._display_ids: dict[str, list[int]] = {}
        self._clear_pending = False
        self._rich_outputs = 0
        self._dropped = 0
        self._bad = 0
        self._stream_chars = 0  # everything streamed, kept or not
        self._head_chars = 0  # stream text kept in _outputs
        self._tail: deque[list[str]] = deque()  # [name, text] after the head
        self._tail_chars = 0
        self._spill_opener = spill
        self._spill_name = spill_name
        self._spill: TextIO | None = None
        self._capper = Capper(
            Caps(limits.max_output_bytes, limits.max_image_bytes, limits.max_result_bytes)
        )
        self._cuts: list[Record] = []
        self._more_cuts = 0  # past _KEPT_CUTS
        self._rich_bytes = 0  # what the kept rich outputs take
        self._sizes: dict[int, int] = {}  # output index -> its bytes
        self._left_out = 0
        self._drops: dict[str | None, list[int]] = {}  # channel -> [messages, biggest known size]
        self._drop_cap = limits.max_message_bytes
        self._handlers: dict[str, Callable[[Message], None]] = {
            "status": self._on_status,
            "execute_input": self._on_execute_input,
            "stream": self._on_stream,
            "display_data": self._on_display,
            "execute_result": self._on_display,
            "update_display_data": self._on_update_display,
            "clear_output": self._on_clear_output,
            "error": self._on_error,
            "execute_reply": self._on_execute_reply,
        }

    @property
    def done(self) -> bool:
        """The kernel is idle again and has replied: nothing more will come."""
        return self.idle and self.replied

    @property
    def spilled(self) -> bool:
        return self._spill is not None

    def feed(self, msg: Message) -> bool:
        """Take one message; returns whether it belonged to this execution."""
        parent = msg.get("parent_header") or {}
        if parent.get("msg_id") != self.msg_id:
            return False
        self.heard = True
        msg_type = msg.get("header", {}).get("msg_type", "")
        # A kernel says execute_input once it has taken the request up (ipykernel:
        # its SIGINT handler set). One not known to say it has begun once it says
        # anything else of the code but its status (busy comes before).
        if msg_type == "execute_input" or (self._output_begins and msg_type != "status"):
            self.began = True
        handler = self._handlers.get(msg_type)
        if handler is not None:
            try:
                handler(msg)
            except (KeyError, TypeError, ValueError, AttributeError):
                # A malformed message costs that message, never the execution.
                self._bad += 1
        return True

    def dropped(self, channel: str | None, *, cap: int, size: int | None, count: int) -> None:
        """Notes ``count`` messages from ``channel`` (None: not known) dropped by the host.

        Args:
            channel: where they came, if the backend could tell.
            cap: the host's cap they were over, in bytes.
            size: the biggest one's bytes, if the backend knows it.
            count: how many.
        """
        drop = self._drops.setdefault(channel, [0, 0])
        drop[0] += count
        drop[1] = max(drop[1], size or 0)
        self._drop_cap = cap
        if channel == "shell" and self.error is None:
            self.error = ExecutionError(
                DROPPED_ERROR,
                f"a message from the kernel on its shell channel, where the reply to this code "
                f"comes, was over {_over(cap)} and was dropped unread: the reply may be the "
                "one lost, or forged, so how the code ended is not known",
            )

    def kernel_died(self) -> None:
        """The kernel ended: its connections broke with it, and no message was dropped."""
        self._drops.clear()
        if self.error is not None and self.error.ename == DROPPED_ERROR:
            self.error = None

    def reply_lost(self, *, interrupted: bool = False) -> None:
        """The kernel is done with this execution and its reply never came.

        Dropped with a message over the cap, if one was; else never sent: the
        kernel went idle without it (its handler failed), which an interrupt
        sent as the code began (``interrupted``) can make it do.
        """
        self.replied = True
        if self.error is not None:
            return
        if self._drops:
            self.error = ExecutionError(
                DROPPED_ERROR,
                f"the kernel finished this code but its reply never came: a message over "
                f"{_over(self._drop_cap)} was dropped unread, so how the code ended is not known",
            )
        elif interrupted:
            self.error = ExecutionError(
                "KeyboardInterrupt",
                "interrupted as the code began (the interrupt was asked for before the kernel "
                "began it); the kernel sent no reply, so how far the code ran is not known",
            )
        else:
            self.error = ExecutionError(
                MISSING_ERROR,
                "the kernel went idle without replying to this code: its handler failed "
                "before the reply (an interrupt that came just as the code was starting, or "
                "code that broke the kernel's own handler; ipykernel logs which), so whether "
                "and how the code ran is not known",
            )

    def add_stream(self, name: str, text: str) -> None:
        """Append stream text that did not come from the kernel (an input echo)."""
        self._stream(name, text)

    def finish(self) -> Folded:
        """The outcome so far; call once no more messages will be fed."""
        if self._spill is not None:
            self._spill.close()
        outputs = list(self._outputs)
        cut = self._stream_chars - self._head_chars - self._tail_chars
        cut_at = None
        if self._tail:
            first = self._tail[0][0]
            if cut:
                # An output of its own, never merged into the head: the
                # result's text finds the marker there (see ``cut_at``).
                cut_at = len(outputs)
                outputs.append(_stream_output(first, stream_cut_marker(cut)))
            for name, text in self._tail:
                _append_stream(outputs, name, text)
        cuts = _unique(self._cuts)
        return Folded(
            outputs=outputs,
            stdout=_join_stream(outputs, "stdout"),
            stderr=_join_stream(outputs, "stderr"),
            error=self.error,
            execution_count=self.execution_count,
            cut_chars=cut,
            dropped_outputs=self._dropped,
            bad_messages=self._bad,
            left_out=self._left_out,
            stream_chars=self._stream_chars,
            cut_at=cut_at,
            saved_files=list(
                dict.fromkeys(
                    r["path"] for r in cuts if r["path"] and r["path"] != self._spill_name
                )
            ),
            notes=self._notes(cuts),
            usage=self.usage,
        )

    # -- handlers, one per message type

    def _on_status(self, msg: Message) -> None:
        if msg["content"]["execution_state"] == "idle":
            self.idle = True

    def _on_execute_input(self, msg: Message) -> None:
        self.announced = True
        self.execution_count = count_from(
            msg["content"].get("execution_count"), self.execution_count
        )

    def _on_stream(self, msg: Message) -> None:
        content = msg["content"]
        name, text = content["name"], content["text"]
        if name not in ("stdout", "stderr") or not isinstance(text, str):
            raise ValueError("not a stream")
        self._stream(name, text)

    def _on_display(self, msg: Message) -> None:
        size = self._cut(msg).size
        output = notebook_output(msg)
        self._apply_pending_clear()
        if self._rich_outputs >= self._limits.max_outputs:
            self._dropped += 1
            self._spill_output(output, "past max_outputs")
            return
        if self._rich_bytes + size > self._limits.max_result_bytes:
            self._left_out += 1
            self._spill_output(output, "past max_result_bytes")
            return
        self._rich_outputs += 1
        self._rich_bytes += size
        self._sizes[len(self._outputs)] = size
        display_id = (msg["content"].get("transient") or {}).get("display_id")
        if display_id:
            self._display_ids.setdefault(display_id, []).append(len(self._outputs))
        self._outputs.append(output)

    def _on_update_display(self, msg: Message) -> None:
        size = self._cut(msg).size
        content = msg["content"]
        display_id = str((content.get("transient") or {}).get("display_id"))
        indexes = self._display_ids.get(display_id, [])
        grown = sum(size - self._sizes.get(index, 0) for index in indexes)
        if indexes and self._rich_bytes + grown > self._limits.max_result_bytes:
            self._left_out += 1
            self._spill_output(live_output(msg) or {}, "past max_result_bytes")
            return
        self._rich_bytes += grown
        for index in indexes:
            self._sizes[index] = size
            self._outputs[index]["data"] = content["data"]
            self._outputs[index]["metadata"] = content.get("metadata", {})

    def _on_clear_output(self, msg: Message) -> None:
        if msg["content"].get("wait"):
            self._clear_pending = True
        else:
            self._clear()

    def _on_error(self, msg: Message) -> None:
        self._cut(msg)
        output = notebook_output(msg)
        self._apply_pending_clear()
        self._outputs.append(output)
        self.error = error_from(msg["content"])

    def _on_execute_reply(self, msg: Message) -> None:
        content = msg["content"]
        self.replied = True
        self.usage = usage_from((msg.get("metadata") or {}).get(_USAGE_KEY))
        self.execution_count = count_from(content.get("execution_count"), self.execution_count)
        status = content.get("status")
        if status == "error" and self.error is None:
            # Only an error that never came as an error message is read here.
            self._cut(msg)
            self.error = error_from(msg["content"])
        elif status == "aborted" and self.error is None:
            self.error = ExecutionError("Aborted", "the kernel aborted this execution")

    # -- byte caps

    def _cut(self, msg: Message) -> Cut:
        """Cuts the message's content to the byte caps, in place; notes what was cut."""
        records = cut_records((msg.get("metadata") or {}).get("kernelexec"))
        cut = self._capper.cut(msg["header"]["msg_type"], msg["content"], self._save)
        if cut.records:
            msg["content"] = cut.content
            records += cut.records
        room = _KEPT_CUTS - len(self._cuts)
        self._cuts += records[:room]
        self._more_cuts += len(records[room:])
        return cut

    def _save(self, kind: str, part: str, whole: str) -> tuple[str | None, str | None]:
        """Writes a cut part whole to the spill sink; returns how results name it."""
        if self._spill_opener is None:
            return None, None
        try:
            sink = self._spill_sink()
            sink.write(f"\n[kernelexec: all {len(whole):,} characters of {part} ({kind})]\n")
            sink.write(whole)
            sink.write("\n")
        except OSError as exc:
            return None, exc.strerror or str(exc)
        return self._spill_name, None

    def _spill_output(self, output: dict[str, Any], why: str) -> None:
        if self._spill_opener is None:
            return
        with contextlib.suppress(OSError):
            sink = self._spill_sink()
            sink.write(f"\n[kernelexec: an output left out of the result, {why}]\n")
            sink.write(json.dumps(output, ensure_ascii=False, default=str))
            sink.write("\n")

    def _spill_sink(self) -> TextIO:
        if self._spill is None:
            self._start_spill("")
        assert self._spill is not None
        return self._spill

    def _notes(self, cuts: list[Record]) -> list[str]:
        notes = [_describe_drop(c, n, size, self._drop_cap) for c, (n, size) in self._drops.items()]
        notes += [f"{_describe_cut(r)}." for r in cuts[:_NOTED_CUTS]]
        more = len(cuts[_NOTED_CUTS:]) + self._more_cuts
        if more:
            notes.append(f"{more:,} more output parts were cut likewise.")
        if self._left_out:
            where = f"; they are in {self._spill_name}" if self._spill_name else ""
            notes.append(
                f"{self._left_out} outputs past max_result_bytes "
                f"({self._limits.max_result_bytes:,} bytes) were left out{where}."
            )
        return notes

    # -- helpers

    def _stream(self, name: str, text: str) -> None:
        self._apply_pending_clear()
        self._stream_chars += len(text)
        if self._spill is None and self._stream_chars > self._limits.max_text_chars:
            self._start_spill(text)
        elif self._spill is not None:
            self._spill.write(text)
        head_room = self._limits.max_stream_chars // 2 - self._head_chars
        if head_room > 0 and not self._tail:
            kept = text[:head_room]
            _append_stream(self._outputs, name, kept)
            self._head_chars += len(kept)
            text = text[head_room:]
        if text:
            self._keep_tail(name, text)

    def _keep_tail(self, name: str, text: str) -> None:
        budget = self._limits.max_stream_chars // 2
        text = text[-budget:]
        if self._tail and self._tail[-1][0] == name:
            self._tail[-1][1] += text
        else:
            self._tail.append([name, text])
        self._tail_chars += len(text)
        while self._tail_chars > budget:
            excess = self._tail_chars - budget
            first = self._tail[0]
            if len(first[1]) <= excess:
                self._tail.popleft()
                self._tail_chars -= len(first[1])
            else:
                first[1] = first[1][excess:]
                self._tail_chars -= excess

    def _start_spill(self, text: str) -> None:
        if self._spill_opener is None:
            return
        self._spill = self._spill_opener()
        for output in self._outputs:
            if output.get("output_type") == "stream":
                self._spill.write(output["text"])
        for _, chunk in self._tail:
            self._spill.write(chunk)
        self._spill.write(text)

    def _apply_pending_clear(self) -> None:
        if self._clear_pending:
            self._clear_pending = False
            self._clear()

    def _clear(self) -> None:
        self._outputs.clear()
        self._display_ids.clear()
        self._tail.clear()
        self._head_chars = self._tail_chars = self._stream_chars = 0
        self._rich_outputs = self._rich_bytes = 0
        self._sizes.clear()


def stream_cut_marker(cut: int) -> str:
    """What stands in the streams for the ``cut`` characters between their head and tail."""
    return f"\n[... {cut:,} characters cut ...]\n"


def _over(cap: int) -> str:
    return f"the host's cap of {cap:,} bytes a message (Limits.max_message_bytes)"


def _describe_drop(channel: str | None, count: int, size: int, cap: int) -> str:
    what = "A message" if count == 1 else f"{count:,} messages"
    if size:
        what += f" of {size:,} bytes" if count == 1 else f" (the biggest {size:,} bytes)"
    where = f"on its {channel} channel" if channel else "(on a channel it did not say)"
    done = f"{what} from the kernel {where} {'was' if count == 1 else 'were'} over {_over(cap)}"
    done += " and dropped unread"
    if channel == "shell":
        return f"{done}: the reply to this code may be the one lost, so it counts as an error."
    if channel == "stdin":
        return f"{done}: an input request among them was answered with end of file (EOFError)."
    return f"{done}: output sent then may be missing."


def _describe_cut(record: Record) -> str:
    what = f"An output's {record['part']} ({record['bytes']:,} bytes)"
    if record["kept"]:
        done = f"{what} was cut to {record['kept']:,} bytes, head and tail kept"
    else:
        done = f"{what} was left out of the result"
    if record["path"]:
        return f"{done}; all of it is in {record['path']}"
    if record["error"]:
        return f"{done}; it could not be saved ({record['error']})"
    return done


def _unique(records: list[Record]) -> list[Record]:
    # An error's cut is reported twice: with the error and with the reply.
    seen: dict[tuple[Any, ...], Record] = {}
    for record in records:
        seen.setdefault((record["part"], record["bytes"], record["path"]), record)
    return list(seen.values())


def _stream_output(name: str, text: str) -> dict[str, Any]:
    return {"output_type": "stream", "name": name, "text": text}


def _append_stream(outputs: list[dict[str, Any]], name: str, text: str) -> None:
    if not text:
        return
    last = outputs[-1] if outputs else None
    if last is not None and last.get("output_type") == "stream" and last.get("name") == name:
        last["text"] += text
    else:
        outputs.append(_stream_output(name, text))


def _join_stream(outputs: list[dict[str, Any]], name: str) -> str:
    return "".join(
        o["text"] for o in outputs if o.get("output_type") == "stream" and o.get("name") == name
    )
