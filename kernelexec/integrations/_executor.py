"""What the AutoGen and AG2 executors share: their arguments, their session and its files."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Generic, TypeVar

from jupyter_client.kernelspec import KernelSpecManager

from .._execution._models import ExecutionResult
from .._markdown._blocks import BlockResult, CodeBlock, Execute, run_blocks
from .._session._async import AsyncSession
from .._session._sync import Session
from ._blocks import prepare

__all__ = ["SessionExecutor", "check_kernel_name"]

S = TypeVar("S", Session, AsyncSession)

# The kernel kernelexec launches itself, through its boot script: always there.
_OWN_KERNEL = "python3"


def check_kernel_name(kernel_name: str) -> None:
    """Refuses a kernel that is not installed, at once rather than at the first execution.

    Raises:
        ValueError: no kernelspec has that name (AG2's executors raise the same).
    """
    if kernel_name == _OWN_KERNEL:
        return
    installed = KernelSpecManager().find_kernel_specs()
    if kernel_name not in installed:
        raise ValueError(
            f"Kernel {kernel_name} is not installed. Installed kernels: "
            f"{', '.join(sorted(installed)) or 'none'} (see `jupyter kernelspec list`); "
            f"or leave kernel_name at {_OWN_KERNEL!r}."
        )


class SessionExecutor(Generic[S]):
    """One kernelexec session behind a framework's code executor.

    ``_session_class`` is ``Session`` for a synchronous framework (AG2) and
    ``AsyncSession`` for an asynchronous one (AutoGen). ``_setup`` rather than
    ``__init__``, so the frameworks' own base classes keep their constructors.
    """

    _session_class: type[S]
    _session: S
    _approval_func: Any

    def _setup(
        self,
        kernel_name: str,
        timeout: float,
        output_dir: str | Path | None,
        approval_func: Any,
        *,
        create_output_dir: bool,
    ) -> None:
        """Checks the arguments as the framework's own executor does, then makes the session.

        Args:
            create_output_dir: make a missing ``output_dir`` (AutoGen does) rather
                than refuse it (AG2 does).

        Raises:
            ValueError: timeout below 1 s, a kernel that is not installed, or
                (unless ``create_output_dir``) an ``output_dir`` that does not exist.
        """
        if timeout < 1:
            raise ValueError("Timeout must be greater than or equal to 1.")
        check_kernel_name(kernel_name)
        if output_dir is not None and not create_output_dir and not Path(output_dir).is_dir():
            what = "is not a directory" if Path(output_dir).exists() else "does not exist"
            raise ValueError(f"Output directory {output_dir} {what}.")
        self._kernel_name = kernel_name
        self._timeout = timeout
        self._approval_func = approval_func
        self._session = self._new_session(output_dir)
        # As given, as the frameworks keep it; ``output_dir`` is the absolute path.
        self._output_dir = self._session.work_dir if output_dir is None else Path(output_dir)

    @property
    def output_dir(self) -> Path:
        """The kernel's cwd, absolute; saved outputs are under its ``outputs/``."""
        return self._session.work_dir

    @property
    def notebook_path(self) -> Path:
        """The transcript of every execution, a notebook in ``output_dir``."""
        return self._session.notebook_path

    def _new_session(self, output_dir: str | Path | None) -> S:
        return self._session_class(output_dir, kernel_name=self._kernel_name, timeout=self._timeout)

    async def _run_blocks(
        self, blocks: list[CodeBlock], execute: Execute | None = None
    ) -> list[BlockResult]:
        """Each block's outcome, as ``run_markdown`` has them: blocks that are not code are
        skipped, and the run stops after the first failure.

        Args:
            execute: runs one block; by default in the session, ``prepare``-d.
        """
        session = self._session if isinstance(self._session, AsyncSession) else self._session._async

        async def in_session(block: CodeBlock) -> ExecutionResult:
            language = block.runs_as or block.language
            # The session's execute returns once the transcript holds the cell,
            # so a caller may delete output_dir the moment this returns.
            return await session.execute(prepare(block.code, language), language=language)

        return [outcome async for outcome in run_blocks(blocks, execute or in_session)]
