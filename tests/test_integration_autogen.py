"""kernelexec.integrations.autogen against real kernels and a real CodeExecutorAgent."""

from __future__ import annotations

import asyncio
import json
import time
import warnings
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from autogen_agentchat.agents import CodeExecutorAgent
from autogen_agentchat.messages import TextMessage
from autogen_core import CancellationToken, ComponentModel
from autogen_core.code_executor import CodeBlock, CodeExecutor
from conftest import until

from kernelexec.integrations import Approval
from kernelexec.integrations.autogen import KernelexecCodeExecutor, KernelexecCodeResult


@pytest.fixture
async def executor(tmp_path: Path) -> AsyncIterator[KernelexecCodeExecutor]:
    async with KernelexecCodeExecutor(timeout=30, output_dir=tmp_path / "out") as ex:
        yield ex


async def run(
    executor: KernelexecCodeExecutor, code: str, language: str = "python"
) -> KernelexecCodeResult:
    return await executor.execute_code_blocks(
        [CodeBlock(code=code, language=language)], CancellationToken()
    )


def quiet_agent(executor: KernelexecCodeExecutor) -> CodeExecutorAgent:
    with warnings.catch_warnings():  # "no approval function": this test means it
        warnings.simplefilter("ignore", UserWarning)
        return CodeExecutorAgent("runner", code_executor=executor)


async def test_code_executor_agent_answers_messages_and_keeps_state(
    executor: KernelexecCodeExecutor,
) -> None:
    agent = quiet_agent(executor)
    token = CancellationToken()
    first = TextMessage(
        content="Let's set x.\n```python\nx = 41\nprint('x is set')\n```\n", source="user"
    )
    second = TextMessage(content="And now:\n```python\nprint(x + 1)\n```\n", source="user")
    answer = await agent.on_messages([first], token)
    assert "x is set" in answer.chat_message.to_text()
    answer = await agent.on_messages([second], token)
    assert "42" in answer.chat_message.to_text()


async def test_hello_world(executor: KernelexecCodeExecutor) -> None:
    result = await run(executor, "print('hello world!')")
    assert isinstance(result, KernelexecCodeResult)
    assert (result.exit_code, result.output, result.output_files) == (0, "hello world!\n", [])


async def test_dependent_executions_share_state(executor: KernelexecCodeExecutor) -> None:
    token = CancellationToken()
    first = await executor.execute_code_blocks(
        [CodeBlock("import math\nr = 2", "python"), CodeBlock("area = math.pi * r ** 2", "python")],
        token,
    )
    assert first.exit_code == 0
    second = await run(executor, "print(round(area, 3))")
    assert second.output.strip() == "12.566"


async def test_undefined_variable_exits_1_with_the_traceback(
    executor: KernelexecCodeExecutor,
) -> None:
    result = await run(executor, "print(undefined_variable)")
    assert result.exit_code == 1
    assert "NameError" in result.output
    assert "undefined_variable" in result.output
    assert "\x1b[" not in result.output


async def test_blocks_after_a_failure_do_not_run(executor: KernelexecCodeExecutor) -> None:
    result = await executor.execute_code_blocks(
        [
            CodeBlock("print('one')", "python"),
            CodeBlock("1/0", "python"),
            CodeBlock("print('three')", "python"),
        ],
        CancellationToken(),
    )
    assert result.exit_code == 1
    assert "one" in result.output and "ZeroDivisionError" in result.output
    assert "three" not in result.output


async def test_pil_image_and_html_are_one_file_each_in_output_dir(
    executor: KernelexecCodeExecutor,
) -> None:
    image = await run(executor, "from PIL import Image\nImage.new('RGB', (40, 30), 'red')")
    html = await run(executor, "from IPython.display import HTML\nHTML('<h1>Hi</h1>')")
    assert image.exit_code == 0 and html.exit_code == 0
    assert len(image.output_files) == 1 and len(html.output_files) == 1
    png, page = image.output_files[0], html.output_files[0]
    assert png.suffix == ".png" and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert page.suffix == ".html" and "<h1>Hi</h1>" in page.read_text()
    for path in (png, page):
        assert path.is_absolute() and path.is_relative_to(executor.output_dir)
    assert f"Image data saved to {png}" in image.output
    assert f"HTML data saved to {page}" in html.output


