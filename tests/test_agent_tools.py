"""Function-calling tools on kernelexec, driven by the frameworks' own scripted models.

One scenario for every framework: the model calls the tool twice, first to
import matplotlib and define a variable, then to use that variable (state kept
between calls) and show a chart; the conversation completes, the tool results
are ours, and the chart is a file in the work dir named in the result. The
model clients are the frameworks' own no-network ones: AutoGen's
``ReplayChatCompletionClient``, AG2's ``autogen.testing.TestAgent`` and
``autogen.beta.testing.TestConfig``. The kernels are real.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from autogen import ConversableAgent, LLMConfig
from autogen.beta import Agent, TextInput
from autogen.beta.events import ToolCallEvent, ToolResultEvent
from autogen.beta.testing import TestConfig
from autogen.beta.tools import SandboxCodeTool
from autogen.coding.base import CodeBlock as AG2Block
from autogen.testing import TestAgent, ToolCall
from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.messages import ToolCallExecutionEvent
from autogen_core import CancellationToken, ComponentModel, FunctionCall
from autogen_core.code_executor import CodeBlock
from autogen_core.models import CreateResult, ModelFamily, ModelInfo, RequestUsage
from autogen_core.tools import BaseTool
from autogen_ext.models.replay import ReplayChatCompletionClient
from autogen_ext.tools.code_execution import PythonCodeExecutionTool

from kernelexec import AsyncSession
from kernelexec.integrations import Approval
from kernelexec.integrations.ag2_beta import KernelexecCodeEnvironment
from kernelexec.integrations.ag2_tools import KernelexecPythonTool
from kernelexec.integrations.autogen import KernelexecCodeExecutor

# The model's two calls: the second needs the first's import and variable.
DEFINE = "import matplotlib.pyplot as plt\nsquares = [n * n for n in range(6)]\nprint(len(squares))"
PLOT = (
    "plt.plot(squares)\nplt.title(f'{len(squares)} squares')\n"
    "plt.savefig('squares.png')\nplt.show()"
)
SAVED = re.compile(r"Image data saved to (\S+\.png)")


def assert_chart_named_in(output: str, work_dir: Path) -> None:
    """The result names a PNG that exists under the work dir, and the savefig file is there."""
    match = SAVED.search(output)
    assert match, output
    chart = Path(match[1])
    assert chart.is_relative_to(work_dir.resolve()) and chart.read_bytes()[:4] == b"\x89PNG"
    assert (work_dir / "squares.png").read_bytes()[:4] == b"\x89PNG"


# AutoGen: AssistantAgent + PythonCodeExecutionTool(KernelexecCodeExecutor(...)).


def autogen_call(call_id: str, code: str) -> CreateResult:
    call = FunctionCall(id=call_id, name="CodeExecutor", arguments=json.dumps({"code": code}))
    return CreateResult(
        finish_reason="function_calls",
        content=[call],
        usage=RequestUsage(prompt_tokens=0, completion_tokens=0),
        cached=False,
    )


def replay_client(*completions: str | CreateResult) -> ReplayChatCompletionClient:
    info = ModelInfo(
        vision=False,
        function_calling=True,
        json_output=False,
        family=ModelFamily.UNKNOWN,
        structured_output=False,
    )
    return ReplayChatCompletionClient(list(completions), model_info=info)


async def test_autogen_assistant_agent_keeps_state_across_tool_calls(tmp_path: Path) -> None:
    client = replay_client(
        autogen_call("1", DEFINE), autogen_call("2", PLOT), "The chart of 6 squares is saved."
    )
    async with KernelexecCodeExecutor(timeout=60, output_dir=tmp_path) as executor:
        agent = AssistantAgent(
            "analyst",
            model_client=client,
            tools=[PythonCodeExecutionTool(executor)],
            reflect_on_tool_use=True,
            max_tool_iterations=3,
        )
        result = await agent.run(task="Plot the squares of 0 to 5.")
        # The calls ran in this executor's kernel (the agent holds the tool, not a copy).
        check = [CodeBlock("print(squares[-1])", "python")]
        assert (await executor.execute_code_blocks(check, CancellationToken())).output == "25\n"
    calls = [m for m in result.messages if isinstance(m, ToolCallExecutionEvent)]
    first, second = (event.content[0] for event in calls)
    assert (first.content, first.is_error) == ("6\n", False)
    assert_chart_named_in(second.content, tmp_path)
    assert result.messages[-1].to_text() == "The chart of 6 squares is saved."
    # The model's next turn saw our output: the tool result is in what it was sent.
    [sent] = client.create_calls[1]["messages"][-1].content
    assert sent.content == "6\n"


async def test_autogen_tool_failure_is_our_traceback_and_state_survives(tmp_path: Path) -> None:
    client = replay_client(
        autogen_call("1", "kept = 41\n1 / 0"), autogen_call("2", "print(kept + 1)"), "done"
    )
    async with KernelexecCodeExecutor(timeout=60, output_dir=tmp_path) as executor:
        agent = AssistantAgent(
            "analyst",
            model_client=client,
            tools=[PythonCodeExecutionTool(executor)],
            max_tool_iterations=3,
            reflect_on_tool_use=True,
        )
        result = await agent.run(task="divide")
    failed, fixed = (
        m.content[0].content for m in result.messages if isinstance(m, ToolCallExecutionEvent)
    )
    assert "ZeroDivisionError" in failed and "\x1b[" not in failed
    assert fixed == "42\n"


async def test_autogen_tool_round_trips_through_its_component_config(tmp_path: Path) -> None:
    executor = KernelexecCodeExecutor(timeout=17, output_dir=tmp_path)
    dumped = PythonCodeExecutionTool(executor).dump_component()
    model = ComponentModel.model_validate(json.loads(dumped.model_dump_json()))
    loaded: BaseTool[Any, Any] = BaseTool.load_component(model)
    assert isinstance(loaded, PythonCodeExecutionTool)
    inner = loaded._executor  # AutoGen keeps no public handle on it
    assert isinstance(inner, KernelexecCodeExecutor)
    assert (inner.timeout, inner.output_dir) == (17, tmp_path.resolve())
    await inner.stop()


# AG2 (ConversableAgent): our KernelexecPythonTool, registered for LLM and execution.


def ag2_pair() -> tuple[ConversableAgent, ConversableAgent]:
    # model_client_cls makes a placeholder client, so no provider SDK is needed;
    # TestAgent replaces it with AG2's scripted one for the conversation.
    config = LLMConfig({"model": "scripted", "model_client_cls": "Scripted"})
    assistant = ConversableAgent("analyst", llm_config=config, human_input_mode="NEVER")
    runner = ConversableAgent("runner", llm_config=False, human_input_mode="NEVER")
    return assistant, runner


def test_ag2_tool_keeps_state_across_calls_and_returns_the_chart(tmp_path: Path) -> None:
    assistant, runner = ag2_pair()
    with KernelexecPythonTool(timeout=60, output_dir=tmp_path) as tool:
        tool.register_for_llm(assistant)
        tool.register_for_execution(runner)
        assert assistant.llm_config
        [schema] = assistant.llm_config["tools"]
        assert schema["function"]["name"] == "run_python"
        assert list(schema["function"]["parameters"]["properties"]) == ["code"]
        script: list[str | dict[str, Any]] = [
            ToolCall("run_python", code=DEFINE).to_message(),
            ToolCall("run_python", code=PLOT).to_message(),
            "The chart of 6 squares is saved. TERMINATE",
        ]
        with TestAgent(assistant, script):
            chat = runner.initiate_chat(
                assistant, message="Plot the squares of 0 to 5.", max_turns=3
            )
    answers = [m["content"] for m in chat.chat_history if m.get("role") == "tool"]
    assert answers[0] == "exitcode: 0 (execution succeeded)\nCode output: 6\n"
    assert answers[1].startswith("exitcode: 0 (execution succeeded)\nCode output: ")
    assert_chart_named_in(answers[1], tmp_path)
    assert chat.chat_history[-1]["content"] == "The chart of 6 squares is saved. TERMINATE"


def test_ag2_tool_reports_failure_and_refusal(tmp_path: Path) -> None:
    def no_files(blocks: list[AG2Block]) -> Approval | bool:
        return Approval(False, "no files") if "open(" in blocks[0].code else True

    with KernelexecPythonTool(output_dir=tmp_path, approval_func=no_files) as tool:
        failed = tool.func(code="x = 1\nundefined_name")
        refused = tool.func(code="open('evidence.txt', 'w')")
        after = tool.func(code="print(x)")
    assert failed.startswith("exitcode: 1 (execution failed)\nCode output: ")
    assert "NameError" in failed
    assert refused.startswith("exitcode: 1") and "no files" in refused
    assert not (tmp_path / "evidence.txt").exists()
    assert after == "exitcode: 0 (execution succeeded)\nCode output: 1\n"


def test_ag2_tool_takes_an_executor_or_its_arguments_not_both(tmp_path: Path) -> None:
    from kernelexec.integrations.ag2 import KernelexecCodeExecutor as AG2Executor

    with AG2Executor(output_dir=tmp_path) as executor:
        with pytest.raises(ValueError, match="not both"):
            KernelexecPythonTool(executor, timeout=5)
        tool = KernelexecPythonTool(executor)
        assert tool.executor is executor and tool.output_dir == tmp_path.resolve()
        tool.close()  # not its executor: left running
        assert tool.func(code="print('still up')").endswith("still up\n")
    with pytest.raises(ValueError, match="does not exist"):
        KernelexecPythonTool(output_dir=tmp_path / "missing")


# AG2 (autogen.beta): SandboxCodeTool over our KernelexecCodeEnvironment.


def beta_call(code: str, language: str = "python") -> ToolCallEvent:
    return ToolCallEvent(
        name="run_code", arguments=json.dumps({"code": code, "language": language})
    )


async def tool_results(reply: object) -> list[str]:
    events = await reply.history.get_events()  # type: ignore[attr-defined]
    return [
        "".join(part.content for part in event.result.parts if isinstance(part, TextInput))
        for event in events
        if isinstance(event, ToolResultEvent)
    ]


async def test_ag2_beta_agent_keeps_state_across_calls_and_returns_the_chart(
    tmp_path: Path,
) -> None:
    config = TestConfig(beta_call(DEFINE), beta_call(PLOT), "The chart of 6 squares is saved.")
    async with KernelexecCodeEnvironment(output_dir=tmp_path) as environment:
        agent = Agent("analyst", config=config, tools=[SandboxCodeTool(environment)])
        reply = await agent.ask("Plot the squares of 0 to 5.")
        # The calls ran in this environment's kernel, not in a copy's: AG2's
        # Agent deep-copies its tools.
        assert (await environment.session.execute("print(squares[-1])")).text == "25\n"
    first, second = await tool_results(reply)
    assert first == "6\n"
    assert_chart_named_in(second, tmp_path)
    assert reply.body == "The chart of 6 squares is saved."


async def test_ag2_beta_bash_shares_the_cwd_and_failures_carry_the_exit_code(
    tmp_path: Path,
) -> None:
    config = TestConfig(
        beta_call("open('made.txt', 'w').write('hi')\nkept = 7"),
        beta_call("cat made.txt; echo; pwd", "bash"),
        beta_call("print(kept * 6)\nraise ValueError('bad')"),
        beta_call("console.log(1)", "javascript"),
        "done",
    )
    async with AsyncSession(tmp_path, timeout=60) as session:
        environment = KernelexecCodeEnvironment(session)
        assert environment.supported_languages == ("python", "bash")
        agent = Agent("analyst", config=config, tools=[SandboxCodeTool(environment)])
        reply = await agent.ask("go")
        await environment.aclose()  # not its session: left open
        assert not session.closed
    _, shell, failed, other = await tool_results(reply)
    assert shell == f"hi\n{tmp_path.resolve()}\n"
    assert failed.startswith("42\n") and "ValueError: bad" in failed
    assert failed.endswith("[exit code: 1]")  # SandboxCodeTool's own suffix for a failure
    assert "javascript" in other and "Nothing was run" in other


def test_ag2_beta_environment_takes_a_session_or_its_arguments_not_both(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not both"):
        KernelexecCodeEnvironment(AsyncSession(tmp_path), timeout=5)
