"""The kernel's byte caps (kernelexec/_kernel/caps.py), without a kernel."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest

from kernelexec import Limits
from kernelexec._kernel.caps import (
    MARKER_ROOM,
    Capper,
    Caps,
    KernelCaps,
    cut_lines,
    cut_text,
    install,
    size_of,
)

Saved = list[tuple[str, str, str]]


def saver(saved: Saved, path: str | None = "outputs/in1-x.txt") -> Any:
    def save(kind: str, part: str, whole: str) -> tuple[str | None, str | None]:
        saved.append((kind, part, whole))
        return path, None

    return save


def test_the_kernel_defaults_are_the_limits_defaults() -> None:
    limits = Limits()
    assert Caps() == Caps(limits.max_output_bytes, limits.max_image_bytes, limits.max_result_bytes)


def test_caps_come_from_the_env_and_bad_values_fall_back() -> None:
    env = Limits(max_output_bytes=5_000, max_result_bytes=9_000).kernel_env()
    assert Caps.from_env(env) == Caps(5_000, Caps().image, 9_000)
    bad = {"KERNELEXEC_MAX_OUTPUT_BYTES": "-1", "KERNELEXEC_MAX_IMAGE_BYTES": "12"}
    assert Caps.from_env(bad) == Caps()


def test_cut_text_keeps_head_and_tail_within_the_budget_and_whole_characters() -> None:
    text = "é" * 10_000 + "middle" + "😀" * 10_000  # 2- and 4-byte characters
    cut = cut_text(text, 2_000, "; all of it is in outputs/in1-result.txt")
    assert size_of(cut) <= 2_000
    assert cut.startswith("é" * 100) and cut.endswith("😀" * 100)
    assert "middle" not in cut
    assert f"kernelexec cut {size_of(text) - 2 * ((2_000 - MARKER_ROOM) // 2):,} bytes" in cut
    assert "all of it is in outputs/in1-result.txt" in cut
    assert cut_text("short", 2_000, "") == "short"


def test_cut_lines_keeps_whole_lines_from_both_ends() -> None:
    lines = [f"frame {i}" for i in range(100_000)]
    cut = cut_lines(lines, 10_000, "; see f")
    assert cut[0] == "frame 0" and cut[-1] == "frame 99999"
    (marker,) = [line for line in cut if "kernelexec cut" in line]
    kept = len(cut) - 1
    assert f"kernelexec cut {100_000 - kept:,} lines; see f" in marker
    assert sum(size_of(line) + 4 for line in cut) <= 10_000


def test_a_huge_last_line_is_cut_in_its_middle_not_dropped() -> None:
    lines = ["Traceback", "  File x", "ValueError: " + "v" * 1_000_000]
    cut = cut_lines(lines, 10_000, "")
    assert cut[:2] == lines[:2]
    assert cut[2].startswith("ValueError: vvv") and "kernelexec cut" in cut[2]
    assert size_of(cut[2]) <= 5_000


def test_a_display_within_the_caps_is_the_same_object() -> None:
    content = {"data": {"text/plain": "42"}, "metadata": {}}
    assert Capper(Caps()).cut("execute_result", content, saver([])).content is content


def test_each_part_of_a_bundle_gets_its_own_cap() -> None:
    saved: Saved = []
    png = base64.b64encode(b"\x89PNG" + b"\0" * 20_000).decode()
    content: dict[str, Any] = {
        "data": {
            "text/plain": "p" * 50_000,
            "text/html": "<b>small</b>",
            "image/png": png,
            "application/json": {"k": "j" * 50_000},
        },
        "metadata": {"big": "m" * 50_000},
        "transient": {"display_id": "d1", "junk": "t" * 50_000},
    }
    cut = Capper(Caps(10_000, 10_000, 100_000)).cut("display_data", content, saver(saved))
    data = cut.content["data"]
    assert set(data) == {"text/plain", "text/html"}
    assert size_of(data["text/plain"]) <= 10_000 and data["text/html"] == "<b>small</b>"
    assert cut.content["transient"] == {"display_id": "d1"}
    records = cut.content["metadata"]["kernelexec"]["cut"]
    assert cut.records == records
    assert {r["part"]: r["kept"] > 0 for r in records} == {
        "text/plain": True,
        "image/png": False,
        "application/json": False,
        "metadata": False,
    }
    wholes = {part: whole for _, part, whole in saved}
    assert wholes["text/plain"] == "p" * 50_000 and wholes["image/png"] == png
    assert '"j' in wholes["application/json"] and '"m' in wholes["metadata"]
    assert content["data"]["text/plain"] == "p" * 50_000, "the original is left alone"


def test_parts_each_within_their_cap_still_fit_the_result_cap() -> None:
    saved: Saved = []
    data = {f"text/x-{i}": str(i) * 9_000 for i in range(10)}
    cut = Capper(Caps(10_000, 10_000, 30_000)).cut("display_data", {"data": data}, saver(saved))
    assert cut.size <= 30_000 and len(cut.content["data"]) == 3
    assert len(saved) == 7


def test_an_error_is_cut_once_for_the_error_and_its_reply() -> None:
    saved: Saved = []
    traceback = [f"\x1b[31mframe {i}\x1b[0m" for i in range(100_000)] + ["E: " + "e" * 90_000]
    error = {"ename": "E", "evalue": "e" * 90_000, "traceback": traceback}
    capper = Capper(Caps(20_000, 20_000, 50_000), errors_twice=True)
    first = capper.cut("error", error, saver(saved, "outputs/in3-error.txt"))
    reply = capper.cut("execute_reply", {"status": "error", **error}, saver(saved))
    assert len(saved) == 1, "the traceback is saved once"
    assert reply.content["traceback"] == first.content["traceback"]
    assert reply.content["status"] == "error"
    (kind, part, whole), content = saved[0], first.content
    assert (kind, part) == ("error", "traceback")
    assert "\x1b" not in whole and whole.count("frame") == 100_000
    assert size_of(content["evalue"]) <= 5_000
    assert sum(size_of(line) + 4 for line in content["traceback"]) <= 20_000
    assert content["traceback"][0] == traceback[0]
    assert content["traceback"][-1].startswith("E: eee"), "the exception's own line is kept"
    assert "outputs/in3-error.txt" in content["evalue"]


def test_a_page_in_a_reply_is_capped_like_a_display() -> None:
    saved: Saved = []
    reply = {"status": "ok", "payload": [{"source": "page", "data": {"text/plain": "d" * 50_000}}]}
    cut = Capper(Caps(10_000, 10_000, 30_000)).cut("execute_reply", reply, saver(saved))
    assert size_of(cut.content["payload"][0]["data"]["text/plain"]) <= 10_000
    assert saved[0][:2] == ("page", "text/plain")


def test_the_kernel_writes_each_cut_to_a_new_name_and_never_through_a_link(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PWD", str(tmp_path))
    (tmp_path / "outputs").mkdir()
    target = tmp_path / "elsewhere.txt"
    (tmp_path / "outputs" / "in7-result.txt").symlink_to(target)
    hook = KernelCaps(Caps(10_000, 10_000, 30_000))
    msg = {
        "header": {"msg_type": "execute_result"},
        "content": {"data": {"text/plain": "r" * 50_000}, "metadata": {}, "execution_count": 7},
        "metadata": {},
    }
    sent = hook.message(msg)
    assert not target.exists(), "the planted link was not followed"
    (record,) = sent["metadata"]["kernelexec"]["cut"]
    assert record["path"] == "outputs/in7-result-2.txt"
    assert (tmp_path / record["path"]).read_text() == "r" * 50_000
    assert hook.message(msg)["metadata"]["kernelexec"]["cut"][0]["path"].endswith("-3.txt")


def test_a_cut_that_cannot_be_saved_says_why_and_still_cuts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PWD", str(tmp_path))
    (tmp_path / "outputs").write_text("not a directory")
    msg = {
        "header": {"msg_type": "display_data"},
        "content": {"data": {"text/plain": "r" * 50_000}, "metadata": {}},
        "metadata": {},
    }
    sent = KernelCaps(Caps(10_000, 10_000, 30_000)).message(msg)
    (record,) = sent["metadata"]["kernelexec"]["cut"]
    assert record["path"] is None and record["error"]
    assert "could not be saved" in sent["content"]["data"]["text/plain"]


def test_a_message_the_caps_cannot_read_is_sent_as_it_was() -> None:
    class Session:
        def __init__(self) -> None:
            self.sent: list[dict[str, Any]] = []

        def serialize(self, msg: dict[str, Any], ident: Any = None) -> list[bytes]:
            self.sent.append(msg)
            return []

    session = Session()
    install(session, Caps())
    broken = {"header": {"msg_type": "display_data"}, "content": {"data": None}, "metadata": {}}
    session.serialize(broken)
    status = {"header": {"msg_type": "status"}, "content": {"execution_state": "idle"}}
    session.serialize(status)
    assert session.sent[0] is broken and session.sent[1] is status
