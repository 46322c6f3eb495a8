"""A code executor for AG2's classic framework (``autogen.coding``: the ``autogen`` package).

Follows AG2's ``CodeExecutor`` protocol, so an agent takes it as it is::

    from kernelexec.integrations.ag2 import KernelexecCodeExecutor

    executor = KernelexecCodeExecutor(output_dir="coding")
    agent = ConversableAgent("runner", llm_config=False,
                             code_execution_config={"executor": executor})

Unlike AG2's ``JupyterCodeExecutor`` it needs no Jupyter server: the kernel
is kernelexec's own, with ``output_dir`` as its cwd. A ``bash``/``sh`` block
runs as shell in the same kernel; a timeout interrupts the kernel and keeps its
state; saved outputs are named by the lines AG2 prints, ``Image data saved to
PATH`` and ``HTML data saved to PATH``. Works inside a running event loop too.

Needs the ``ag2-classic`` extra (the ``autogen`` package): ``pip install -e
'.[ag2-classic]'`` in a clone, or the wheel with ``[ag2-classic]``; without it,
importing this module raises a ``ModuleNotFoundError`` saying so (and, with
AG2 1.x installed, that its agents take ``ag2_code``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from ._ag2_lines import CLASSIC, ag2_missing, warn_if_two_owners

try:
    from autogen.coding.base import CodeBlock, CodeExtractor, IPythonCodeResult
    from autogen.coding.markdown_code_extractor import MarkdownCodeExtractor
except ImportError as exc:
    raise ag2_missing(__name__, CLASSIC, exc) from exc

from .._session._sync import Session, _call
from ._approval import Approval, Verdict, read_verdict, refusal_text
from ._blocks import Combined, combine, read_blocks, refused
from ._executor import SessionExecutor

__all__ = ["ApprovalFunc", "KernelexecCodeExecutor"]

warn_if_two_owners()

ApprovalFunc = Callable[[list[CodeBlock]], Verdict]
"""Sees a message's blocks before any runs; returns a bool or an ``Approval``."""


class KernelexecCodeExecutor(SessionExecutor[Session]):
    """Runs code blocks statefully in a kernelexec session (one Jupyter kernel).

    Args:
        kernel_name: an installed kernelspec, "python3" by default.
        timeout: seconds per code block; on expiry the kernel is interrupted,
            its state kept, and the result says so with exit code 124.
        output_dir: the kernel's cwd, where saved outputs (``outputs/``) and
            the transcript notebook go; it must exist. None makes a temp dir.
        approval_func: called with each message's blocks before any runs; a
            False (or ``Approval(False, reason)``) answer runs nothing and
            makes the refusal the result.

    Raises:
        ValueError: as in AG2's executors, at once: timeout is below 1 second,
            the kernel is not installed, or output_dir does not exist.
    """

    _session_class = Session
    _approval_func: ApprovalFunc | None

    def __init__(
        self,
        kernel_name: str = "python3",
        timeout: float = 60,
        output_dir: str | Path | None = None,
        *,
        approval_func: ApprovalFunc | None = None,
    ) -> None:
        self._setup(kernel_name, timeout, output_dir, approval_func, create_output_dir=False)

    def __enter__(self) -> KernelexecCodeExecutor:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def code_extractor(self) -> CodeExtractor:
        """AG2's Markdown extractor: fenced blocks, the language inferred when unnamed."""
        return MarkdownCodeExtractor()

    def execute_code_blocks(self, code_blocks: list[CodeBlock]) -> IPythonCodeResult:
        """Runs the blocks in order in one kernel, stopping at the first that fails.

        Blocks that are not code (json, text, output, ...) are skipped, and
        the output says so, as ``run_markdown`` does. The kernel starts on the
        first call (and again after ``stop``). When this returns, every file it
        writes (outputs, transcript) is on disk.
        """
        approval = self._ask_approval(code_blocks)
        if not approval.approved:
            return _result(refused(refusal_text(approval)))
        if self._session.closed:
            self._session = self._new_session(self.output_dir)
        blocks = read_blocks((block.language, block.code) for block in code_blocks)
        return _result(combine(_call(self._run_blocks(blocks)), self.output_dir))

    def restart(self) -> None:
        """A fresh kernel: every variable and import is gone, files stay."""
        if self._session.closed:
            self._session = self._new_session(self.output_dir)
            self._session.start()
        else:
            self._session.restart()

    def stop(self) -> None:
        """Shuts the kernel down; files and transcript stay."""
        self._session.close()

    def _ask_approval(self, code_blocks: list[CodeBlock]) -> Approval:
        if self._approval_func is None:
            return Approval(approved=True)
        return read_verdict(self._approval_func(list(code_blocks)))


def _result(combined: Combined) -> IPythonCodeResult:
    return IPythonCodeResult(
        exit_code=combined.exit_code,
        output=combined.output,
        output_files=[str(path) for path in combined.output_files],
    )
