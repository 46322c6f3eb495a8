"""What the AG2 code environments share: one session behind AG2's ``CodeEnvironment``.

AG2 1.x (``ag2.tools.code``) and the classic package's beta line
(``autogen.beta.tools.code``) declare the same protocol under two import names,
each with its own ``CodeRunResult``. The environment is written once, here,
and imports neither: ``kernelexec.integrations.ag2_code`` and
``kernelexec.integrations.ag2_beta`` each subclass it, making their
framework's result. ``given_or_made`` is also the Agent Framework tool's
(``kernelexec.integrations.agent_framework``): a caller's session, or one made.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from types import TracebackType
from typing import Any, Generic, Literal, TypeVar

from .._session._async import AsyncSession
from ._blocks import combine, prepare

__all__ = ["KernelLanguage", "SessionCodeEnvironment", "given_or_made"]

R = TypeVar("R")
E = TypeVar("E", bound="SessionCodeEnvironment[Any]")

KernelLanguage = Literal["python", "bash"]
"""The languages a kernel runs; both AG2 lines' ``CodeLanguage`` include them."""

_LANGUAGES: tuple[KernelLanguage, ...] = ("python", "bash")


def given_or_made(
    owner: object, session: AsyncSession | None, output_dir: str | Path | None, timeout: float
) -> tuple[AsyncSession, bool]:
    """The session a code tool runs in, and whether the tool made it (and so closes it).

    Raises:
        ValueError: both a session and the ``output_dir`` or ``timeout`` that make one.
    """
    if session is not None and (output_dir is not None or timeout != 60):
        raise ValueError(
            f"give {type(owner).__name__} a session or the output_dir and timeout "
            "that make one, not both"
        )
    if session is not None:
        return session, False
    return AsyncSession(output_dir, timeout=timeout), True


class SessionCodeEnvironment(ABC, Generic[R]):
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
        self._session, self._owns_session = given_or_made(self, session, output_dir, timeout)

    @abstractmethod
    def _result(self, output: str, exit_code: int) -> R:
        """The framework's ``CodeRunResult``."""

    @property
    def session(self) -> AsyncSession:
        """The session whose kernel runs the calls."""
        return self._session

    @property
    def output_dir(self) -> Path:
        """The kernel's cwd, absolute; saved outputs are under its ``outputs/``."""
        return self._session.work_dir

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

    async def aclose(self) -> None:
        """Shuts the kernel down if this environment made the session; files stay."""
        if self._owns_session:
            await self._session.close()

    async def __aenter__(self: E) -> E:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
