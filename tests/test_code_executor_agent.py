"""AutoGen's CodeExecutorAgent with a model client, on KernelexecCodeExecutor.

The agent writes code with its model, runs it, and on a failure asks the
model whether to retry, writes a fix, and reflects on the result. The model is
AutoGen's ``ReplayChatCompletionClient`` scripted to write failing code and
then the fix; what drives the loop is our executor's results (exit code and
text) from a real kernel.
"""

from __future__ import annotations

import json
from pathlib import Path

from autogen_agentchat.agents import ApprovalRequest, ApprovalResponse, CodeExecutorAgent
from autogen_agentchat.base import TaskResult
from autogen_agentchat.messages import (
    CodeExecutionEvent,
    CodeGenerationEvent,
    ModelClientStreamingChunkEvent,
    TextMessage,
)
from autogen_core import CancellationToken
from autogen_core.models import CreateResult, ModelFamily, ModelInfo, RequestUsage
from autogen_ext.models.replay import ReplayChatCompletionClient

from kernelexec.integrations.autogen import KernelexecCodeExecutor, KernelexecCodeResult

FAILING = (
    "Computing it.\n```python\nimport math\nvalues = [1, 4, 9]\nprint(math.sqrt(valuez[-1]))\n```"
)
# The fix uses what the failing cell defined before it failed: the kernel kept it.
FIXED = "Fixed the name.\n```python\nprint(math.sqrt(values[-1]))\n```"
RETRY = json.dumps({"retry": True, "reason": "valuez is a typo for values"})
REFLECTION = "The square root of the last value is 3.0."


def written(text: str) -> CreateResult:
    """A model turn as one result, so a streamed reply keeps its newlines
    (the replay client streams a plain string word by word)."""
    return CreateResult(
        finish_reason="stop",
        content=text,
        usage=RequestUsage(prompt_tokens=0, completion_tokens=0),
        cached=False,
    )


def client(*completions: str | CreateResult) -> ReplayChatCompletionClient:
    info = ModelInfo(
        vision=False,
        function_calling=False,
        json_output=True,
        family=ModelFamily.UNKNOWN,
        structured_output=True,  # CodeExecutorAgent's retry decision needs it
    )
    return ReplayChatCompletionClient(list(completions), model_info=info)


async def run_agent(agent: CodeExecutorAgent, task: str) -> tuple[TaskResult, list[str]]:
    """The run's result, and the streamed chunks (which the result does not keep)."""
    result, chunks = None, []
    async for item in agent.run_stream(task=task):
        if isinstance(item, TaskResult):
            result = item
        elif isinstance(item, ModelClientStreamingChunkEvent):
            chunks.append(item.content)
    assert result is not None
    return result, chunks


def of_type(result: TaskResult, kind: type) -> list:  # type: ignore[type-arg]
    return [m for m in result.messages if isinstance(m, kind)]


async def test_failing_code_then_the_fix_drives_retry_and_reflection(tmp_path: Path) -> None:
    model = client(written(FAILING), RETRY, written(FIXED), REFLECTION)
    async with KernelexecCodeExecutor(timeout=60, output_dir=tmp_path) as executor:
        agent = CodeExecutorAgent(
            "coder",
            code_executor=executor,
            model_client=model,
            max_retries_on_error=2,
            approval_func=lambda request: ApprovalResponse(approved=True, reason="ok"),
        )
        result, _ = await run_agent(agent, "What is the square root of the last of 1, 4, 9?")
    failed, fixed = of_type(result, CodeExecutionEvent)
    assert isinstance(failed.result, KernelexecCodeResult)
    assert failed.result.exit_code == 1 and failed.retry_attempt == 0
    assert "NameError: name 'valuez' is not defined" in failed.result.output
    assert (fixed.result.exit_code, fixed.retry_attempt) == (0, 1)
    assert fixed.result.output == "3.0\n"
    generations = of_type(result, CodeGenerationEvent)
    assert [g.retry_attempt for g in generations] == [0, 0, 1]
    assert "valuez is a typo" in generations[1].content
    # The model was asked whether to retry with our traceback in the question.
    # (Call 0 wrote the failing code; call 1 is the retry decision.)
    retry_question = model.create_calls[1]["messages"][-1].content
    assert "NameError: name 'valuez' is not defined" in retry_question
    assert result.messages[-1].to_text() == REFLECTION


async def test_model_client_stream_streams_the_reflection(tmp_path: Path) -> None:
    model = client(written(FAILING), RETRY, written(FIXED), REFLECTION)
    async with KernelexecCodeExecutor(timeout=60, output_dir=tmp_path) as executor:
        agent = CodeExecutorAgent(
            "coder",
            code_executor=executor,
            model_client=model,
            model_client_stream=True,
            max_retries_on_error=1,
            approval_func=lambda request: ApprovalResponse(approved=True, reason="ok"),
        )
        result, chunks = await run_agent(agent, "square root of the last value")
    assert [e.result.exit_code for e in of_type(result, CodeExecutionEvent)] == [1, 0]
    assert len(chunks) > 1 and "".join(chunks) == REFLECTION
    assert result.messages[-1].to_text() == REFLECTION


async def test_a_refusal_by_the_approval_function_is_retried_like_a_failure(
    tmp_path: Path,
) -> None:
    seen: list[str] = []

    async def no_file_writes(request: ApprovalRequest) -> ApprovalResponse:
        seen.append(request.code)
        if "open(" in request.code:
            return ApprovalResponse(approved=False, reason="no file writes")
        return ApprovalResponse(approved=True, reason="read-only")

    writes = "```python\nopen('evidence.txt', 'w').write('x')\n```"
    prints = "```python\nprint('no files needed')\n```"
    retry = json.dumps({"retry": True, "reason": "print instead of writing a file"})
    model = client(written(writes), retry, written(prints), "Printed instead.")
    async with KernelexecCodeExecutor(timeout=60, output_dir=tmp_path) as executor:
        agent = CodeExecutorAgent(
            "coder",
            code_executor=executor,
            model_client=model,
            max_retries_on_error=1,
            approval_func=no_file_writes,
        )
        result, _ = await run_agent(agent, "say something")
    refused, ran = (e.result for e in of_type(result, CodeExecutionEvent))
    assert refused.exit_code == 1 and "no file writes" in refused.output
    assert not (tmp_path / "evidence.txt").exists()
    assert (ran.exit_code, ran.output) == (0, "no files needed\n")
    assert len(seen) == 2 and "open(" in seen[0]


async def test_sources_chooses_whose_code_runs(tmp_path: Path) -> None:
    async with KernelexecCodeExecutor(timeout=60, output_dir=tmp_path) as executor:
        agent = CodeExecutorAgent(
            "executor",
            code_executor=executor,
            sources=["writer"],
            approval_func=lambda request: ApprovalResponse(approved=True, reason="ok"),
        )
        token = CancellationToken()
        stranger = TextMessage(content="```python\nopen('x.txt', 'w')\n```", source="stranger")
        writer = TextMessage(content="```python\nprint(6 * 7)\n```", source="writer")
        ignored = await agent.on_messages([stranger], token)
        answered = await agent.on_messages([stranger, writer], token)
    assert ignored.chat_message.to_text() == CodeExecutorAgent.NO_CODE_BLOCKS_FOUND_MESSAGE
    assert answered.chat_message.to_text() == "42\n"
    assert not (tmp_path / "x.txt").exists()
