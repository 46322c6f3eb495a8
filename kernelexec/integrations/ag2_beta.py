"""A stateful code environment for ``autogen.beta`` agents (the ``autogen`` package, 0.14.x).

``autogen.beta`` is the line AG2 1.x grew from, shipped in AG2's classic
framework (the ``autogen`` package; ``ag2`` 0.14 before it). Its client-side
code tool is ``SandboxCodeTool``, which runs code in any ``CodeEnvironment``.
This is one whose calls share a Jupyter kernel, so a variable or an import
made in one tool call is there in the next::

    from autogen.beta import Agent
    from autogen.beta.tools import SandboxCodeTool
    from kernelexec.integrations.ag2_beta import KernelexecCodeEnvironment

    async with KernelexecCodeEnvironment() as environment:
        agent = Agent("analyst", config=..., tools=[SandboxCodeTool(environment)])
        reply = await agent.ask("Plot the squares of 0..5")

It is :mod:`kernelexec.integrations.ag2_code`'s environment, for AG2 1.x,
giving ``autogen.beta``'s result: Python and bash, saved charts named in the
output, a timeout that keeps the kernel's state (exit code 124).

Needs the ``ag2-classic`` extra: ``pip install -e '.[ag2-classic]'`` in a
clone, or the wheel with ``[ag2-classic]``; without it, importing this module
raises a ``ModuleNotFoundError`` saying so (and, with AG2 1.x installed, that
its module is ``ag2_code``).
"""

from __future__ import annotations

from ._ag2_lines import CLASSIC, ag2_missing, warn_if_two_owners

try:
    from autogen.beta.tools.code import CodeRunResult
except ImportError as exc:
    raise ag2_missing(__name__, CLASSIC, exc) from exc

from ._code_environment import SessionCodeEnvironment

__all__ = ["KernelexecCodeEnvironment"]

warn_if_two_owners()


class KernelexecCodeEnvironment(SessionCodeEnvironment[CodeRunResult]):
    """``autogen.beta``'s ``CodeEnvironment`` protocol over one kernelexec session.

    Takes the arguments of, and behaves as, AG2 1.x's
    :class:`kernelexec.integrations.ag2_code.KernelexecCodeEnvironment`; its
    ``run`` gives ``autogen.beta``'s ``CodeRunResult``.
    """

    def _result(self, output: str, exit_code: int) -> CodeRunResult:
        return CodeRunResult(output=output, exit_code=exit_code)
