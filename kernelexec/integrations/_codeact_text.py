"""What a CodeAct model is told: ``execute_code``'s description and the run's instructions.

Written from each tool's name, description and JSON schema, so it imports no
framework; ``kernelexec.integrations.agent_framework`` passes its function tools.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Protocol

__all__ = ["DescribedTool", "describe_execute_code", "instructions"]

_KERNEL = (
    "Run Python in a persistent Jupyter kernel on a Linux machine. Variables, imports and "
    "files are kept between calls, so build on earlier results instead of repeating them. "
    "What the code prints and the value of its last expression come back; charts and other "
    "rich outputs are saved as files, named in the output. Lines starting with '!' run as "
    "shell commands (`!pip install ...` too)."
)

_CALL_TOOL = (
    "Inside the code, `call_tool(name, **kwargs)` runs one of these tools on the host and "
    "returns its result as JSON values (dicts, lists, strings, numbers). Keyword arguments "
    "only, as JSON values. A refused or failed call raises `call_tool.Error` with the "
    "reason; nothing else can be called."
)


class DescribedTool(Protocol):
    """What the text needs of a tool: the Agent Framework's ``FunctionTool`` has it."""

    @property
    def name(self) -> str: ...

    @property
    def description(self) -> str: ...

    def parameters(self) -> dict[str, Any]: ...


def describe_execute_code(tools: Sequence[DescribedTool]) -> str:
    """``execute_code``'s description: the kernel, and the tools its code may call."""
    if not tools:
        return _KERNEL
    return f"{_KERNEL}\n\n{_CALL_TOOL}\n\nTools:\n" + "\n".join(_summary(t) for t in tools)


def instructions(has_tools: bool) -> str:
    """What the run's instructions add for ``execute_code``."""
    text = (
        "You can run Python with the execute_code tool, in a kernel that keeps its state "
        "between calls. Print what you need to see."
    )
    if has_tools:
        text += (
            " The tools listed in execute_code's description are called from inside that "
            "code with call_tool(name, **kwargs); prefer one execute_code call that combines "
            "several calls with Python over many small ones."
        )
    return text


def _summary(tool: DescribedTool) -> str:
    """One tool as a line, and a line per parameter: name, JSON type, required, description."""
    lines = [f"- `{tool.name}`: {(tool.description or '').strip() or 'no description'}"]
    schema = tool.parameters()
    required = set(schema.get("required") or [])
    for name, spec in (schema.get("properties") or {}).items():
        kind = spec.get("type", "any") if isinstance(spec, dict) else "any"
        line = f"  - `{name}` ({kind}, {'required' if name in required else 'optional'})"
        if isinstance(spec, dict) and spec.get("description"):
            line += f": {spec['description']}"
        if isinstance(spec, dict) and "default" in spec:
            line += f" Default: {json.dumps(spec['default'])}."
        lines.append(line)
    if len(lines) == 1:
        lines.append("  - no parameters")
    return "\n".join(lines)
