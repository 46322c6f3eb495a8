"""``kernelexec run`` as a person and a program use it: live output, Ctrl-C, stdin, JSON lines.

Every test runs the real command in a child process on a real kernel, reading
its output through a pipe or a pseudo-terminal as it comes.
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import shutil
import signal
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Callable
from pathlib import Path

import nbformat
import pytest
from _pids import host_pid
from conftest import process_gone
from test_markdown import REAL_MESSAGE, REAL_OUTCOMES

COMMAND = [sys.executable, "-m", "kernelexec", "run"]
ANSI = re.compile(r"\x1b\[[0-9;]*m")

# Acceptance 2 of issue 17: a message that takes ten seconds. The kernel
# stamps its first print with the time it printed it, so the delay measured
# is from that print to the line reaching us, whatever the machine's load
# did to the kernel's start or to the blocks before.
LONG_MESSAGE = """\
```python
print("quick")
```

```python
import os, time
print("first", time.time(), os.getpid())
time.sleep(10)
print("second")
```

```bash
echo third
```
"""
LIVE_WITHIN = 1.0  # seconds, the bound


def run(
    *args: str, stdin: str | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*COMMAND, *args], input=stdin, capture_output=True, text=True, timeout=180, cwd=cwd
    )


class Lines:
    """Lines read from a stream in a thread, each with the time it arrived."""

    def __init__(self, read: Callable[[], bytes]) -> None:
        self.lines: list[tuple[float, str]] = []
        self._read = read
        self._buffer = b""
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._pump, daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        while chunk := self._read():
            arrived = time.time()
            self._buffer += chunk
            *complete, self._buffer = self._buffer.split(b"\n")
            with self._changed:
                self.lines += [(arrived, line.decode().rstrip("\r")) for line in complete]
                self._changed.notify_all()
        with self._changed:
            if self._buffer:
                self.lines.append((time.time(), self._buffer.decode()))
            self._changed.notify_all()

    def wait_for(self, prefix: str, timeout: float = 120) -> tuple[float, str]:
        with self._changed:
            found = self._changed.wait_for(
                lambda: (
                    next((x for x in self.lines if x[1].startswith(prefix)), None)
                    or not self._thread.is_alive()
                ),
                timeout,
            )
            match = next((x for x in self.lines if x[1].startswith(prefix)), None)
        assert found and match, f"no line starting {prefix!r} in {self.text}"
        return match

    def join(self) -> None:
        self._thread.join(30)

    @property
    def text(self) -> str:
        return "\n".join(line for _, line in self.lines)


def spawn_on_pipes(args: list[str]) -> tuple[subprocess.Popen[bytes], Lines, Lines]:
    """Starts ``kernelexec run`` with its stdout and stderr read line by line as they come."""
    proc = subprocess.Popen([*COMMAND, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    out = Lines(proc.stdout.read1)  # type: ignore[attr-defined]
    return proc, out, Lines(proc.stderr.read1)  # type: ignore[attr-defined]


def check_first_print_was_live(lines: Lines) -> int:
    """Asserts that "first" reached us within the bound of the kernel printing it; its pid."""
    arrived, line = lines.wait_for("first ")
    _, printed, pid = line.split()
    assert arrived - float(printed) < LIVE_WITHIN, f"{arrived - float(printed):.2f} s late"
    return int(pid)


def test_output_is_live_through_a_pipe_and_the_run_ends_with_the_summary(tmp_path: Path) -> None:
    (tmp_path / "long.md").write_text(LONG_MESSAGE)
    work = tmp_path / "work"
    proc, out, err = spawn_on_pipes([str(tmp_path / "long.md"), "--work-dir", str(work)])
    try:
        check_first_print_was_live(out)
        assert proc.wait(timeout=120) == 0
    finally:
        proc.kill()
        proc.wait()
    out.join()
    err.join()
    assert [line.split()[0] for _, line in out.lines] == ["quick", "first", "second", "third"]
    headers, summary, where = (
        err.text.splitlines()[:3],
        err.text.splitlines()[3],
        err.text.splitlines()[4:],
    )
    assert headers == [
        '--- [1/3] python, line 1: print("quick")',
        "--- [2/3] python, line 5: import os, time",
        "--- [3/3] bash, line 12: echo third",
    ]
    assert re.fullmatch(r"\[kernelexec\] 3 blocks: 3 ok \(\d+\.\d s\)", summary)
    assert where == [
        f"[kernelexec] work dir:   {work}",
        f"[kernelexec] transcript: {work / 'transcript.ipynb'}",
    ]


def spawn_on_a_terminal(args: list[str]) -> tuple[subprocess.Popen[bytes], int]:
    """Starts ``kernelexec run`` with a pseudo-terminal as its controlling terminal."""
    master, slave = pty.openpty()

    def become_terminal_owner() -> None:
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)  # after setsid: Ctrl-C typed here reaches us

    proc = subprocess.Popen(
        [*COMMAND, *args],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        start_new_session=True,
        preexec_fn=become_terminal_owner,
        env={**os.environ, "TERM": "xterm-256color", "NO_COLOR": ""},
    )
    os.close(slave)
    return proc, master


def read_terminal(master: int) -> Callable[[], bytes]:
    def read() -> bytes:
        while True:
            ready, _, _ = select.select([master], [], [], 1)
            if ready:
                try:
                    return os.read(master, 65536)
                except OSError:  # EIO: the terminal's last writer has gone
                    return b""

    return read


def test_on_a_terminal_output_is_live_coloured_and_ctrl_c_stops_with_the_summary(
    tmp_path: Path,
) -> None:
    (tmp_path / "long.md").write_text(LONG_MESSAGE)
    work = tmp_path / "work"
    proc, master = spawn_on_a_terminal([str(tmp_path / "long.md"), "--work-dir", str(work)])
    screen = Lines(read_terminal(master))
    try:
        kernel = host_pid(check_first_print_was_live(screen), work)
        os.write(master, b"\x03")  # Ctrl-C, typed
        assert proc.wait(timeout=60) == 130
    finally:
        proc.kill()
        proc.wait()
        screen.join()
        os.close(master)
    text = screen.text
    assert "\x1b[1;36m── [1/3] python, line 1: " in text  # a coloured header
    plain = ANSI.sub("", text)
    assert "quick" in plain and "first" in plain and "second" not in plain
    assert "Ctrl-C: interrupting block 2" in plain and "third" not in plain
    assert "3 blocks: 1 ok, 1 interrupted, 1 not run" in plain
    assert f"work dir:   {work}" in plain and "transcript:" in plain
    assert "Traceback" not in plain
    cells = nbformat.read(work / "transcript.ipynb", as_version=4).cells
    assert [c.metadata.kernelexec.status for c in cells] == ["ok", "error"]
    assert "first" in cells[1].outputs[0].text  # what the interrupted block printed is kept
    assert wait_gone(kernel)


def wait_gone(pid: int) -> bool:
    deadline = time.monotonic() + 30
    while not process_gone(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    return process_gone(pid)


def test_sigint_with_json_prints_every_block_and_the_final_line(tmp_path: Path) -> None:
    # --json shows no live output: the block says it is running, in its work
    # dir (all a contained kernel may write).
    started = tmp_path / "work" / "started"
    printed = 'print("first", time.time(), os.getpid())\n'
    message = LONG_MESSAGE.replace(printed, f"{printed}open('started', 'w')\n")
    (tmp_path / "long.md").write_text(message)
    proc = subprocess.Popen(
        [*COMMAND, str(tmp_path / "long.md"), "--json", "--work-dir", str(tmp_path / "work")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not started.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 130, stderr
    *blocks, final = [json.loads(line) for line in stdout.splitlines()]
    work = Path(final["work_dir"])
    try:
        assert [(b["index"], b["status"]) for b in blocks] == [
            (1, "ok"),
            (2, "error"),
            (3, "not_run"),
        ]
        assert blocks[1]["result"]["error"]["ename"] == "KeyboardInterrupt"
        assert blocks[1]["result"]["stdout"].startswith("first ")
        assert blocks[2]["message"] == "not run: interrupted" and blocks[2]["result"] is None
        assert final["summary"].startswith("3 blocks: 1 ok, 1 interrupted, 1 not run")
        assert final["exit_code"] == 130
        assert work.is_dir() and Path(final["transcript"]) == work / "transcript.ipynb"
        assert f"work dir: {work}" in stderr
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_a_second_ctrl_c_stops_a_block_that_ignores_the_first(tmp_path: Path) -> None:
    # The print is inside the try: an interrupt that comes as soon as the pid
    # is seen is still caught (the print may reach us before it returns).
    message = (
        "```python\nimport os, time\n"
        "while True:\n    try:\n        print('pid', os.getpid(), flush=True)\n"
        "        time.sleep(60)\n"
        "    except KeyboardInterrupt:\n        print('ignored', flush=True)\n```\n"
        "```python\nprint('never')\n```\n"
    )
    (tmp_path / "stubborn.md").write_text(message)
    work = tmp_path / "work"
    proc, out, err = spawn_on_pipes([str(tmp_path / "stubborn.md"), "--work-dir", str(work)])
    try:
        kernel = host_pid(int(out.wait_for("pid ")[1].split()[1]), work)
        proc.send_signal(signal.SIGINT)
        out.wait_for("ignored")
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 130
    finally:
        proc.kill()
        proc.wait()
    out.join()
    err.join()
    assert "never" not in out.text
    assert "2 blocks: 1 interrupted, 1 not run" in err.text
    assert f"work dir:   {work}" in err.text and "Traceback" not in err.text
    assert wait_gone(kernel)


def test_the_message_of_acceptance_1_through_the_command(tmp_path: Path) -> None:
    (tmp_path / "message.md").write_text(REAL_MESSAGE)
    work = tmp_path / "work"
    proc = run(str(tmp_path / "message.md"), "--work-dir", str(work))
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout == "cwd work\nhi and bash\n"  # stdout: only what the code printed
    err = proc.stderr.splitlines()
    assert err[:6] == [
        "--- [1/8] python, line 3: import os",
        "--- [2/8] output, line 11: skipped (not code)",
        "--- [3/8] json, line 15: skipped (not code)",
        '--- [4/8] bash, line 21: cat from_python.txt && echo " and bash"',
        "--- [5/8] console, line 25: skipped (not code)",
        "--- [6/8] text, line 30: skipped (not code)",
    ]
    assert err[6] == '--- [7/8] javascript, line 34: console.log("no")'
    assert err[7].startswith("UnsupportedLanguage: cannot run 'javascript' code")
    assert "--- [8/8] python, line 38: not run" in err
    assert re.search(
        r"^\[kernelexec\] 8 blocks: 2 ok, 1 error, 4 skipped, 1 not run", proc.stderr, re.M
    )
    assert f"[kernelexec] work dir:   {work}" in err
    assert not (work / "after_javascript.txt").exists() and "\x1b" not in proc.stderr


def test_json_lines_carry_the_block_and_end_with_the_work_dir(tmp_path: Path) -> None:
    (tmp_path / "message.md").write_text(REAL_MESSAGE)
    proc = run(str(tmp_path / "message.md"), "--json")
    *blocks, final = [json.loads(line) for line in proc.stdout.splitlines()]
    work = Path(final["work_dir"])
    try:
        assert proc.returncode == 1
        assert [(b["index"], b["language"], b["status"]) for b in blocks] == REAL_OUTCOMES
        assert blocks[0]["first_line"] == "import os" and blocks[0]["line"] == 3
        assert blocks[0]["result"]["stdout"] == f"cwd {work.name}\n"
        assert final["summary"].startswith("8 blocks: 2 ok, 1 error, 4 skipped, 1 not run")
        assert work.name.startswith("kernelexec-") and (work / "transcript.ipynb").exists()
        assert f"work dir: {work}" in proc.stderr
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_stdin_is_a_message_when_it_has_fences_and_python_otherwise(tmp_path: Path) -> None:
    message = "Run this:\n```bash\necho from bash\n```\n"
    proc = run("-", "--work-dir", str(tmp_path / "a"), stdin=message)
    assert proc.returncode == 0 and proc.stdout == "from bash\n", proc.stderr
    proc = run("-", "--work-dir", str(tmp_path / "b"), stdin="print(6 * 7)\n")
    assert proc.returncode == 0 and proc.stdout == "42\n", proc.stderr
    proc = run("-", "--lang", "bash", "--work-dir", str(tmp_path / "c"), stdin="echo $((6*7))\n")
    assert proc.returncode == 0 and proc.stdout == "42\n", proc.stderr


# Issue 26: an LLM's message with an unlabelled fence of what the code prints.
# It ran as Python (a SyntaxError), so the bash block after it was "not run".
OUTPUT_FENCE_MESSAGE = """\
I'll total the week's sales. The data, for reference:

