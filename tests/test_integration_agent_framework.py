"""kernelexec.integrations.agent_framework under a real Agent Framework ``Agent``.

The model is scripted: ``Scripted`` is a ``BaseChatClient`` with the
framework's own function-invocation layer, answering each request with the
next scripted turn (the framework ships no test client). Everything else is
real: the agent, its context providers, the framework's tool invocation and
approval flow, and the kernels.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Sequence
from pathlib import Path
from typing import Any

import pytest
from agent_framework import (
    Agent,
    BaseChatClient,
    ChatResponse,
    Content,
    FunctionInvocationLayer,
    FunctionTool,
    Message,
    tool,
)

from kernelexec import AsyncSession, Limits
from kernelexec.integrations import Approval
from kernelexec.integrations._codeact import PREFIX
from kernelexec.integrations.agent_framework import (
    CodeRequest,
    KernelexecCodeActProvider,
    KernelexecExecuteCodeTool,
    ToolCallLimits,
    ToolRequest,
)

Turn = list[Content]


class Scripted(FunctionInvocationLayer[Any], BaseChatClient[Any]):
    """A model that answers each request with its next turn, and keeps what it was sent."""

    def __init__(self, *turns: Turn | str) -> None:
        super().__init__()
        self.turns = [[Content.from_text(t)] if isinstance(t, str) else t for t in turns]
        self.requests: list[tuple[list[Message], dict[str, Any]]] = []

    def _inner_get_response(  # type: ignore[override]
        self, *, messages: Sequence[Message], stream: bool, options: Any, **kwargs: Any
    ) -> Awaitable[ChatResponse]:
        self.requests.append((list(messages), dict(options)))
        turn = self.turns.pop(0)

        async def respond() -> ChatResponse:
            return ChatResponse(messages=[Message(role="assistant", contents=turn)])

        return respond()

    def results(self) -> list[str]:
        """The function results the model was last sent, in order."""
        messages, _ = self.requests[-1]
        return [str(c.result) for m in messages for c in m.contents if c.type == "function_result"]


def execute(code: str, call_id: str = "") -> Turn:
    """The model's call of ``execute_code``."""
    arguments = json.dumps({"code": code})
    call_id = call_id or code[:20]
    return [Content.from_function_call(call_id=call_id, name="execute_code", arguments=arguments)]


async def run(provider: KernelexecCodeActProvider, *codes: str) -> list[str]:
    """A scripted agent's run of one ``execute_code`` call per code: each result's text."""
    client = Scripted(*[execute(code, f"call-{i}") for i, code in enumerate(codes)], "done")
    reply = await Agent(client, "Be brief.", context_providers=[provider]).run("go")
    assert reply.text == "done"
    return client.results()


class Weather:
    """A host tool that counts its runs."""

    def __init__(self) -> None:
        self.runs: list[str] = []

        @tool
        def get_weather(city: str) -> dict[str, Any]:
            """The weather in a city."""
            self.runs.append(city)
            return {"city": city, "celsius": 21.5}

        self.tool: FunctionTool = get_weather


@pytest.fixture
def weather() -> Weather:
    return Weather()


@pytest.fixture
async def provider(tmp_path: Path, weather: Weather) -> AsyncIterator[KernelexecCodeActProvider]:
    async with KernelexecCodeActProvider(
        tools=[weather.tool], output_dir=tmp_path, timeout=30
    ) as codeact:
        yield codeact


async def test_two_calls_share_state_and_a_refused_tool_call_is_retried(
    tmp_path: Path, weather: Weather
) -> None:
    # Issue #31's acceptance: two code calls sharing state, a host tool called
    # from the code, the approval function's refusal read by the model, retried.
    seen: list[CodeRequest | ToolRequest] = []

    def approve(request: CodeRequest | ToolRequest) -> Approval:
        seen.append(request)
        first_call = sum(isinstance(r, ToolRequest) for r in seen) == 1
        if isinstance(request, ToolRequest) and first_call:
            return Approval(False, "say which unit you want")
        return Approval(True)

    define = "temps = [18.0, 19.5]\nprint(len(temps))"
    ask = "temps.append(call_tool('get_weather', city='Paris')['celsius'])\nprint(temps)"
    async with KernelexecCodeActProvider(
        tools=[weather.tool], approval_func=approve, output_dir=tmp_path, timeout=30
    ) as codeact:
        client = Scripted(execute(define), execute(ask, "ask-1"), execute(ask, "ask-2"), "21.5")
        agent = Agent(client, "Be brief.", context_providers=[codeact])
        reply = await agent.run("What is it like in Paris?")
        assert reply.text == "21.5"
        # execute_code and its instructions were in each request, the tool itself was not.
        _, options = client.requests[0]
        assert [t.name for t in options["tools"]] == ["execute_code"]
        assert "call_tool(name, **kwargs)" in options["instructions"]
        assert "`get_weather`: The weather in a city." in options["tools"][0].description
        defined, refused, retried = client.results()
        assert (await codeact.session.execute("print(temps)")).text == "[18.0, 19.5, 21.5]\n"
    assert defined == "2\n"
    assert "ToolCallError: The call of get_weather was refused by the approval function: " in (
        refused
    )
    assert "say which unit you want. Nothing was run." in refused
    assert retried == "[18.0, 19.5, 21.5]\n"
    assert weather.runs == ["Paris"]  # once: the refused call ran nothing
    assert seen == [
        CodeRequest(define),
        CodeRequest(ask),
        ToolRequest("get_weather", {"city": "Paris"}),
        CodeRequest(ask),
        ToolRequest("get_weather", {"city": "Paris"}),
    ]


