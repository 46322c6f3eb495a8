"""``call_tool``: the kernel's side of a CodeAct agent's host tools.

``_kernelexec_call_tool_for``'s source is sent to the kernel as a cell by
``kernelexec.integrations.agent_framework``, followed by ``call_tool =
_kernelexec_call_tool_for(PREFIX, MAX_REQUEST_CHARS)`` and its ``del``: the user's
namespace gets ``call_tool`` and nothing else. So the annotations are strings
and there is no ``from __future__`` import here: IPython would keep such an
import in force for every later cell of the user's.

A call is one ``input()`` request whose prompt is the prefix and the call as
JSON; the host's reply is JSON. Nothing here is
trusted: the kernel's code may redefine this function or send any prompt it
likes, and the host checks every request as if it had (see
``kernelexec/integrations/_codeact.py``). This side only makes an honest
call's mistakes clear before anything is sent.
"""

from typing import Any


def _kernelexec_call_tool_for(prefix: str, max_request_chars: int) -> "Any":
    """The ``call_tool`` function, its constants closed over rather than global."""
    import builtins
    import json

    class ToolCallError(RuntimeError):
        """A host tool's call was refused, or the tool failed; the message says which."""

    def call_tool(name: str, /, **arguments: "Any") -> "Any":
        """Runs one of the agent's tools on the host and returns its result.

        Keyword arguments only, as JSON values (str, int, float, bool, None,
        lists and dicts of them); the result comes back as JSON values too.

        Raises:
            ToolCallError: the call was refused (an unknown tool, arguments
                the tool does not take, the approval function's no) or the
                tool failed; nothing else was run.
        """
        if not isinstance(name, str):
            raise TypeError(f"call_tool's first argument is the tool's name, not {name!r}")
        try:
            request = json.dumps({"name": name, "arguments": arguments}, allow_nan=False)
        except (TypeError, ValueError) as exc:
            what = f"call_tool({name!r}): the arguments must be JSON values ({exc})"
            raise TypeError(what) from None
        if len(request) > max_request_chars:
            raise ToolCallError(
                f"call_tool({name!r}): the arguments are {len(request):,} characters as "
                f"JSON, over the host's cap of {max_request_chars:,}; pass less"
            )
        try:
            reply = json.loads(builtins.input(prefix + request))
        except EOFError:
            raise ToolCallError(
                f"call_tool({name!r}): the host did not answer (a call too large to "
                "deliver, or code not run by the agent's execute_code); nothing was run"
            ) from None
        if not isinstance(reply, dict) or "ok" not in reply:
            raise ToolCallError(f"call_tool({name!r}): the host's reply was not understood")
        if not reply["ok"]:
            raise ToolCallError(str(reply.get("error", "refused")))
        return reply.get("result")

    call_tool.Error = ToolCallError  # type: ignore[attr-defined]  # to catch it by name
    return call_tool
