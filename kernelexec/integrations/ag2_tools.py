"""A stateful Python tool for AG2's classic function-calling agents (the ``autogen`` package).

The model calls ``run_python(code)``; the code runs in one Jupyter kernel that
keeps its variables and imports from call to call::

    from autogen import ConversableAgent
    from kernelexec.integrations.ag2_tools import KernelexecPythonTool

    with KernelexecPythonTool(timeout=60, output_dir="coding") as tool:
        tool.register_for_llm(assistant)      # the agent that proposes the call
        tool.register_for_execution(runner)   # the agent that runs it
        runner.initiate_chat(assistant, message="Plot the squares of 0..5")

The kernel is a :class:`kernelexec.integrations.ag2.KernelexecCodeExecutor`'s,
so everything it does holds here: the cwd is ``output_dir``, a chart or HTML
output is saved and named (``Image data saved to PATH``), a timeout interrupts
the kernel and keeps its state, and an ``approval_func`` may refuse the code.

AG2 0.14 removed its own ``PythonCodeExecutionTool`` (and nothing in it calls
the ``autogen.environments`` classes any more); for its ``autogen.beta``
agents, see :mod:`kernelexec.integrations.ag2_beta`, and for AG2 1.x's,
:mod:`kernelexec.integrations.ag2_code`.

Needs the ``ag2-classic`` extra (the ``autogen`` package): ``pip install -e
'.[ag2-classic]'`` in a clone, or the wheel with ``[ag2-classic]``; without it,
importing this module raises a ``ModuleNotFoundError`` saying so (and, with
AG2 1.x installed, that its agents take ``ag2_code``).
"""

from __future__ import annotations

from pathlib import Path
from types import TracebackType
from typing import Annotated

from ._ag2_lines import CLASSIC, ag2_missing

try:
    from autogen.coding.base import CodeBlock
    from autogen.tools import Tool
except ImportError as exc:
    raise ag2_missing(__name__, CLASSIC, exc) from exc

from .ag2 import ApprovalFunc, KernelexecCodeExecutor

__all__ = ["KernelexecPythonTool"]

_DESCRIPTION = (
    "Run Python code in a persistent Jupyter kernel and return its output. Variables, "
    "imports and files are kept between calls, so build on earlier results instead of "
    "repeating them. Lines starting with '!' run as shell commands. Charts and other rich "
    "outputs are saved as files, named in the output."
)


class KernelexecPythonTool(Tool):
    """``run_python(code)``, an AG2 tool whose calls share one kernel.

    Register it as any AG2 tool: ``register_for_llm`` / ``register_for_execution``
    (or ``register_tool`` for one agent that does both), or pass it in an
    agent's ``functions=[...]``.

    Args:
        executor: the executor whose kernel runs the code; None makes one
            from ``kernel_name``, ``timeout``, ``output_dir`` and
            ``approval_func``, which ``close`` then shuts down.
        kernel_name: an installed kernelspec, "python3" by default.
        timeout: seconds per call; on expiry the kernel is interrupted, its
            state kept, and the output ends with ``Timeout``.
        output_dir: the kernel's cwd (it must exist); None makes a temp dir.
        approval_func: sees each call's code (as one ``CodeBlock``) before it
            runs; a False answer runs nothing and makes the refusal the output.
        name: the function's name as the model sees it.
        description: what the model is told the function does.

    Raises:
        ValueError: as ``KernelexecCodeExecutor``: a timeout below 1 s, a
            kernel that is not installed or an ``output_dir`` that does not
            exist; or both ``executor`` and the arguments that make one.
    """

    def __init__(
        self,
        executor: KernelexecCodeExecutor | None = None,
        *,
        kernel_name: str = "python3",
        timeout: float = 60,
        output_dir: str | Path | None = None,
        approval_func: ApprovalFunc | None = None,
        name: str = "run_python",
        description: str = _DESCRIPTION,
    ) -> None:
        made_here = executor is None
        if executor is None:
            executor = KernelexecCodeExecutor(
                kernel_name, timeout, output_dir, approval_func=approval_func
            )
        elif (kernel_name, timeout, output_dir, approval_func) != ("python3", 60, None, None):
            raise ValueError(
                "give KernelexecPythonTool an executor or the arguments that make one "
                "(kernel_name, timeout, output_dir, approval_func), not both"
            )
        self._executor = executor
        self._owns_executor = made_here
        super().__init__(name=name, description=description, func_or_tool=self._run_python)

    @property
    def executor(self) -> KernelexecCodeExecutor:
        """The executor whose kernel runs the calls (its ``output_dir``, ``restart``, ...)."""
        return self._executor

    @property
    def output_dir(self) -> Path:
        """The kernel's cwd, absolute; saved outputs are under its ``outputs/``."""
        return self._executor.output_dir

    def close(self) -> None:
        """Shuts the kernel down if this tool made it; files and transcript stay."""
        if self._owns_executor:
            self._executor.stop()

    def __enter__(self) -> KernelexecPythonTool:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _run_python(
        self, code: Annotated[str, "Python code to run; the kernel keeps its state between calls"]
    ) -> str:
        result = self._executor.execute_code_blocks([CodeBlock(code=code, language="python")])
        # The words AG2's own code-execution reply uses, so a model reads the
        # outcome the same way whichever door the code came through.
        status = "execution succeeded" if result.exit_code == 0 else "execution failed"
        return f"exitcode: {result.exit_code} ({status})\nCode output: {result.output}"
