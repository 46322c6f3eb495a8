"""Reading an LLM's message as its reader does: which blocks, which language, what runs."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest

from kernelexec import AsyncSession, BlockResult, ExecutionResult, Session
from kernelexec._execution._languages import normalize_language
from kernelexec._markdown._blocks import CodeBlock, extract_code_blocks, run_blocks, summarize

# As an assistant writes them: prose, a numbered list with indented blocks,
# expected output, a payload, a terminal session, a shell block.
ASSISTANT_MESSAGE = """\
Sure! Let's load the sales data and look at it.

1. Load and summarize:

   ```python title="load.py"
   import statistics

   sales = {"mon": 12, "tue": 19}
   for day, n in sales.items():
       print(day, n)
   ```

2. You should see:

   ```text
   mon 12
   tue 19
   ```

The API would return:

```json
{"total": 31}
```

Then check the folder:

~~~bash
ls outputs
~~~

For reference, in a terminal:

```console
$ ls
outputs
```
"""


def languages(text: str) -> list[str]:
    return [block.language for block in extract_code_blocks(text)]


def test_an_assistant_message_reads_as_its_reader_sees_it() -> None:
    blocks = extract_code_blocks(ASSISTANT_MESSAGE)
    assert [(b.index, b.language, b.line) for b in blocks] == [
        (1, "python", 5),
        (2, "text", 15),
        (3, "json", 22),
        (4, "bash", 28),
        (5, "console", 34),
    ]
    # The list item's indentation is gone; the code's own indentation stays.
    assert blocks[0].code == (
        'import statistics\n\nsales = {"mon": 12, "tue": 19}\n'
        "for day, n in sales.items():\n    print(day, n)"
    )
    assert [b.is_code for b in blocks] == [True, False, False, True, False]
    assert [b.runs_as for b in blocks] == ["python", None, None, "bash", None]
    assert blocks[0].first_line == "import statistics"


def test_fences_in_bullets_nested_lists_and_on_the_marker_line() -> None:
    message = (
        "- Install:\n"
        "  ```bash\n"
        "  echo a\n"
        "  ```\n"
        "  - then, nested:\n"
        "    ```python\n"
        "    if True:\n"
        "        print('b')\n"
        "    ```\n"
        "1. ```sh\n"
        "   echo c\n"
        "   ```\n"
    )
    blocks = extract_code_blocks(message)
    assert [(b.language, b.code) for b in blocks] == [
        ("bash", "echo a"),
        ("python", "if True:\n    print('b')"),
        ("sh", "echo c"),
    ]


def test_a_block_opened_in_a_list_item_may_close_at_the_margin() -> None:
    # LLMs often close a list item's block at column 0.
    message = "1. Run:\n   ```python\n   x = 1\n   print(x)\n```\nDone.\n```text\nok\n```"
    blocks = extract_code_blocks(message)
    assert [(b.language, b.code) for b in blocks] == [("python", "x = 1\nprint(x)"), ("text", "ok")]


def test_less_indented_body_lines_and_tabs_lose_only_what_they_have() -> None:
    message = "   ```python\n   a = 1\n b = 2\n\tc = 3\n   ```"
    (block,) = extract_code_blocks(message)
    assert block.code == "a = 1\nb = 2\n c = 3"


@pytest.mark.parametrize(
    ("info", "language"),
    [
        ('python title="x.py"', "python"),
        ("python {.class}", "python"),
        ("python{.class}", "python"),
        ("{python}", "python"),
        ("{.python .numberLines}", "python"),
        ("{r, echo=FALSE}", "r"),
        ("py:setup.py", "py"),
        ("Python3", "python3"),
        ("  bash  ", "bash"),
        ('title="x.py"', ""),
        ("", ""),
        ("c++", "c++"),
    ],
)
def test_the_language_is_the_first_word_of_the_info_string(info: str, language: str) -> None:
    assert languages(f"```{info}\ncode\n```") == [language]


def test_unlabelled_blocks_are_python() -> None:
    (block,) = extract_code_blocks("```\nprint(1)\n```")
    assert block.language == "" and block.runs_as == "python" and block.shown_language == "python"


def test_tilde_fences_and_longer_fences_hold_shorter_ones() -> None:
    message = "````markdown\n```python\nx = 1\n```\n````\n~~~~py\n~~~\nstill code\n~~~~\n"
    blocks = extract_code_blocks(message)
    assert [(b.language, b.code) for b in blocks] == [
        ("markdown", "```python\nx = 1\n```"),
        ("py", "~~~\nstill code"),
    ]


def test_inline_code_on_its_own_line_is_not_a_fence() -> None:
    message = "Use ```print()```:\n```python print(1)```\n```py\nreal = 1\n```"
    assert [(b.language, b.code) for b in extract_code_blocks(message)] == [("py", "real = 1")]


def test_an_unclosed_block_runs_to_the_end_and_crlf_is_read() -> None:
    message = "Text\r\n```python\r\nx = 1\r\ny = 2\r\n"
    (block,) = extract_code_blocks(message)
    assert block.code == "x = 1\ny = 2" and block.line == 2


def test_a_message_without_fences_has_no_blocks() -> None:
    assert extract_code_blocks("Just prose, and `inline` code.\n    indented = 1\n") == []


def test_first_line_skips_blank_lines_and_is_cut() -> None:
    block = CodeBlock(index=1, language="python", code="\n\n   x = '" + "a" * 200 + "'\n")
    assert block.first_line.startswith("x = 'aaa") and block.first_line.endswith("...")
    assert len(block.first_line) == 80


@pytest.mark.parametrize(
    "language",
    ["text", "output", "console", "json", "yaml", "yml", "toml", "csv", "markdown", "md",
     "diff", "log", "html", "xml", "plaintext", "txt", "ini", "pycon", "shell-session"],
)  # fmt: skip
def test_blocks_that_are_not_code_are_skipped(language: str) -> None:
    block = CodeBlock(index=1, language=language, code="x")
    assert not block.is_code and block.runs_as is None


@pytest.mark.parametrize("language", ["javascript", "js", "rust", "go", "ruby", "sql", "zsh", "r"])
def test_programming_languages_kernelexec_cannot_run_are_code(language: str) -> None:
    block = CodeBlock(index=1, language=language, code="x")
    assert block.is_code and block.runs_as is None


def test_language_aliases() -> None:
    assert {normalize_language(x) for x in ("python", "py", "Python3", "ipython", "", None)} == {
        "python"
    }
    assert {normalize_language(x) for x in ("sh", "bash", "shell")} == {"bash"}
    assert normalize_language("ruby") is None


async def run(
    message: str, failing: frozenset[int] = frozenset()
) -> tuple[list[BlockResult], list[CodeBlock]]:
    """Runs a message through ``run_blocks`` with an executor that records what it was given."""
    seen: list[CodeBlock] = []

    async def execute(block: CodeBlock) -> ExecutionResult:
        seen.append(block)
        failed = block.index in failing or block.runs_as is None
        return ExecutionResult(status="error" if failed else "ok", text=f"ran {block.index}\n")

    return [r async for r in run_blocks(extract_code_blocks(message), execute)], seen


async def test_run_blocks_skips_non_code_and_stops_at_a_language_it_cannot_run() -> None:
    message = ASSISTANT_MESSAGE + "```javascript\nconsole.log(1)\n```\n```python\nx = 2\n```\n"
    results, seen = await run(message)
    assert [b.index for b in seen] == [1, 4, 6]  # text, json and console never executed
    assert [(r.index, r.language, r.status) for r in results] == [
        (1, "python", "ok"),
        (2, "text", "skipped"),
        (3, "json", "skipped"),
        (4, "bash", "ok"),
        (5, "console", "skipped"),
        (6, "javascript", "error"),
        (7, "python", "not_run"),
    ]
    assert results[5].result is not None and "python and bash" in (results[5].message or "")
    assert results[6].result is None and results[6].message == "not run: block 6 failed"
    assert [r.ok for r in results] == [True, True, True, True, True, False, False]
    assert results[1].text == "[kernelexec] block 2 (text): skipped: not code\n"


async def test_run_blocks_stops_after_the_first_failure_and_skips_after_it_too() -> None:
    results, seen = await run(
        "```py\na\n```\n```py\nb\n```\n```json\n{}\n```\n```py\nc\n```", frozenset({2})
    )
    assert [b.index for b in seen] == [1, 2]
    assert [r.status for r in results] == ["ok", "error", "not_run", "not_run"]


async def test_a_block_result_serializes_with_its_block() -> None:
    results, _ = await run("intro\n\n```python\nprint('hi')\n```\n")
    wire = json.loads(json.dumps(results[0].to_dict()))
    assert {k: wire[k] for k in ("index", "language", "line", "first_line", "status")} == {
        "index": 1,
        "language": "python",
        "line": 3,
        "first_line": "print('hi')",
        "status": "ok",
    }
    assert ExecutionResult.from_dict(wire["result"]).text == "ran 1\n"


def test_summary_counts_every_block_in_a_fixed_order() -> None:
    assert summarize(["ok", "error", "ok", "not_run"]) == "4 blocks: 2 ok, 1 error, 1 not run"
    assert summarize(["skipped", "ok", "interrupted", "not_run"]) == (
        "4 blocks: 1 ok, 1 interrupted, 1 skipped, 1 not run"
    )
    assert summarize(["ok"]) == "1 block: 1 ok"
    assert summarize([]) == "0 blocks"


# Acceptance 1 of issue 17, on a real kernel: text, json, output and console
# blocks among python and bash ones; a javascript block; a block after it.
REAL_MESSAGE = """\
Here is the plan.

