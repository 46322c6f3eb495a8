"""How an unlabelled fence is read: code to run (python or shell), or output and text to skip.

Pure logic: the phrases and blocks are the ones LLMs write around a bare fence.
The whole path, a message through ``kernelexec run -`` on a real kernel, is in
tests/test_run_cli.py.
"""

from __future__ import annotations

import pytest

from kernelexec._markdown._blocks import extract_code_blocks
from kernelexec._markdown._unlabelled import read_unlabelled


@pytest.mark.parametrize(
    "intro",
    [
        "Output:",
        "**Expected output:**",
        "Expected output (truncated):",
        "- Result:",
        "Results:",
        "stdout:",
        "Sample output:",
        "The output should look like this:",
        "Output of `ls`:",
        "Here's the output from the script:",
        "The script prints the totals. Expected output:",
        "This prints:",
        "This outputs:",
        "When run, it prints the following:",
        "It returns something like this:",
        "Which gives:",
        "You should see:",
        "You'll see something like:",
        "Running it, you get:",
    ],
)
def test_a_fence_after_a_line_introducing_output_is_skipped(intro: str) -> None:
    reading = read_unlabelled("print(1)", intro)
    assert reading.language is None
    assert "reads as program output" in reading.reason and intro.strip() in reading.reason


@pytest.mark.parametrize(
    "intro",
    [
        "",
        "Install it:",
        "Run this:",
        "Then run:",
        "Example:",
        "Here's the result:",  # as often the fixed code
        "I've fixed it. Here's the updated code:",
        "Here's a function that returns the result:",
        "Here's a script that prints the numbers:",
        "Here's the code that writes the output:",
        "Format the output:",
        "Let's print it:",
        "The results of the analysis are computed by this code:",
        "Output",  # no colon: a heading, not an introduction
    ],
)
def test_code_after_other_prose_runs(intro: str) -> None:
    assert read_unlabelled("x = 1\nprint(x)", intro).language == "python"


@pytest.mark.parametrize(
    "code",
    [
        "pip install pandas",
        "ls -la",
        "ls",
        "cd project && python main.py",
        "python -m pip install -e '.[test]'",
        "export DATA=/tmp/data\n./run.sh --fast",
        "N=3\necho $N",
        "FOO=1 python job.py",
        "git clone https://example.com/repo.git \\\n  --depth 1",
        'for f in *.csv; do\n  wc -l "$f"\ndone',
        "# set up\nmkdir -p out\ntouch out/a.txt",
    ],
)
def test_shell_commands_run_as_bash(code: str) -> None:
    assert read_unlabelled(code, "").language == "bash"


@pytest.mark.parametrize(
    "code",
    [
        "x = 1\nprint(x)",
        "df",  # a DataFrame shown, not `df` the command
        "import pandas as pd\ndf = pd.read_csv('a.csv')\ndf.head()",
        "source = open('a.txt').read()",  # a shell word used as a Python name
        "cat(x)",
        "ls = [1, 2]\nls.append(3)",
        "%pip install rich\nimport rich",
        "!ls\nprint('done')",
        "%%bash\necho hi",
        "await asyncio.sleep(0)",
        "",
    ],
)
def test_python_runs_as_python(code: str) -> None:
    assert read_unlabelled(code, "").language == "python"


@pytest.mark.parametrize(
    ("code", "why"),
    [
        ("total: 77\nmean: 15.4", "bare values"),
        ("42", "bare values"),
        ("[1, 2, 3]", "bare values"),
        ("{'a': 1, 'b': [2, 3]}", "bare values"),
        ("Hello, world!", "neither Python nor shell"),
        ("| city | temp |\n|------|------|\n| Oslo | 4.5  |", "neither Python nor shell"),
        ("$ pip install rich\nSuccessfully installed rich", "neither Python nor shell"),
        ("Traceback (most recent call last):\n  File ...", "neither Python nor shell"),
    ],
)
def test_output_and_text_are_skipped_whatever_comes_before(code: str, why: str) -> None:
    reading = read_unlabelled(code, "")
    assert reading.language is None and why in reading.reason
    assert "label it ```python" in reading.reason


def test_labels_win_and_strict_reads_every_unlabelled_block_as_python() -> None:
    message = "Expected output:\n\n```python\nprint(1)\n```\n\nOutput:\n```\nHello, world!\n```\n"
    labelled, bare = extract_code_blocks(message)
    assert labelled.runs_as == "python" and labelled.reading is None
    assert bare.runs_as is None and not bare.is_code and "'Output:'" in bare.skip_reason
    strict = extract_code_blocks(message, strict=True)[1]
    assert strict.reading is None and strict.runs_as == "python" and strict.is_code


def test_the_introduction_is_the_last_prose_line_since_the_block_before() -> None:
    message = (
        "Expected output:\n```text\n3\n```\n```\nprint(3)\n```\n"  # right after a block: code
        "Output:\n\n\n```\nprint(4)\n```\n"  # blank lines between: still introduced
    )
    blocks = extract_code_blocks(message)
    assert [b.runs_as for b in blocks] == [None, "python", None]
