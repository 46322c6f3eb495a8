"""A drop-in for AutoGen's ``JupyterCodeExecutor`` (autogen-core/autogen-ext 0.7).

Swap the import and keep the rest::

    from kernelexec.integrations.autogen import KernelexecCodeExecutor

    async with KernelexecCodeExecutor(output_dir="coding") as executor:
        agent = CodeExecutorAgent("runner", code_executor=executor)

Beyond AutoGen's own: a ``bash``/``sh`` block runs as shell (in the same
kernel and cwd); a cancelled token or a timeout interrupts the kernel, whose
state is kept; PNG, JPEG, GIF, SVG, PDF and HTML outputs are saved as files; the
kernel's cwd is ``output_dir``, which also holds the transcript notebook.

Needs the ``autogen`` extra: ``pip install -e '.[autogen]'`` in a clone, or the
wheel with ``[autogen]``; without it, importing this module raises a
``ModuleNotFoundError`` saying so.
"""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .._extras import missing_extra

try:
    from autogen_core import CancellationToken, Component
    from autogen_core.code_executor import CodeBlock, CodeExecutor, CodeResult
    from pydantic import BaseModel
    from typing_extensions import Self
except ImportError as exc:
    raise missing_extra(__name__, "autogen", exc) from exc

from .._execution._models import ExecutionResult
from .._markdown._blocks import CodeBlock as Block
from .._session._async import AsyncSession
from ._approval import Verdict, ask, refusal_text
from ._blocks import Combined, combine, prepare, read_blocks, refused
from ._executor import SessionExecutor

__all__ = [
    "ApprovalFunc",
    "KernelexecCodeExecutor",
    "KernelexecCodeExecutorConfig",
    "KernelexecCodeResult",
]

ApprovalFunc = Callable[[list[CodeBlock]], "Verdict | Awaitable[Verdict]"]
"""Sees a message's blocks before any runs; returns (or awaits to) a bool or an ``Approval``."""


if TYPE_CHECKING:
    from autogen_ext.code_executors.jupyter import JupyterCodeResult as _ResultBase
else:
    try:
        from autogen_ext.code_executors.jupyter import JupyterCodeResult as _ResultBase
    # autogen-ext raises RuntimeError, not ImportError, when its docker extra is missing.
    except (ImportError, RuntimeError):

        @dataclass
        class _ResultBase(CodeResult):
            output_files: list[Path]


@dataclass(eq=False)
class KernelexecCodeResult(_ResultBase):
    """``JupyterCodeResult``'s shape: ``exit_code``, ``output`` and ``output_files``.

    With autogen-ext installed it is a ``JupyterCodeResult``, and equals one
    with the same fields, so code that checks or compares the result type
    keeps working. ``exit_code`` is 0 on success, 124 after a timeout and 1 for
    any other failure, a refusal by the approval function included.
    """

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, _ResultBase):
            return NotImplemented
        return (self.exit_code, self.output, self.output_files) == (
            other.exit_code,
            other.output,
            other.output_files,
        )

    __hash__ = None  # type: ignore[assignment]  # mutable, like the dataclass it extends


class KernelexecCodeExecutorConfig(BaseModel):
    """What ``dump_component`` saves of a ``KernelexecCodeExecutor``."""

    kernel_name: str = "python3"
    timeout: float = 60
    output_dir: str | None = None