async def test_refused_code_runs_nothing_and_the_model_reads_why(tmp_path: Path) -> None:
    def approve(request: CodeRequest | ToolRequest) -> Approval:
        assert isinstance(request, CodeRequest)
        return Approval("import os" not in request.code, "no os, please")

    async with KernelexecCodeActProvider(approval_func=approve, output_dir=tmp_path) as codeact:
        refused, ran = await run(codeact, "import os\nopen('made', 'w')", "print(6 * 7)")
    assert refused == (
        "Code execution was refused by the approval function: no os, please. Nothing was run."
    )
    assert ran == "42\n"
    assert not (tmp_path / "made").exists()


async def test_the_frameworks_approval_mode_holds_the_code_until_approved(
    tmp_path: Path,
) -> None:
    sent: list[str] = []

    @tool(approval_mode="always_require")
    def send_email(to: str) -> str:
        """Send an email."""
        sent.append(to)
        return f"sent to {to}"

    async with KernelexecCodeActProvider(tools=[send_email], output_dir=tmp_path) as codeact:
        # A tool that needs approval makes execute_code need it, as in the framework's providers.
        assert codeact.execute_code.approval_mode == "always_require"
        client = Scripted(execute("print(call_tool('send_email', to='bob'))"), "sent")
        agent = Agent(client, "Be brief.", context_providers=[codeact])
        conversation = agent.create_session()
        first = await agent.run("mail bob", session=conversation)
        [request] = first.user_input_requests
        assert sent == []  # held
        approved = Message(role="user", contents=[request.to_function_approval_response(True)])
        second = await agent.run(approved, session=conversation)
    assert second.text == "sent"
    assert client.results() == ["sent to bob\n"]
    assert sent == ["bob"]


async def test_call_tool_comes_back_after_the_kernel_is_restarted(
    provider: KernelexecCodeActProvider, weather: Weather
) -> None:
    call = "print(call_tool('get_weather', city='Oslo')['celsius'])"
    [before] = await run(provider, call)
    await provider.session.restart()  # a new kernel, without call_tool
    [after] = await run(provider, call)
    assert before == after == "21.5\n"
    assert weather.runs == ["Oslo", "Oslo"]


async def test_a_slow_tool_counts_against_the_timeout_and_the_state_is_kept(
    tmp_path: Path,
) -> None:
    @tool
    async def slow() -> str:
        """Takes its time."""
        await asyncio.sleep(60)
        return "late"

    async with KernelexecCodeActProvider(tools=[slow], output_dir=tmp_path, timeout=3) as codeact:
        kept, timed_out, after = await run(
            codeact, "x = 1", "print(call_tool('slow'))", "print(x + 1)"
        )
    assert "Timed out after 3 s" in timed_out and "late" not in timed_out
    assert timed_out.endswith("Timeout")
    assert (kept, after) == ("The code ran and printed nothing.", "2\n")


async def test_the_tool_takes_a_session_and_leaves_it_open(tmp_path: Path) -> None:
    async with AsyncSession(tmp_path, timeout=30) as session:
        tool_ = KernelexecExecuteCodeTool(session)
        assert tool_.name == "execute_code" and tool_.approval_mode == "never_require"
        assert "call_tool" not in tool_.description  # no tools, no call_tool
        result = await tool_.invoke(arguments={"code": "y = 6 * 7\ny"})
        assert [c.text for c in result] == ["42"]
        await tool_.aclose()
        assert not session.closed
        assert (await session.execute("y")).text == "42\n"
    with pytest.raises(ValueError, match="not both"):
        KernelexecExecuteCodeTool(AsyncSession(tmp_path), timeout=5)


# -- the kernel is the adversary: requests it forges are refused, and nothing runs


async def test_a_tool_the_agent_was_not_given_is_refused(
    provider: KernelexecCodeActProvider, weather: Weather
) -> None:
    results = await run(
        provider,
        "call_tool('delete_everything')",
        "call_tool('execute_code', code='print(1)')",  # not a door to itself
        "call_tool('__class__')",
    )
    names = ["delete_everything", "execute_code", "__class__"]
    for result, name in zip(results, names, strict=True):
        assert f"ToolCallError: no tool named '{name}' was given to this agent" in result
        assert "(its tools: get_weather)" in result
    assert weather.runs == []


