"""A stateful CodeAct backend for Microsoft Agent Framework agents (``agent-framework-core``).

The framework's CodeAct providers (``agent_framework.monty``,
``agent_framework.hyperlight``) give an agent one ``execute_code`` tool whose
code may call the agent's other tools with ``call_tool(name, **kwargs)``.
This one has the same shape, and its code runs in a Jupyter kernel that keeps
its variables, imports and files from call to call, on a real Linux machine
(``pip install``, subprocesses, files, whatever backend the session has)::

    from agent_framework import Agent
    from kernelexec.integrations.agent_framework import KernelexecCodeActProvider

    async with KernelexecCodeActProvider(tools=[get_weather]) as codeact:
        agent = Agent(client, "You are a data analyst.", context_providers=[codeact])
        reply = await agent.run("Chart the week's temperatures in Paris")

``tools`` are the agent's tools for the code: each ``call_tool`` from the
kernel reaches only them, as an input request on the kernel's stdin that the
host answers only during that call, checked, approved and run on the host,
the result sent back as JSON (the guide's "How call_tool reaches the host"
says why the kernel cannot abuse it). A new kernel (a restart) gets
``call_tool`` again before its first call. ``approval_func`` sees each ``execute_code`` call's
code (a ``CodeRequest``) before it runs and each tool call (a
``ToolRequest``) before the tool runs; a refusal is what the model reads (a
``ToolCallError`` raised in the code, for a tool call), and it may try again.
The framework's own ``approval_mode`` applies to ``execute_code`` as a whole,
and is "always_require" when a tool given requires approval, as in the
framework's providers.

One kernel per provider: a conversation's agent gets a provider of its own.
A call's tool calls count against its timeout, and are not in the transcript.

Needs the ``agent-framework`` extra: ``pip install -e '.[agent-framework]'`` in
a clone, or the wheel with ``[agent-framework]``; without it, importing this
module raises a ``ModuleNotFoundError`` saying so.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from .._extras import missing_extra

try:
    from agent_framework import (
        AgentSession,
        ContextProvider,
        FunctionTool,
        SessionContext,
        SupportsAgentRun,
        normalize_tools,
    )
except ImportError as exc:
    raise missing_extra(__name__, "agent-framework", exc) from exc

from .._kernel.call_tool import _kernelexec_call_tool_for
from .._session._async import AsyncSession
from ._approval import Approval, Verdict, ask, refusal_text
from ._blocks import combine, prepare
from ._code_environment import HeldSession
from ._codeact import PREFIX, CodeRequest, ToolCallLimits, ToolGate, ToolRequest
from ._codeact_text import describe_execute_code, instructions

__all__ = [
    "ApprovalFunc",
    "CodeRequest",
    "KernelexecCodeActProvider",
    "KernelexecExecuteCodeTool",
    "ToolCallLimits",
    "ToolRequest",
]

ApprovalFunc = Callable[[CodeRequest | ToolRequest], "Verdict | Awaitable[Verdict]"]
"""Sees each code and tool call before it runs; returns (or awaits) a bool or an ``Approval``."""

ApprovalMode = Literal["always_require", "never_require"]

ToolsInput = FunctionTool | Callable[..., Any] | Sequence[FunctionTool | Callable[..., Any]]

_INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "code": {"type": "string", "description": "Python to run in the persistent kernel."}
    },
    "required": ["code"],
}


class KernelexecExecuteCodeTool(HeldSession, FunctionTool):
    """``execute_code(code)``, the framework's CodeAct tool, over one kernelexec session.

    Give it to an agent's ``tools`` directly, or through a
    ``KernelexecCodeActProvider``, which also adds the instructions.

    Args:
        session: the session to run code in, with whatever backend, limits
            or sandbox it was made with; the caller closes it. None makes a
            local one from ``output_dir`` and ``timeout``, which ``aclose``
            then closes.
        tools: the tools the code may call with ``call_tool``: function
            tools, or functions (made into them as ``Agent`` makes them).
        approval_func: sees each ``CodeRequest`` and ``ToolRequest`` first,
            sync or async; False (or ``Approval(False, reason)``) runs nothing.
        approval_mode: the framework's approval of each ``execute_code``
            call; "always_require" also when a tool given requires it.
        output_dir: the kernel's cwd (None: a temp dir), where saved outputs
            and the transcript notebook go.
        timeout: seconds per call, tool calls included; on expiry the
            kernel is interrupted and its state kept.
        limits: the sizes and number of one call's tool calls.

    Raises:
        ValueError: both ``session`` and ``output_dir``/``timeout``.
        TypeError: a tool that is not a function tool (a hosted or MCP one).
    """

    def __init__(
        self,
        session: AsyncSession | None = None,
        *,
        tools: ToolsInput | None = None,
        approval_func: ApprovalFunc | None = None,
        approval_mode: ApprovalMode | None = None,
        output_dir: str | Path | None = None,
        timeout: float = 60,
        limits: ToolCallLimits | None = None,
    ) -> None:
        host_tools = _function_tools(tools)
        required = approval_mode == "always_require" or any(
            tool.approval_mode == "always_require" for tool in host_tools
        )
        super().__init__(
            name="execute_code",
            description=describe_execute_code(host_tools),
            approval_mode="always_require" if required else "never_require",
            func=self._run_code,
            input_model=_INPUT_SCHEMA,
        )
        self._hold(session, output_dir, timeout)
        self._host_tools = {tool.name: tool for tool in host_tools}
        self._approval_func = approval_func
        self._limits = limits or ToolCallLimits()
        self._call_tool_in: int | Literal[False] | None = False  # the kernel that has call_tool

    @property
    def host_tools(self) -> list[FunctionTool]:
        """The tools the code may call, in order."""
        return list(self._host_tools.values())

    @property
    def instructions(self) -> str:
        """What a provider tells the model about this tool."""
        return instructions(bool(self._host_tools))

    async def _run_code(self, *, code: str) -> str:
        approval = await ask(self._approval_func, CodeRequest(code))
        if not approval.approved:
            return refusal_text(approval)
        gate: ToolGate | None = None
        if self._host_tools:
            failed = await self._define_call_tool()
            if failed is not None:
                return failed
            hosts = {name: _HostFunction(tool) for name, tool in self._host_tools.items()}
            gate = ToolGate(hosts, self._approve_call, self._limits)
        result = await self._session.execute(
            prepare(code, "python"), stdin=None if gate is None else gate.answer
        )
        if result.restarted:
            self._call_tool_in = False  # a new kernel: its namespace has no call_tool
        output = combine([result], self._session.work_dir).output
        return output or "The code ran and printed nothing."

    async def _approve_call(self, request: ToolRequest) -> Approval:
        return await ask(self._approval_func, request)

    async def _define_call_tool(self) -> str | None:
        """Defines ``call_tool`` in a kernel that lacks it; what went wrong, if anything."""
        kernel = self._session.kernel_pid
        if self._call_tool_in is not False and self._call_tool_in == kernel:
            return None
        source = (
            "# kernelexec: call_tool(name, **arguments) runs one of the agent's tools "
            "on the host\n"
            f"{inspect.getsource(_kernelexec_call_tool_for)}\n"
            f"call_tool = _kernelexec_call_tool_for({PREFIX!r}, "
            f"{self._limits.max_request_chars})\n"
            "del _kernelexec_call_tool_for\n"
        )
        result = await self._session.execute(source)
        if not result.ok:
            return f"call_tool could not be defined in the kernel; nothing was run.\n{result.text}"
        self._call_tool_in = self._session.kernel_pid
        return None


class KernelexecCodeActProvider(HeldSession, ContextProvider):
    """The framework's CodeAct provider shape: ``execute_code`` and its instructions, each run.

    Takes ``KernelexecExecuteCodeTool``'s arguments, and ``source_id``; its
    ``execute_code`` is that tool, on the provider's session.
    """

    DEFAULT_SOURCE_ID = "kernelexec_codeact"

    def __init__(
        self,
        source_id: str = DEFAULT_SOURCE_ID,
        *,
        session: AsyncSession | None = None,
        tools: ToolsInput | None = None,
        approval_func: ApprovalFunc | None = None,
        approval_mode: ApprovalMode | None = None,
        output_dir: str | Path | None = None,
        timeout: float = 60,
        limits: ToolCallLimits | None = None,
    ) -> None:
        super().__init__(source_id)
        self._hold(session, output_dir, timeout)
        self.execute_code = KernelexecExecuteCodeTool(
            self._session,
            tools=tools,
            approval_func=approval_func,
            approval_mode=approval_mode,
            limits=limits,
        )

    async def before_run(
        self,
        *,
        agent: SupportsAgentRun,
        session: AgentSession,
        context: SessionContext,
        state: dict[str, Any],
    ) -> None:
        """Adds the instructions and ``execute_code`` to this run."""
        context.extend_instructions(self.source_id, self.execute_code.instructions)
        context.extend_tools(self.source_id, [self.execute_code])


class _HostFunction:
    """A function tool as the gate calls it (``_codeact.HostTool``)."""

    def __init__(self, tool: FunctionTool) -> None:
        self._tool = tool

    def check(self, arguments: Mapping[str, Any]) -> str | None:
        schema = self._tool.parameters()
        declared = schema.get("properties") or {}
        unknown = [name for name in arguments if name not in declared]
        if unknown:
            takes = ", ".join(declared) or "none"
            return f"no argument named {unknown[0][:100]!r} (it takes: {takes})"
        missing = [name for name in schema.get("required") or [] if name not in arguments]
        if missing:
            return f"missing the argument {missing[0]!r}"
        return None

    async def run(self, arguments: Mapping[str, Any]) -> object:
        # The framework checks the arguments against the tool's own schema (a
        # TypeError, which the gate sends to the code) and runs it, sync or async.
        return await self._tool.invoke(arguments=dict(arguments), skip_parsing=True)


def _function_tools(tools: ToolsInput | None) -> list[FunctionTool]:
    found = []
    for tool in normalize_tools(tools):
        if not isinstance(tool, FunctionTool):
            raise TypeError(
                f"only function tools can be called from the kernel's code, not {tool!r}; "
                "give the agent the others directly"
            )
        if tool.name != "execute_code":
            found.append(tool)
    return found