async def test_jpeg_and_svg_are_saved_as_files(executor: KernelexecCodeExecutor) -> None:
    result = await run(
        executor,
        "import io\nfrom PIL import Image as P\nfrom IPython.display import Image, SVG, display\n"
        "buf = io.BytesIO(); P.new('RGB', (8, 8), 'blue').save(buf, 'jpeg')\n"
        "display(Image(buf.getvalue(), format='jpeg'))\n"
        'display(SVG(\'<svg xmlns="http://www.w3.org/2000/svg" width="4" height="4"/>\'))',
    )
    assert result.exit_code == 0
    assert [p.suffix for p in result.output_files] == [".jpg", ".svg"]
    assert result.output_files[0].read_bytes()[:3] == b"\xff\xd8\xff"
    assert "<svg" in result.output_files[1].read_text()


async def test_kernel_cwd_is_output_dir_and_shell_blocks_run_as_shell(
    executor: KernelexecCodeExecutor,
) -> None:
    result = await executor.execute_code_blocks(
        [
            CodeBlock("import os\nprint(os.getcwd())\nopen('made.txt', 'w').write('x')", "python"),
            CodeBlock('echo "shell in $(pwd)"; test -n "$BASH_VERSION" && echo bash', "sh"),
            CodeBlock("ls made.txt", "bash"),
        ],
        CancellationToken(),
    )
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == str(executor.output_dir)
    assert f"shell in {executor.output_dir}" in lines and "bash" in lines and "made.txt" in lines


async def test_blocks_that_are_not_code_are_skipped_as_run_markdown_skips_them(
    executor: KernelexecCodeExecutor,
) -> None:
    blocks = [
        CodeBlock(code='{"n": 6}', language="json"),
        CodeBlock(code="print(6 * 7)", language="python"),
        CodeBlock(code="42", language="output"),
    ]
    result = await executor.execute_code_blocks(blocks, CancellationToken())
    assert (result.exit_code, result.output) == (
        0,
        "[kernelexec] block 1 (json): skipped: not code\n\n42\n\n"
        "[kernelexec] block 3 (output): skipped: not code\n",
    )


async def test_other_languages_are_refused_without_running(
    executor: KernelexecCodeExecutor,
) -> None:
    result = await run(executor, "console.log('hi')", language="javascript")
    assert result.exit_code == 1
    assert "javascript" in result.output and "Nothing was run" in result.output


async def test_timeout_is_reported_and_interrupts_the_kernel(tmp_path: Path) -> None:
    async with KernelexecCodeExecutor(timeout=2, output_dir=tmp_path) as executor:
        await run(executor, "kept = 'still here'")
        started = time.monotonic()
        result = await run(executor, "import time\ntime.sleep(120)\nprint('slept')")
        after = await run(executor, "print(kept)")
        elapsed = time.monotonic() - started
    assert result.exit_code == 124
    assert "Timed out after 2 s" in result.output and "slept" not in result.output
    assert result.output.endswith("\nTimeout")  # what AutoGen's command-line executors print
    assert after.exit_code == 0 and after.output == "still here\n"
    # Had the kernel not been interrupted, the second answer would wait for the sleep
    # (120 s: far beyond what a loaded machine adds to the 2 s timeout).
    assert elapsed < 60


async def test_cancellation_token_interrupts_the_kernel(
    executor: KernelexecCodeExecutor,
) -> None:
    await run(executor, "kept = 7")
    token = CancellationToken()
    # Cancelled once the cell runs (it says so in its work dir): a fixed wait
    # could end before it began.
    code = "import time\nprint('sleeping', flush=True)\nopen('begun', 'w').close()\ntime.sleep(60)"
    task = asyncio.ensure_future(executor.execute_code_blocks([CodeBlock(code, "python")], token))
    assert await until((executor.output_dir / "begun").exists)
    started = time.monotonic()  # its 60 s sleep begins
    token.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    after = await run(executor, "print(kept * 6)")
    assert after.output.strip() == "42"
    # Had the kernel not been interrupted, the next answer would wait for the sleep.
    assert time.monotonic() - started < 30