async def test_forged_requests_are_refused_unrun(
    provider: KernelexecCodeActProvider, weather: Weather
) -> None:
    asked: list[CodeRequest | ToolRequest] = []

    def approve(request: CodeRequest | ToolRequest) -> bool:
        asked.append(request)
        return True

    provider.execute_code._approval_func = approve
    forged = {
        # An approval the kernel grants itself is one key too many.
        "approved": {"name": "get_weather", "arguments": {"city": "x"}, "approved": True},
        "not an object": ["get_weather", {"city": "x"}],
        "positional": {"name": "get_weather", "arguments": ["x"]},
        "unknown argument": {"name": "get_weather", "arguments": {"city": "x", "cmd": "id"}},
        "missing argument": {"name": "get_weather", "arguments": {}},
    }
    codes = [f"print(input({PREFIX + json.dumps(body)!r}))" for body in forged.values()]
    codes.append(f"print(input({PREFIX + 'not json'!r}))")
    codes.append(f"print(input({PREFIX!r} + '[' * 100_000))")  # a nesting bomb
    results = await run(provider, *codes)
    replies = [json.loads(result) for result in results]
    assert all(reply["ok"] is False for reply in replies), replies
    errors = [reply["error"] for reply in replies]
    assert errors[0] == errors[1] == "a tool call must be a JSON object of name and arguments"
    assert errors[2] == "the arguments of get_weather must be a JSON object (keyword arguments)"
    assert errors[3] == "get_weather: no argument named 'cmd' (it takes: city)"
    assert errors[4] == "get_weather: missing the argument 'city'"
    not_json = "a tool call that is not JSON; use call_tool(name, **arguments)"
    assert errors[5] == errors[6] == not_json
    assert weather.runs == []
    assert all(isinstance(request, CodeRequest) for request in asked)  # no call was approvable


async def test_a_request_outside_the_running_execution_is_not_answered(
    provider: KernelexecCodeActProvider, weather: Weather
) -> None:
    # The kernel sends an input request of its own making on the stdin socket,
    # as a reply to some other request: the host answers only its execution's.
    forge = (
        "kernel = get_ipython().kernel\n"
        "parent = dict(kernel.get_parent(), header=dict(kernel.get_parent()['header'], "
        "msg_id='forged'))\n"
        "content = {'prompt': " + repr(PREFIX) + ' + \'{"name": "get_weather", '
        '"arguments": {"city": "Rome"}}\', \'password\': False}\n'
        "kernel.session.send(kernel.stdin_socket, 'input_request', content, parent=parent, "
        "ident=kernel._parent_ident['shell'])\n"
        "import time; time.sleep(1); print('sent')"
    )
    [sent] = await run(provider, forge)
    assert sent == "sent\n"
    assert weather.runs == []


async def test_huge_arguments_and_results_and_too_many_calls_are_refused(
    tmp_path: Path, weather: Weather
) -> None:
    @tool
    def big() -> str:
        """A result too big to send back."""
        return "x" * 5_000

    limits = ToolCallLimits(max_request_chars=1_000, max_result_chars=2_000, max_calls=3)
    async with KernelexecCodeActProvider(
        tools=[weather.tool, big], output_dir=tmp_path, limits=limits
    ) as codeact:
        honest, forged, result, many = await run(
            codeact,
            "call_tool('get_weather', city='x' * 10_000)",  # call_tool itself refuses to send it
            f'print(input({PREFIX!r} + \'{{"name": "get_weather", "arguments": '
            "{\"city\": \"' + 'x' * 10_000 + '\"}}'))",  # sent anyway, refused unread
            "call_tool('big')",
            "for i in range(5):\n    call_tool('get_weather', city=str(i))\n    print(i)",
        )
    assert "the arguments are 10,0" in honest and "over the host's cap of 1,000" in honest
    assert json.loads(forged) == {
        "ok": False,
        "error": "a tool call of 10,050 characters, over the cap of 1,000; pass less",
    }
    assert "the tool's result was 5,0" in result and "over the cap of 2,000" in result
    assert many.startswith("0\n1\n2\n")
    assert "more than 3 tool calls in one execute_code call" in many
    assert weather.runs == ["0", "1", "2"]


async def test_a_request_over_the_message_cap_is_dropped_unread(
    tmp_path: Path, weather: Weather
) -> None:
    # Over the session's cap on one kernel message, a request never reaches the
    # gate: the backend drops it before decoding, and the code's input() ends.
    limits = Limits(max_message_bytes=1_000_000)
    async with AsyncSession(tmp_path, timeout=30, limits=limits) as session:
        execute_code = KernelexecExecuteCodeTool(session, tools=[weather.tool])
        code = (
            "try:\n"
            f'    input({PREFIX!r} + \'{{"name": "get_weather", "arguments": '
            "{\"city\": \"' + 'x' * 2_000_000 + '\"}}')\n"
            "except EOFError:\n"
            "    print('no answer')\n"
            "print(call_tool('get_weather', city='Lima')['city'])"
        )
        result = await execute_code.invoke(arguments={"code": code})
    assert result[0].text.startswith("no answer\nLima\n"), result[0].text
    assert "over the host's cap of 1,000,000 bytes" in result[0].text
    assert weather.runs == ["Lima"]  # the channel still works after the drop


def test_only_function_tools_are_taken() -> None:
    with pytest.raises(TypeError, match="only function tools"):
        KernelexecExecuteCodeTool(tools=[{"type": "web_search"}])  # type: ignore[list-item]