class KernelexecCodeExecutor(
    SessionExecutor[AsyncSession], CodeExecutor, Component[KernelexecCodeExecutorConfig]
):
    """Runs code blocks statefully in a kernelexec session (one Jupyter kernel).

    Args:
        kernel_name: an installed kernelspec, "python3" by default.
        timeout: seconds per code block; on expiry the kernel is interrupted,
            its state kept, and the result says so with exit code 124.
        output_dir: the kernel's cwd, where saved outputs (``outputs/``) and
            the transcript notebook go; None makes a temp dir.
        approval_func: called with each message's blocks before any runs,
            sync or async; a False (or ``Approval(False, reason)``) answer runs
            nothing and makes the refusal the result. It is not serialized.

    Raises:
        ValueError: as in ``JupyterCodeExecutor``, at once: timeout is below 1
            second; also when the kernel is not installed.
    """

    component_config_schema = KernelexecCodeExecutorConfig
    component_provider_override = "kernelexec.integrations.autogen.KernelexecCodeExecutor"
    _session_class = AsyncSession
    _approval_func: ApprovalFunc | None

    def __init__(
        self,
        kernel_name: str = "python3",
        timeout: float = 60,
        output_dir: str | Path | None = None,
        *,
        approval_func: ApprovalFunc | None = None,
    ) -> None:
        if output_dir is not None and Path(output_dir) == Path("."):
            # JupyterCodeExecutor's warning, so code that filters it keeps working.
            warnings.warn(
                "Using the current directory as output_dir is deprecated",
                DeprecationWarning,
                stacklevel=2,
            )
        self._setup(kernel_name, timeout, output_dir, approval_func, create_output_dir=True)

    @property
    def timeout(self) -> float:
        return self._timeout

    async def start(self) -> None:
        """Starts the kernel; ``execute_code_blocks`` starts it too when needed."""
        if self._session.closed:
            self._session = self._new_session(self.output_dir)
        await self._session.start()

    async def stop(self) -> None:
        """Shuts the kernel down; files and transcript stay. ``start`` makes a new one."""
        await self._session.close()

    async def restart(self) -> None:
        """A fresh kernel: every variable and import is gone, files stay."""
        if self._session.closed:
            await self.start()
        else:
            await self._session.restart()

    async def execute_code_blocks(
        self, code_blocks: list[CodeBlock], cancellation_token: CancellationToken
    ) -> KernelexecCodeResult:
        """Runs the blocks in order in one kernel, stopping at the first that fails.

        Args:
            code_blocks: the blocks; ``language`` picks Python or shell; a
                block that is not code (json, text, output, ...) is skipped
                and the output says so, as ``run_markdown`` does; any other
                language fails without running.
            cancellation_token: cancelling it interrupts the running block.

        Returns:
            The result; every file the call writes (outputs, transcript) is on
            disk by then.

        Raises:
            asyncio.CancelledError: the token was cancelled (the kernel was
                interrupted, its state kept).
        """
        approval = await ask(self._approval_func, list(code_blocks))
        if not approval.approved:
            return _result(refused(refusal_text(approval)))
        if self._session.closed:
            await self.start()
        blocks = read_blocks((block.language, block.code) for block in code_blocks)

        async def execute(block: Block) -> ExecutionResult:
            return await self._run_block(block, cancellation_token)

        return _result(combine(await self._run_blocks(blocks, execute), self.output_dir))

    async def _run_block(
        self, block: Block, cancellation_token: CancellationToken
    ) -> ExecutionResult:
        language = block.runs_as or block.language
        # The session's execute returns once the transcript holds the cell,
        # so a caller may delete output_dir the moment this returns.
        task = asyncio.ensure_future(
            self._session.execute(prepare(block.code, language), language=language)
        )
        # Cancelling the task makes the session interrupt the kernel and record
        # the cancelled cell before CancelledError reaches the caller.
        cancellation_token.link_future(task)
        return await task

    def _to_config(self) -> KernelexecCodeExecutorConfig:
        return KernelexecCodeExecutorConfig(
            kernel_name=self._kernel_name, timeout=self._timeout, output_dir=str(self.output_dir)
        )

    @classmethod
    def _from_config(cls, config: KernelexecCodeExecutorConfig) -> Self:
        return cls(
            kernel_name=config.kernel_name, timeout=config.timeout, output_dir=config.output_dir
        )


def _result(combined: Combined) -> KernelexecCodeResult:
    return KernelexecCodeResult(
        exit_code=combined.exit_code, output=combined.output, output_files=combined.output_files
    )