async def test_restart_clears_state(executor: KernelexecCodeExecutor) -> None:
    await run(executor, "secret = 1")
    await executor.restart()
    result = await run(executor, "print(secret)")
    assert result.exit_code == 1 and "NameError" in result.output


async def test_stop_then_start_gives_a_fresh_kernel_in_the_same_dir(tmp_path: Path) -> None:
    executor = KernelexecCodeExecutor(output_dir=tmp_path)
    await executor.start()
    await run(executor, "x = 1")
    await executor.stop()
    await executor.start()
    try:
        result = await run(executor, "import os\nprint('x' in globals(), os.getcwd())")
    finally:
        await executor.stop()
    assert result.output.strip() == f"False {tmp_path.resolve()}"


async def test_component_serialization_round_trip(tmp_path: Path) -> None:
    executor = KernelexecCodeExecutor(kernel_name="python3", timeout=17, output_dir=tmp_path)
    dumped = executor.dump_component()
    assert dumped.provider == "kernelexec.integrations.autogen.KernelexecCodeExecutor"
    assert dumped.component_type == "code_executor"
    model = ComponentModel.model_validate(json.loads(dumped.model_dump_json()))
    loaded = CodeExecutor.load_component(model)
    assert isinstance(loaded, KernelexecCodeExecutor)
    assert loaded.dump_component().config == dumped.config
    assert (loaded.timeout, loaded.output_dir) == (17, tmp_path.resolve())
    async with loaded:
        assert (await run(loaded, "print(6 * 7)")).output.strip() == "42"


async def test_approval_func_refusal_is_the_result_and_nothing_runs(tmp_path: Path) -> None:
    seen: list[list[CodeBlock]] = []

    def refuse(blocks: list[CodeBlock]) -> Approval:
        seen.append(blocks)
        return Approval(approved=False, reason="writing files is not allowed")

    blocks = [
        CodeBlock("open('evidence.txt', 'w').write('ran')", "python"),
        CodeBlock("touch evidence2.txt", "sh"),
    ]
    async with KernelexecCodeExecutor(output_dir=tmp_path, approval_func=refuse) as executor:
        result = await executor.execute_code_blocks(blocks, CancellationToken())
    assert seen == [blocks]
    assert result.exit_code == 1
    assert "refused" in result.output and "writing files is not allowed" in result.output
    assert not (tmp_path / "evidence.txt").exists() and not (tmp_path / "evidence2.txt").exists()


async def test_async_approval_func_can_approve(tmp_path: Path) -> None:
    async def approve(blocks: list[CodeBlock]) -> bool:
        await asyncio.sleep(0)
        return all("import os" not in b.code for b in blocks)

    async with KernelexecCodeExecutor(output_dir=tmp_path, approval_func=approve) as executor:
        allowed = await run(executor, "print('fine')")
        refused = await run(executor, "import os")
    assert allowed.exit_code == 0 and allowed.output.strip() == "fine"
    assert refused.exit_code == 1 and "refused" in refused.output


async def test_approval_func_with_the_agent(tmp_path: Path) -> None:
    def refuse(blocks: list[CodeBlock]) -> bool:
        return False

    async with KernelexecCodeExecutor(output_dir=tmp_path, approval_func=refuse) as executor:
        agent = quiet_agent(executor)
        message = TextMessage(content="```python\nopen('x.txt', 'w')\n```", source="user")
        answer = await agent.on_messages([message], CancellationToken())
    assert "refused" in answer.chat_message.to_text()
    assert not (tmp_path / "x.txt").exists()


async def test_execute_starts_the_kernel_when_not_started(tmp_path: Path) -> None:
    executor = KernelexecCodeExecutor(output_dir=tmp_path)
    try:
        assert (await run(executor, "print('lazy')")).output.strip() == "lazy"
    finally:
        await executor.stop()


def test_timeout_below_one_second_is_refused() -> None:
    with pytest.raises(ValueError, match="Timeout"):
        KernelexecCodeExecutor(timeout=0.5)
