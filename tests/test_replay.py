"""Replaying a transcript restores state and reports every difference."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from kernelexec import AsyncSession, ConfigurationError, Session


async def record(work_dir: Path) -> Path:
    async with AsyncSession(work_dir) as s:
        await s.execute("data = [3, 1, 2]\nprint('loaded', len(data))")
        await s.execute("import matplotlib.pyplot as plt\nplt.plot(data); plt.show()")
        await s.execute("print('about to fail'); 1/0")
        await s.execute("total = sum(data)\nprint(total)")
        return s.notebook_path


async def test_replay_restores_state_and_reports_no_differences(tmp_path: Path) -> None:
    transcript = await record(tmp_path / "recorded")
    session = await AsyncSession.from_transcript(transcript, tmp_path / "replayed")
    try:
        report = session.replay_report
        assert report is not None and report.ok, report.text
        assert [c.action for c in report.cells] == ["ran", "ran", "skipped", "ran"]
        assert (await session.execute("print(total, data)")).stdout == "6 [3, 1, 2]\n"
        assert (session.work_dir / "outputs").is_dir()  # the plot was drawn again
    finally:
        await session.close()


async def test_an_edited_expectation_is_reported_with_a_diff(tmp_path: Path) -> None:
    transcript = await record(tmp_path / "recorded")
    nb = nbformat.read(transcript, as_version=4)
    last = [c for c in nb.cells if c.cell_type == "code"][-1]
    last.outputs[0]["text"] = "7\n"
    nbformat.write(nb, transcript)
    session = await AsyncSession.from_transcript(transcript, tmp_path / "replayed")
    await session.close()
    report = session.replay_report
    assert report is not None and not report.ok
    [cell] = report.differences
    assert cell.index == 4 and "-7" in cell.diff and "+6" in cell.diff
    assert "cell 4 differs" in report.text


def test_an_ordinary_notebook_replays_with_magics_and_until(tmp_path: Path) -> None:
    nb = new_notebook(
        cells=[
            new_markdown_cell("# notes are ignored"),
            new_code_cell(
                "%env GREETING=hello",
                outputs=[
                    nbformat.v4.new_output("stream", name="stdout", text="env: GREETING=hello\n")
                ],
            ),
            new_code_cell("import os\nword = os.environ['GREETING']"),
            new_code_cell("raise SystemExit('not reached')"),
        ]
    )
    path = tmp_path / "plain.ipynb"
    nbformat.write(nb, path)
    session = Session.from_transcript(path, tmp_path / "w", until=2)
    try:
        assert session.replay_report is not None and session.replay_report.ok
        assert len(session.replay_report.cells) == 2
        assert session.execute("word").text == "'hello'\n"
    finally:
        session.close()


async def test_a_bad_notebook_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.ipynb"
    bad.write_text("{ not a notebook")
    with pytest.raises(ConfigurationError, match="cannot read"):
        await AsyncSession.from_transcript(bad)


def test_the_command_exits_1_on_differences_and_speaks_json(tmp_path: Path) -> None:
    nb = new_notebook(
        cells=[
            new_code_cell(
                "print('now')",
                outputs=[nbformat.v4.new_output("stream", name="stdout", text="then\n")],
            )
        ]
    )
    path = tmp_path / "n.ipynb"
    nbformat.write(nb, path)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "kernelexec",
            "replay",
            str(path),
            "--json",
            "--work-dir",
            str(tmp_path / "w"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stderr
    report = json.loads(proc.stdout)
    assert report["cells"][0]["differs"] and "+now" in report["cells"][0]["diff"]
    missing = subprocess.run(
        [sys.executable, "-m", "kernelexec", "replay", str(tmp_path / "none.ipynb")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert missing.returncode == 2 and "cannot read" in missing.stderr
    assert "Traceback" not in missing.stderr
