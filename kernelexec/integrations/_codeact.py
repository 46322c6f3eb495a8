"""The host's side of ``call_tool``: a CodeAct agent's tools, called from the kernel's code.

Imports no framework: a tool is anything with ``check`` and ``run``
(``HostTool``), and ``kernelexec.integrations.agent_framework`` adapts the
Agent Framework's ``FunctionTool`` to it.

The channel is the kernel's stdin: ``call_tool`` (``kernelexec/_kernel/call_tool.py``)
asks with ``input(PREFIX + json)`` and blocks until the host replies, which
is what an input request is for. The kernel is the adversary (its code is
the model's), so a request is read as if the kernel had written every byte
of it, which it may have: the prompt arrives only while the host runs that
execution, on the host's side of the socket and under its message cap; its
length is checked before it is decoded; it must be one JSON object naming a
tool the agent was given (looked up in a dict, never resolved as a name or a
path) with a JSON object of arguments the tool declares; the approval hook
sees it, as it saw the code; the tool runs on the host and its result goes
back as JSON, under a cap. Nothing a kernel sends can reach anything else:
no other tool, no host attribute, no answer it writes itself (the replies go
from the host to the kernel only).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from ._approval import Approval, refusal_text

__all__ = [
    "PREFIX",
    "CodeRequest",
    "HostTool",
    "ToolCallLimits",
    "ToolGate",
    "ToolRequest",
    "jsonable",
]

PREFIX = "kernelexec.call_tool:"
"""How a tool call's ``input()`` prompt starts; any other prompt is left to the kernel's code."""


@dataclass(frozen=True)
class ToolCallLimits:
    """Bounds on the tool calls of one ``execute_code`` call.

    Attributes:
        max_request_chars: one call's name and arguments, as JSON.
        max_result_chars: one call's result, as JSON.
        max_calls: calls answered; later ones are refused unread.
    """

    max_request_chars: int = 256 * 1024
    max_result_chars: int = 256 * 1024
    max_calls: int = 64

    def __post_init__(self) -> None:
        for name in ("max_request_chars", "max_result_chars", "max_calls"):
            if getattr(self, name) < 1:
                raise ValueError(f"ToolCallLimits.{name} must be at least 1")


@dataclass(frozen=True)
class CodeRequest:
    """What the approval hook sees of an ``execute_code`` call: the code, before it runs."""

    code: str


@dataclass(frozen=True)
class ToolRequest:
    """What the approval hook sees of a ``call_tool`` from the code: which tool, with what.

    Attributes:
        name: one of the agent's tools.
        arguments: a JSON object whose keys the tool declares.
    """

    name: str
    arguments: Mapping[str, Any] = field(hash=False)


class HostTool(Protocol):
    """A tool the kernel's code may call: checked before approval, run after it."""

    def check(self, arguments: Mapping[str, Any]) -> str | None:
        """Why these arguments cannot be the tool's (None: they can)."""

    async def run(self, arguments: Mapping[str, Any]) -> object:
        """The tool's result; an exception is the call's failure, sent to the code."""


class ToolGate:
    """Answers the kernel's tool calls during one ``execute_code`` call.

    ``answer`` is the session's ``InputAnswerer``: a prompt without ``PREFIX``
    is not a tool call (None: the code's own ``input()`` gets end of file).
    Every refusal is a reply, so the code raises it and nothing runs.

    Args:
        tools: the agent's tools by name; nothing else can be called.
        approve: the approval hook, asked of each call that reads well.
        limits: the sizes and count answered.
    """

    def __init__(
        self,
        tools: Mapping[str, HostTool],
        approve: Callable[[ToolRequest], Awaitable[Approval]],
        limits: ToolCallLimits,
    ) -> None:
        self._tools = dict(tools)
        self._approve = approve
        self._limits = limits
        self.calls: list[ToolRequest] = []  # each call run, in order

    async def answer(self, prompt: str) -> str | None:
        """The reply to one input request, or None when it is not a tool call."""
        if not prompt.startswith(PREFIX):
            return None
        reply = await self._reply(prompt[len(PREFIX) :])
        # jsonable made the result JSON values, and every error is a str.
        encoded = json.dumps(reply)
        cap = self._limits.max_result_chars
        if len(encoded) > cap:
            encoded = json.dumps(
                _refused(
                    f"the tool's result was {len(encoded):,} characters as JSON, over the "
                    f"cap of {cap:,}; ask for less (a summary, a slice)"
                )
            )
        return encoded

    async def _reply(self, body: str) -> dict[str, Any]:
        limits = self._limits
        if len(self.calls) >= limits.max_calls:
            return _refused(
                f"more than {limits.max_calls} tool calls in one execute_code call; "
                "split the work over several"
            )
        if len(body) > limits.max_request_chars:
            return _refused(
                f"a tool call of {len(body):,} characters, over the cap of "
                f"{limits.max_request_chars:,}; pass less"
            )
        request = self._read(body)
        if isinstance(request, str):
            return _refused(request)
        try:
            approval = await self._approve(request)
        except Exception as exc:  # fail closed, and say why
            return _refused(f"the approval function failed ({type(exc).__name__}: {exc})")
        if not approval.approved:
            return _refused(refusal_text(approval, f"The call of {request.name}"))
        self.calls.append(request)
        try:
            result = await self._tools[request.name].run(request.arguments)
        except Exception as exc:
            return _refused(f"{request.name} failed: {type(exc).__name__}: {exc}")
        return {"ok": True, "result": jsonable(result)}

    def _read(self, body: str) -> ToolRequest | str:
        """The request, or why it is not one that may be approved."""
        try:
            data = json.loads(body)
        except (ValueError, RecursionError):
            return "a tool call that is not JSON; use call_tool(name, **arguments)"
        if not isinstance(data, dict) or set(data) != {"name", "arguments"}:
            return "a tool call must be a JSON object of name and arguments"
        name, arguments = data["name"], data["arguments"]
        if not isinstance(name, str) or name not in self._tools:
            known = ", ".join(sorted(self._tools)) or "none"
            return f"no tool named {str(name)[:100]!r} was given to this agent (its tools: {known})"
        if not isinstance(arguments, dict):
            return f"the arguments of {name} must be a JSON object (keyword arguments)"
        why = self._tools[name].check(arguments)
        if why is not None:
            return f"{name}: {why}"
        return ToolRequest(name, arguments)


def jsonable(value: object) -> object:
    """A tool's result as JSON values: as it is, a model's dump, or its text."""
    if _dumps(value) is not None:
        return value
    dump = getattr(value, "model_dump", None)  # a pydantic model
    if callable(dump):
        try:
            dumped = dump(mode="json")
        except Exception:
            dumped = None
        if _dumps(dumped) is not None:
            return dumped
    return str(value)


def _dumps(value: object) -> str | None:
    try:
        return json.dumps(value, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return None


def _refused(error: str) -> dict[str, Any]:
    return {"ok": False, "error": error}
