"""What the AutoGen and AG2 executors share: their arguments, their session and its files."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Generic, TypeVar

from .._session import AsyncSession
from .._sync import Session

__all__ = ["SessionExecutor"]

S = TypeVar("S", Session, AsyncSession)


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
    ) -> None:
        if timeout < 1:
            raise ValueError("Timeout must be greater than or equal to 1.")
        self._kernel_name = kernel_name
        self._timeout = timeout
        self._approval_func = approval_func
        self._session = self._new_session(output_dir)
        self._output_dir = self._session.work_dir

    @property
    def output_dir(self) -> Path:
        """The kernel's cwd; saved outputs are under its ``outputs/``."""
        return self._output_dir

    @property
    def notebook_path(self) -> Path:
        """The transcript of every execution, a notebook in ``output_dir``."""
        return self._session.notebook_path

    def _new_session(self, output_dir: str | Path | None) -> S:
        return self._session_class(output_dir, kernel_name=self._kernel_name, timeout=self._timeout)
