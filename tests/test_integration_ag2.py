"""kernelexec.integrations.ag2 against real kernels and a real ConversableAgent."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from autogen import ConversableAgent
from autogen.coding.base import CodeBlock, CodeExecutor, IPythonCodeResult
from autogen.coding.markdown_code_extractor import MarkdownCodeExtractor

from kernelexec.integrations import Approval
from kernelexec.integrations.ag2 import KernelexecCodeExecutor


@pytest.fixture
def executor(tmp_path: Path) -> Iterator[KernelexecCodeExecutor]:
    # A directory that exists: AG2's executors refuse a missing one, and so does ours.
    with KernelexecCodeExecutor(timeout=30, output_dir=tmp_path) as ex:
        yield ex


def run(executor: KernelexecCodeExecutor, code: str, language: str = "python") -> IPythonCodeResult:
    return executor.execute_code_blocks([CodeBlock(code=code, language=language)])


def agent_with(executor: KernelexecCodeExecutor) -> ConversableAgent:
    return ConversableAgent(
        "runner",
        llm_config=False,
        human_input_mode="NEVER",
        code_execution_config={"executor": executor},
    )


def reply(agent: ConversableAgent, content: str) -> str:
    answer = agent.generate_reply(messages=[{"role": "user", "content": content}])
    assert isinstance(answer, str)
    return answer


def test_follows_ag2s_code_executor_protocol(executor: KernelexecCodeExecutor) -> None:
    assert isinstance(executor, CodeExecutor)
    assert isinstance(executor.code_extractor, MarkdownCodeExtractor)


def test_conversable_agent_answers_messages_and_keeps_state(
    executor: KernelexecCodeExecutor,
) -> None:
    agent = agent_with(executor)
    assert agent.code_executor is executor
    first = reply(agent, "Set x:\n```python\nx = 41\nprint('x is set')\n```\n")
    assert first.startswith("exitcode: 0 (execution succeeded)") and "x is set" in first
    second = reply(agent, "Then:\n```python\nprint(x + 1)\n```\n")
    assert "Code output: 42" in second


def test_agent_runs_python_bang_commands_and_bash_blocks(
    executor: KernelexecCodeExecutor,
) -> None:
    answer = reply(
        agent_with(executor),
        "```python\nword = 'kernel'\n!echo bang-$((6 * 7))\nprint(word)\n```\n"
        '```bash\necho "bash in $(pwd)"\n```\n',
    )
    assert answer.startswith("exitcode: 0"), answer
    assert "bang-42" in answer and "kernel" in answer
    assert f"bash in {executor.output_dir}" in answer


def test_blocks_that_are_not_code_are_skipped_as_run_markdown_skips_them(
    executor: KernelexecCodeExecutor,
) -> None:
    # Issue 26: AG2's door refused a json block (UnsupportedLanguage, exit code 1)
    # that `kernelexec run` and run_markdown skip.
    answer = reply(
        agent_with(executor),
        'The payload:\n```json\n{"n": 6}\n```\nThen:\n```python\nprint(6 * 7)\n```\n'
        "Expected output:\n```text\n42\n```\n",
    )
    assert answer == (
        "exitcode: 0 (execution succeeded)\nCode output: "
        "[kernelexec] block 1 (json): skipped: not code\n\n42\n\n"
        "[kernelexec] block 3 (text): skipped: not code\n"
    )
    # An unlabelled block AG2 could not place ("") is read as run_markdown reads one.
    bare = executor.execute_code_blocks(
        [CodeBlock(code="Hello, world!", language=""), CodeBlock(code="ls -d .", language="")]
    )
    assert bare.exit_code == 0 and "neither Python nor shell" in bare.output
    assert bare.output.endswith("\n.\n")


def test_hello_world(executor: KernelexecCodeExecutor) -> None:
    result = run(executor, "print('hello world!')")
    assert isinstance(result, IPythonCodeResult)
    assert (result.exit_code, result.output.strip(), result.output_files) == (0, "hello world!", [])


def test_dependent_executions_share_state(executor: KernelexecCodeExecutor) -> None:
    assert run(executor, "import math\nr = 2").exit_code == 0
    assert run(executor, "print(round(math.pi * r ** 2, 3))").output.strip() == "12.566"


def test_undefined_variable_exits_1_with_the_traceback(executor: KernelexecCodeExecutor) -> None:
    result = run(executor, "print(undefined_variable)")
    assert result.exit_code == 1
    assert "NameError" in result.output and "undefined_variable" in result.output


def test_failed_bash_block_exits_1(executor: KernelexecCodeExecutor) -> None:
    result = executor.execute_code_blocks(
        [
            CodeBlock(code="echo before; exit 3", language="sh"),
            CodeBlock(code="print('never')", language="python"),
        ]
    )
    assert result.exit_code == 1
    assert "before" in result.output and "never" not in result.output


def test_image_and_html_saved_with_the_lines_ag2_prints(executor: KernelexecCodeExecutor) -> None:
    result = executor.execute_code_blocks(
        [
            CodeBlock(
                code="from PIL import Image\nImage.new('RGB', (40, 30), 'red')", language="python"
            ),
            CodeBlock(
                code="from IPython.display import HTML\nHTML('<h1>Hi</h1>')", language="python"
            ),
        ]
    )
    assert result.exit_code == 0
    png, page = (Path(p) for p in result.output_files)
    assert png.suffix == ".png" and png.read_bytes()[:4] == b"\x89PNG"
    assert page.suffix == ".html" and "<h1>Hi</h1>" in page.read_text()
    assert png.is_relative_to(executor.output_dir) and page.is_relative_to(executor.output_dir)
    assert f"Image data saved to {png}" in result.output.splitlines()
    assert f"HTML data saved to {page}" in result.output.splitlines()


def test_matplotlib_plot_through_the_agent(executor: KernelexecCodeExecutor) -> None:
    answer = reply(
        agent_with(executor),
        "```python\nimport matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()\n```",
    )
    assert "Image data saved to " in answer
    saved = Path(answer.split("Image data saved to ")[1].split()[0])
    assert saved.is_file() and saved.read_bytes()[:4] == b"\x89PNG"


def test_pip_install_is_quiet(executor: KernelexecCodeExecutor) -> None:
    # A local, already-installed requirement: pip resolves it without the network.
    result = run(executor, "!pip install --no-index --no-deps pip")
    assert result.exit_code == 0
    assert "Requirement already satisfied" not in result.output


def test_timeout_is_reported_and_interrupts_the_kernel(tmp_path: Path) -> None:
    with KernelexecCodeExecutor(timeout=2, output_dir=tmp_path) as executor:
        run(executor, "kept = 'still here'")
        started = time.monotonic()
        result = run(executor, "import time\ntime.sleep(120)\nprint('slept')")
        after = run(executor, "print(kept)")
        elapsed = time.monotonic() - started
    assert result.exit_code == 124
    assert "Timed out after 2 s" in result.output and "slept" not in result.output
    assert result.output.endswith("\nTimeout")  # the line AG2's own executors print
    assert after.output.strip() == "still here"
    # Had the kernel not been interrupted, the second answer would wait for the sleep
    # (120 s: far beyond what a loaded machine adds to the 2 s timeout).
    assert elapsed < 60


def test_restart_clears_state(executor: KernelexecCodeExecutor) -> None:
    run(executor, "secret = 1")
    executor.restart()
    result = run(executor, "print(secret)")
    assert result.exit_code == 1 and "NameError" in result.output


def test_approval_func_refusal_is_the_result_and_nothing_runs(tmp_path: Path) -> None:
    seen: list[list[CodeBlock]] = []

    def refuse(blocks: list[CodeBlock]) -> Approval:
        seen.append(blocks)
        return Approval(approved=False, reason="no files today")

    with KernelexecCodeExecutor(output_dir=tmp_path, approval_func=refuse) as executor:
        answer = reply(
            agent_with(executor), "```python\nopen('evidence.txt', 'w').write('ran')\n```"
        )
    assert len(seen) == 1 and "evidence.txt" in seen[0][0].code
    assert answer.startswith("exitcode: 1 (execution failed)")
    assert "refused" in answer and "no files today" in answer
    assert not (tmp_path / "evidence.txt").exists()


async def test_works_inside_a_running_event_loop(executor: KernelexecCodeExecutor) -> None:
    assert asyncio.get_running_loop().is_running()
    assert run(executor, "print('from a loop')").output.strip() == "from a loop"