```python
import os
open("from_python.txt", "w").write("hi")
print("cwd", os.path.basename(os.getcwd()))
```

Expected:

```output
cwd work
```

```json
{"not": "run"}
```

1. Check it from the shell:

   ```bash
   cat from_python.txt && echo " and bash"
   ```

```console
$ cat from_python.txt
hi
```

```text
print("this text block must not run")
```

```javascript
console.log("no")
```

```python
open("after_javascript.txt", "w").write("must not run")
```
"""


# What becomes of each block of REAL_MESSAGE: (index, language, status).
REAL_OUTCOMES = [
    (1, "python", "ok"),
    (2, "output", "skipped"),
    (3, "json", "skipped"),
    (4, "bash", "ok"),
    (5, "console", "skipped"),
    (6, "text", "skipped"),
    (7, "javascript", "error"),
    (8, "python", "not_run"),
]


def check_real_message(results: list[BlockResult], work: Path) -> None:
    assert [(r.index, r.language, r.status) for r in results] == REAL_OUTCOMES
    first, bash, javascript = results[0].result, results[3].result, results[6].result
    assert first is not None and first.stdout == "cwd work\n"
    assert bash is not None and bash.stdout == "hi and bash\n" and bash.language == "bash"
    assert javascript is not None and javascript.error is not None
    assert javascript.error.ename == "UnsupportedLanguage"
    assert [r.first_line for r in results[:2]] == ["import os", "cwd work"]
    assert [r.line for r in results] == [3, 11, 15, 21, 25, 30, 34, 38]
    assert (work / "from_python.txt").exists() and not (work / "after_javascript.txt").exists()
    # The transcript holds what ran, and the refused block where it came.
    cells = nbformat.read(work / "transcript.ipynb", as_version=4).cells
    assert [c.cell_type for c in cells] == ["code", "code", "raw"]
    assert "console.log" in cells[2].source


async def test_a_real_message_runs_its_code_and_skips_the_rest(session: AsyncSession) -> None:
    results = await session.run_markdown(REAL_MESSAGE)
    check_real_message(results, session.work_dir)


def test_a_real_message_runs_likewise_in_a_sync_session(tmp_path: Path) -> None:
    seen: list[str] = []
    with Session(tmp_path / "work", timeout=30) as session:
        results = session.run_markdown(REAL_MESSAGE, on_output=lambda o: seen.append(o.text))
    check_real_message(results, tmp_path / "work")
    assert "".join(seen) == "cwd work\nhi and bash\n"
