"""``kernelexec run`` as a user runs it: a real process."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import nbformat

SAMPLE = """# Analysis
```python
import matplotlib.pyplot as plt
xs = list(range(5))
plt.plot(xs, [x * x for x in xs]); plt.show()
print("sum", sum(xs))
```
```bash
ls outputs
```
"""


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kernelexec", *args], capture_output=True, text=True, timeout=120
    )


def test_run_markdown_leaves_images_and_transcript(tmp_path: Path) -> None:
    (tmp_path / "sample.md").write_text(SAMPLE)
    work = tmp_path / "D"
    proc = run("run", str(tmp_path / "sample.md"), "--work-dir", str(work))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "sum 10\n0001-1.png\n"  # what the code printed, no more
    assert "saved outputs/0001-1.png" in proc.stderr
    assert (work / "outputs" / "0001-1.png").exists()
    nbformat.validate(nbformat.read(work / "transcript.ipynb", as_version=4))


def test_failing_block_exits_1_and_json_lines(tmp_path: Path) -> None:
    (tmp_path / "bad.md").write_text("```python\nprint('ok')\n```\n```python\n1/0\n```\n")
    proc = run("run", str(tmp_path / "bad.md"), "--work-dir", str(tmp_path / "D"), "--json")
    assert proc.returncode == 1
    *lines, final = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [(r["index"], r["status"]) for r in lines] == [(1, "ok"), (2, "error")]
    assert lines[1]["result"]["error"]["ename"] == "ZeroDivisionError"
    assert final["work_dir"] == str(tmp_path / "D") and final["exit_code"] == 1


def test_python_file_runs_as_one_block(tmp_path: Path) -> None:
    (tmp_path / "job.py").write_text("total = sum(range(4))\nprint(total)\n")
    proc = run("run", str(tmp_path / "job.py"), "--work-dir", str(tmp_path / "D"))
    assert proc.returncode == 0 and proc.stdout == "6\n"


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    proc = run("run", str(tmp_path / "nope.md"))
    assert proc.returncode == 2 and "cannot read" in proc.stderr and "Traceback" not in proc.stderr


def test_version_and_bare_command_print_help_not_an_error() -> None:
    import kernelexec

    proc = run("--version")
    assert proc.returncode == 0 and proc.stdout == f"kernelexec {kernelexec.__version__}\n"
    proc = run()
    assert proc.returncode == 0 and proc.stdout.startswith("usage: kernelexec")
    assert "run" in proc.stdout and "example:" in proc.stdout and proc.stderr == ""


def test_every_command_help_carries_an_example() -> None:
    from kernelexec._cli import _parser

    def commands(parser: argparse.ArgumentParser, prefix: list[str]) -> list[list[str]]:
        found = [prefix]
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    found += commands(sub, [*prefix, name])
        return found

    every = commands(_parser(), [])
    assert len(every) >= 10  # the top level, 8 commands, image build
    for command in every:
        proc = run(*command, "--help")
        assert proc.returncode == 0, proc.stderr
        example = proc.stdout.split("\nexample:\n", 1)
        assert len(example) == 2, f"kernelexec {' '.join(command)} --help has no example"
        assert "  kernelexec " in example[1], command


def test_a_mistyped_option_or_command_names_the_nearest_one() -> None:
    proc = run("serve", "--prot", "9000")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("usage: kernelexec serve ")  # the command's usage, not the top's
    assert proc.stderr.endswith(
        "kernelexec serve: error: unrecognized arguments: --prot 9000; did you mean --port?\n"
    )
    proc = run("serv")
    assert proc.returncode == 2
    assert "invalid choice: 'serv'; did you mean serve?" in proc.stderr
    proc = run("image", "biuld")
    assert proc.returncode == 2 and "did you mean build?" in proc.stderr
    proc = run("run", "x.md", "--jsn=1")
    assert proc.returncode == 2 and "did you mean --json?" in proc.stderr
    proc = run("serve", "--zzzz")  # nothing near: the plain message
    assert proc.returncode == 2 and "unrecognized arguments: --zzzz\n" in proc.stderr
