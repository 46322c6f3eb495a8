"""What the AG2 code environments share: one session behind AG2's ``CodeEnvironment``.

AG2 1.x (``ag2.tools.code``) and the classic package's beta line
(``autogen.beta.tools.code``) declare the same protocol under two import names,
each with its own ``CodeRunResult``. The environment is written once, here,
and imports neither: ``kernelexec.integrations.ag2_code`` and
``kernelexec.integrations.ag2_beta`` each subclass it, making their
framework's result. ``HeldSession``, a caller's session or one made and
closed, is also the Agent Framework provider's
(``kernelexec.integrations.agent_framework``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from types import TracebackType
from typing import Any, Generic, Literal, TypeVar

from .._session._async import AsyncSession
from ._blocks import combine, prepare

__all__ = ["HeldSession", "KernelLanguage", "SessionCodeEnvironment"]

R = TypeVar("R")
E = TypeVar("E", bound="SessionCodeEnvironment[Any]")
H = TypeVar("H", bound="HeldSession")

KernelLanguage = Literal["python", "bash"]
"""The languages a kernel runs; both AG2 lines' ``CodeLanguage`` include them."""

_LANGUAGES: tuple[KernelLanguage, ...] = ("python", "bash")


class HeldSession:
    """A code tool's session: the caller's, left open, or one the tool made and closes.

    ``_hold`` rather than ``__init__``, so the frameworks' own base classes
    keep their constructors.
    """

    _session: AsyncSession
    _owns_session: bool

    def _hold(
        self, session: AsyncSession | None, output_dir: str | Path | None, timeout: float
    ) -> None:
        """Takes the caller's session, or makes one from ``output_dir`` and ``timeout``.

        Raises:
            ValueError: both a session and the ``output_dir`` or ``timeout`` that make one.
        """
        if session is not None and (output_dir is not None or timeout != 60):
            raise ValueError(
                f"give {type(self).__name__} a session or the output_dir and timeout "
                "that make one, not both"
            )
        self._owns_session = session is None
        self._session = session or AsyncSession(output_dir, timeout=timeout)

    @property
    def session(self) -> AsyncSession:
        """The session whose kernel runs the calls."""
        return self._session

    @property
    def output_dir(self) -> Path:
        """The kernel's cwd, absolute; saved outputs are under its ``outputs/``."""
        return self._session.work_dir

    async def aclose(self) -> None:
        """Shuts the kernel down if the session was made here; files stay."""
        if self._owns_session:
            await self._session.close()

    async def __aenter__(self: H) -> H:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


class SessionCodeEnvironment(HeldSession, ABC, Generic[R]):
    """AG2's ``CodeEnvironment`` protocol over one kernelexec session.

    A subclass makes its framework's result (``_result``); the arguments are
    documented on the public classes, ``ag2_code.KernelexecCodeEnvironment``
    and ``ag2_beta.KernelexecCodeEnvironment``.
    """

    def __init__(
        self,
        session: AsyncSession | None = None,
        *,
        output_dir: str | Path | None = None,
        timeout: float = 60,
    ) -> None:
        self._hold(session, output_dir, timeout)

    @abstractmethod
    def _result(self, output: str, exit_code: int) -> R:
        """The framework's ``CodeRunResult``."""

    @property
    def supported_languages(self) -> tuple[KernelLanguage, ...]:
        """Python, and bash run as one script in the same kernel and cwd."""
        return _LANGUAGES

    async def run(self, code: str, language: str, *, context: object = None) -> R:
        """Runs ``code`` in the kernel; the kernel starts on the first call.

        Args:
            code: the source the model wrote.
            language: ``python`` or ``bash``; any other runs nothing.
            context: AG2's conversation context, unused: the session holds
                everything a call needs.

        Returns:
            The output as the executors word it (saved files named by
            absolute path, a timeout ending with ``Timeout``) and the exit
            code: 0, 124 after a timeout, else 1. A language other than
            Python or bash runs nothing and is exit code 1.
        """
        if language not in _LANGUAGES:
            return self._result(
                f"Unsupported language {language!r}: use one of "
                f"{', '.join(_LANGUAGES)}. Nothing was run.",
                1,
            )
        result = await self._session.execute(prepare(code, language), language=language)
        combined = combine([result], self._session.work_dir)
        return self._result(combined.output, combined.exit_code)

    def __deepcopy__(self: E, memo: dict[int, object]) -> E:
        # AG2's Agent deep-copies every tool it is given. A copy would be a
        # second session that starts its own kernel on the first call and that
        # nobody closes: the agent's calls must reach this one, so a copy is itself.
        return self