```json
{"mon": 12, "tue": 19, "wed": 7}
```

Now the code:

```python
sales = {"mon": 12, "tue": 19, "wed": 7}
for day, n in sales.items():
    print(f"{day}: {n}")
print("total:", sum(sales.values()))
```

Expected output:

```
mon: 12
tue: 19
wed: 7
total: 38

| day | n  |
|-----|----|
| mon | 12 |
```

Finally, check the work dir:

```bash
echo "bash ran in $(basename "$PWD")"
```
"""


def test_an_unlabelled_fence_of_output_is_skipped_and_the_rest_runs(tmp_path: Path) -> None:
    work = tmp_path / "work"
    proc = run("-", "--json", "--work-dir", str(work), stdin=OUTPUT_FENCE_MESSAGE)
    *blocks, final = [json.loads(line) for line in proc.stdout.splitlines()]
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [(b["index"], b["language"], b["line"], b["status"]) for b in blocks] == [
        (1, "json", 3, "skipped"),
        (2, "python", 9, "ok"),
        (3, "", 18, "skipped"),
        (4, "bash", 31, "ok"),
    ]
    assert blocks[0]["message"] == "skipped: not code"
    assert blocks[2]["message"] == (
        "skipped: an unlabelled block after 'Expected output:' reads as program output; "
        "label it ```python or ```bash to run it"
    )
    assert blocks[1]["result"]["stdout"] == "mon: 12\ntue: 19\nwed: 7\ntotal: 38\n"
    assert blocks[3]["result"]["stdout"] == "bash ran in work\n"
    assert final["summary"].startswith("4 blocks: 2 ok, 2 skipped")
    # A person sees why, and --strict runs the fence as python, as before.
    proc = run("-", "--work-dir", str(tmp_path / "seen"), stdin=OUTPUT_FENCE_MESSAGE)
    assert "--- [3/4] unlabelled, line 18: skipped (an unlabelled block after" in proc.stderr
    strict_dir = str(tmp_path / "strict")
    strict = run("-", "--strict", "--work-dir", strict_dir, stdin=OUTPUT_FENCE_MESSAGE)
    assert strict.returncode == 1 and "SyntaxError" in strict.stderr
    assert "4 blocks: 1 ok, 1 error, 1 skipped, 1 not run" in strict.stderr


def test_an_unlabelled_fence_of_shell_commands_runs_as_bash(tmp_path: Path) -> None:
    message = "Make the folder:\n\n```\nmkdir -p data && echo made\n```\n"
    proc = run("-", "--work-dir", str(tmp_path / "w"), stdin=message)
    assert proc.returncode == 0 and proc.stdout == "made\n", proc.stderr
    assert "--- [1/1] bash, line 3: mkdir -p data && echo made" in proc.stderr
    assert (tmp_path / "w" / "data").is_dir()


def test_a_notebook_runs_its_code_cells(tmp_path: Path) -> None:
    notebook = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_markdown_cell("# notes are not run"),
            nbformat.v4.new_code_cell("x = 20"),
            nbformat.v4.new_code_cell("print(x + 22)"),
        ]
    )
    nbformat.write(notebook, tmp_path / "nb.ipynb")
    proc = run(str(tmp_path / "nb.ipynb"), "--work-dir", str(tmp_path / "w"))
    assert proc.returncode == 0 and proc.stdout == "42\n", proc.stderr
    assert "--- [2/2] python: print(x + 22)" in proc.stderr


def test_a_notebook_in_another_language_fails_at_its_first_cell(tmp_path: Path) -> None:
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print(1)")])
    notebook.metadata["kernelspec"] = {"name": "ir", "language": "R", "display_name": "R"}
    nbformat.write(notebook, tmp_path / "r.ipynb")
    proc = run(str(tmp_path / "r.ipynb"), "--work-dir", str(tmp_path / "w"))
    assert proc.returncode == 1 and "cannot run 'r' code" in proc.stderr


def test_a_message_without_code_says_so(tmp_path: Path) -> None:
    (tmp_path / "prose.md").write_text("# Notes\n\nNo code here, only `inline`.\n")
    (tmp_path / "data.md").write_text("```json\n{}\n```\n```text\nhi\n```\n")
    proc = run(str(tmp_path / "prose.md"))
    assert proc.returncode == 1 and proc.stdout == ""
    assert "nothing to run in" in proc.stderr and "no fenced code blocks" in proc.stderr
    proc = run(str(tmp_path / "data.md"))
    assert proc.returncode == 1
    assert "its 2 fenced blocks are not code (json, text)" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_kernel_options_reach_the_session(tmp_path: Path) -> None:
    proc = run(
        "-",
        "--python", sys.executable,
        "--kernel-name", "python3",
        "--preload", "import math as M",
        "--work-dir", str(tmp_path / "w"),
        stdin=f"import sys\nprint(round(M.pi, 2), sys.executable == {sys.executable!r})\n",
    )  # fmt: skip
    assert proc.returncode == 0 and proc.stdout == "3.14 True\n", proc.stderr


def test_bad_options_are_one_line_and_exit_2(tmp_path: Path) -> None:
    (tmp_path / "m.md").write_text("```python\nprint(1)\n```\n")
    proc = run(str(tmp_path / "m.md"), "--kernel-name", "no-such-kernel")
    assert proc.returncode == 2 and "no kernelspec named 'no-such-kernel'" in proc.stderr
    assert "Traceback" not in proc.stderr and "work dir" in proc.stderr
    proc = run(str(tmp_path / "m.md"), "--lang", "ruby")
    assert proc.returncode == 2 and "use markdown, python or bash" in proc.stderr


def test_a_reader_that_goes_away_does_not_stop_the_run(tmp_path: Path) -> None:
    message = (
        "```python\nfor i in range(100_000):\n    print(i)\n```\n```python\nopen('done', 'w')\n```"
    )
    (tmp_path / "m.md").write_text(message)
    shell = f"{' '.join(COMMAND)} {tmp_path / 'm.md'} --work-dir {tmp_path / 'w'} | head -1"
    proc = subprocess.run(
        ["bash", "-c", shell + "; echo ${PIPESTATUS[0]}"],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.stdout.splitlines() == ["0", "0"], proc.stderr
    assert (tmp_path / "w" / "done").exists() and "Traceback" not in proc.stderr


@pytest.mark.parametrize("suffix", [".py", ".sh"])
def test_scripts_run_as_one_block(tmp_path: Path, suffix: str) -> None:
    script = tmp_path / f"job{suffix}"
    script.write_text("print(6 * 7)\n" if suffix == ".py" else "echo $((6 * 7))\n")
    proc = run(str(script), "--work-dir", str(tmp_path / "w"))
    assert proc.returncode == 0 and proc.stdout == "42\n", proc.stderr
