"""kernelexec.integrations.ag2_code under a real AG2 1.x Agent and SandboxCodeTool.

The model is AG2's own scripted one (``ag2.testing.TestConfig``): each test
scripts the tool calls a model would make, and the agent runs them through
``SandboxCodeTool`` in our environment. The kernels are real; nothing of AG2
is replaced.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
from ag2 import Agent, TextInput
from ag2.events import ToolCallEvent, ToolResultEvent
from ag2.testing import TestConfig
from ag2.tools.code import CodeEnvironment, CodeRunResult, SandboxCodeTool

from kernelexec import AsyncSession
from kernelexec.integrations.ag2_code import KernelexecCodeEnvironment

SAVED = re.compile(r"Image data saved to (\S+\.png)")


def call(code: str, language: str = "python") -> ToolCallEvent:
    """The model's call of SandboxCodeTool's function, as a provider would send it."""
    return ToolCallEvent(
        name="run_code", arguments=json.dumps({"code": code, "language": language})
    )


async def ask(environment: KernelexecCodeEnvironment, *turns: str | ToolCallEvent) -> list[str]:
    """The agent's run of the scripted ``turns``: each tool result's text, in order."""
    agent = Agent("analyst", config=TestConfig(*turns), tools=[SandboxCodeTool(environment)])
    reply = await agent.ask("go")
    assert reply.body == turns[-1]  # the conversation ran to its scripted end
    events = await reply.history.get_events()
    return [
        "".join(part.content for part in event.result.parts if isinstance(part, TextInput))
        for event in events
        if isinstance(event, ToolResultEvent)
    ]


async def test_is_an_ag2_code_environment_whose_results_are_ag2s(tmp_path: Path) -> None:
    async with KernelexecCodeEnvironment(output_dir=tmp_path) as environment:
        assert isinstance(environment, CodeEnvironment)
        assert environment.supported_languages == ("python", "bash")
        result = await environment.run("print(6 * 7)", "python")
    assert result == CodeRunResult(output="42\n", exit_code=0)
    assert type(result) is CodeRunResult


async def test_two_calls_of_a_scripted_agent_share_state_and_name_the_chart(
    tmp_path: Path,
) -> None:
    define = "import matplotlib.pyplot as plt\nsquares = [n * n for n in range(6)]\nprint(6)"
    plot = "plt.plot(squares)\nplt.savefig('squares.png')\nplt.show()"
    async with KernelexecCodeEnvironment(output_dir=tmp_path) as environment:
        first, second = await ask(environment, call(define), call(plot), "Saved.")
        # The calls ran in this environment's kernel, not in a copy's: AG2's
        # Agent deep-copies its tools.
        assert (await environment.session.execute("print(squares[-1])")).text == "25\n"
    assert first == "6\n"
    saved = SAVED.search(second)
    assert saved, second
    chart = Path(saved[1])
    assert chart.is_relative_to(tmp_path.resolve()) and chart.read_bytes()[:4] == b"\x89PNG"
    assert (tmp_path / "squares.png").read_bytes()[:4] == b"\x89PNG"


async def test_bash_shares_the_cwd_and_failures_carry_the_exit_code(tmp_path: Path) -> None:
    async with AsyncSession(tmp_path, timeout=60) as session:
        environment = KernelexecCodeEnvironment(session)
        made, shell, failed, other = await ask(
            environment,
            call("open('made.txt', 'w').write('hi')\nkept = 7"),
            call("cat made.txt; echo; pwd", "bash"),
            call("print(kept * 6)\nraise ValueError('bad')"),
            call("console.log(1)", "javascript"),
            "done",
        )
        await environment.aclose()  # not its session: left open
        assert not session.closed
    assert made == ""
    assert shell == f"hi\n{tmp_path.resolve()}\n"
    assert failed.startswith("42\n") and "ValueError: bad" in failed
    assert failed.endswith("[exit code: 1]")  # SandboxCodeTool's own suffix for a failure
    assert "javascript" in other and "Nothing was run" in other


async def test_a_timeout_is_exit_code_124_and_the_kernel_keeps_its_state(tmp_path: Path) -> None:
    async with KernelexecCodeEnvironment(output_dir=tmp_path, timeout=2) as environment:
        started = time.monotonic()
        kept, slow, after = await ask(
            environment,
            call("kept = 'still here'"),
            call("import time\ntime.sleep(30)\nprint('slept')"),
            call("print(kept)"),
            "done",
        )
        elapsed = time.monotonic() - started
    assert kept == ""
    assert "Timed out after 2 s" in slow and "slept" not in slow
    assert slow.endswith("Timeout\n[exit code: 124]")
    assert after == "still here\n"
    # Had the kernel not been interrupted, the third call would wait for the sleep.
    assert elapsed < 30


def test_takes_a_session_or_its_arguments_not_both(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not both"):
        KernelexecCodeEnvironment(AsyncSession(tmp_path), timeout=5)
