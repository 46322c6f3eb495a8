"""The framework-free helpers the AutoGen and AG2 executors share."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kernelexec import ExecutionResult
from kernelexec.integrations import Approval
from kernelexec.integrations._approval import read_verdict, refusal_text
from kernelexec.integrations._blocks import combine, prepare, quiet_pip


@pytest.mark.parametrize(
    ("code", "language", "quiet"),
    [
        ("!pip install numpy", "python", "!pip install -qqq numpy"),
        (
            "x = 1\n%pip install a b\n! pip install c",
            "python",
            "x = 1\n%pip install -qqq a b\n! pip install -qqq c",
        ),
        ("!pip install -qqq numpy", "python", "!pip install -qqq numpy"),
        ("pip install numpy", "python", "pip install numpy"),  # Python, not a command
        (
            "pip install numpy\npython -m pip install x",
            "sh",
            "pip install -qqq numpy\npython -m pip install -qqq x",
        ),
        ("pip install numpy", "javascript", "pip install numpy"),
        ("echo pip install numpy", "bash", "echo pip install numpy"),
    ],
)
def test_quiet_pip(code: str, language: str, quiet: str) -> None:
    assert quiet_pip(code, language) == quiet


def test_combine_names_saved_files_once_by_absolute_path(tmp_path: Path) -> None:
    text = (
        "[image/png saved to outputs/0001-1.png]\n[image/jpeg saved to outputs/0001-1.jpg]\n"
        "[image/png saved to elsewhere.png]\n[text/html saved to outputs/0001-2.html]\n"
    )
    files = ["outputs/0001-1.png", "outputs/0001-1.jpg", "outputs/0001-2.html"]
    combined = combine([ExecutionResult(status="ok", text=text, files=files)], tmp_path)
    assert combined.output.splitlines() == [
        f"Image data saved to {tmp_path}/outputs/0001-1.png",
        "[image/png saved to elsewhere.png]",  # printed by the code, not a file of ours
        f"HTML data saved to {tmp_path}/outputs/0001-2.html",
    ]
    assert combined.output_files == [tmp_path / files[0], tmp_path / files[2]]


def test_combine_joins_outputs_and_blocks_as_the_frameworks_do(tmp_path: Path) -> None:
    def stream(name: str, text: str) -> dict[str, Any]:
        return {"output_type": "stream", "name": name, "text": text}

    first = ExecutionResult(status="ok", text="a\nb\n", outputs=[stream("stdout", "a\nb\n")])
    shown: dict[str, Any] = {"output_type": "execute_result", "data": {"text/plain": "42"}}
    outputs = [stream("stdout", "x"), stream("stdout", "y\n"), stream("stderr", "e"), shown]
    second = ExecutionResult(status="ok", text="xy\ne\n42\n", outputs=outputs)
    # A stream carried on in a second output is one output; each output's own text.
    assert combine([first, second], tmp_path).output == "a\nb\n\nxy\n\ne\n42"
    # A text that rendering the outputs does not give back (a cut, a note) is kept as it is.
    noted = ExecutionResult(status="ok", text="a\n[kernelexec] note\n", outputs=first.outputs)
    assert combine([noted], tmp_path).output == noted.text


@pytest.mark.parametrize(
    ("code", "language", "prepared"),
    [
        (
            '!echo "hi"\n! false || echo negation kept',
            "bash",
            'echo "hi"\n! false || echo negation kept',
        ),
        ("  !ls -l\n!./run.sh", "sh", "  ls -l\n./run.sh"),
        ("!pip install rich", "bash", "pip install -qqq rich"),
        ("!echo hi", "python", "!echo hi"),  # IPython runs it as it is
    ],
)
def test_prepare_runs_bang_lines_of_shell_blocks_as_commands(
    code: str, language: str, prepared: str
) -> None:
    assert prepare(code, language) == prepared


def test_combine_exit_codes(tmp_path: Path) -> None:
    ok, timeout = ExecutionResult(status="ok"), ExecutionResult(status="timeout")
    assert combine([ok], tmp_path).exit_code == 0
    assert combine([ok, timeout], tmp_path).exit_code == 124
    timed_out = ExecutionResult(status="timeout", text="[kernelexec] Timed out after 1 s.\n")
    assert combine([timed_out], tmp_path).output == "[kernelexec] Timed out after 1 s.\nTimeout"
    assert combine([ExecutionResult(status="timeout")], tmp_path).output == "Timeout"
    assert combine([ExecutionResult(status="kernel_died")], tmp_path).exit_code == 1


def test_verdicts() -> None:
    assert read_verdict(True) == Approval(True)
    assert read_verdict(Approval(False, "no")) == Approval(False, "no")
    assert "refused by the approval function: no." in refusal_text(Approval(False, "no"))
    with pytest.raises(TypeError, match="must return a bool"):
        read_verdict("yes")


def test_the_core_package_imports_no_framework() -> None:
    check = (
        "import sys, kernelexec, kernelexec._cli, kernelexec.integrations\n"
        "kernelexec._cli._parser()\n"
        "frameworks = {'autogen', 'autogen_core', 'autogen_ext', 'autogen_agentchat', 'mcp'}\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in frameworks))"
    )
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
