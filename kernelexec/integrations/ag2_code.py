"""A stateful code environment for AG2 1.x agents (``ag2``, imported as ``ag2``).

AG2 1.x has no Jupyter executor: an agent runs code through ``SandboxCodeTool``
(``ag2.tools.code``), in whatever ``CodeEnvironment`` it is given. This is one
whose calls share a Jupyter kernel, so a variable or an import made in one
tool call is there in the next::

    from ag2 import Agent
    from ag2.tools.code import SandboxCodeTool
    from kernelexec.integrations.ag2_code import KernelexecCodeEnvironment

    async with KernelexecCodeEnvironment() as environment:
        agent = Agent("analyst", config=..., tools=[SandboxCodeTool(environment)])
        reply = await agent.ask("Plot the squares of 0..5")

Python and bash are accepted; a ``bash`` call runs as one script in the same
kernel and cwd. Saved charts are named in the output (``Image data saved to
PATH``); a timeout interrupts the kernel, keeps its state, and is exit code 124.

Needs the ``ag2`` extra (ag2 1.x): ``pip install -e '.[ag2]'`` in a clone, or
the wheel with ``[ag2]``; without it, importing this module raises a
``ModuleNotFoundError`` saying so, and which module fits the AG2 installed
instead. For the classic framework's ``autogen.beta`` agents (the ``autogen``
package), the same environment is :mod:`kernelexec.integrations.ag2_beta`.
"""

from __future__ import annotations

from ._ag2_lines import CURRENT, ag2_missing

try:
    from ag2.tools.code import CodeRunResult
except ImportError as exc:
    raise ag2_missing(__name__, CURRENT, exc) from exc

from ._code_environment import SessionCodeEnvironment

__all__ = ["KernelexecCodeEnvironment"]


class KernelexecCodeEnvironment(SessionCodeEnvironment[CodeRunResult]):
    """AG2 1.x's ``CodeEnvironment`` protocol over one kernelexec session.

    Args:
        session: the session to run code in, with whatever backend, limits
            or interpreter it was made with (a Docker one, say); the caller
            closes it. None makes a local one from ``output_dir`` and
            ``timeout``, which ``aclose`` then closes.
        output_dir: the kernel's cwd (None: a temp dir), where saved outputs
            (``outputs/``) and the transcript notebook go.
        timeout: seconds per call; on expiry the kernel is interrupted, its
            state kept, and the call is exit code 124.

    Raises:
        ValueError: both ``session`` and ``output_dir``/``timeout`` were given.
    """

    def _result(self, output: str, exit_code: int) -> CodeRunResult:
        return CodeRunResult(output=output, exit_code=exit_code)
