"""A stateful code environment for AG2's ``autogen.beta`` agents (``ag2`` 0.14).

AG2 0.14 removed ``autogen.tools.experimental.PythonCodeExecutionTool`` (its
deprecation pointed to ``autogen.beta``); the beta line's client-side code
tool is ``SandboxCodeTool``, which runs code in any ``CodeEnvironment``. This
is one whose calls share a Jupyter kernel, so a variable or an import made in
one tool call is there in the next::

    from autogen.beta import Agent
    from autogen.beta.tools import SandboxCodeTool
    from kernelexec.integrations.ag2_beta import KernelexecCodeEnvironment

    async with KernelexecCodeEnvironment() as environment:
        agent = Agent("analyst", config=..., tools=[SandboxCodeTool(environment)])
        reply = await agent.ask("Plot the squares of 0..5")

Python and bash are accepted; a ``bash`` call runs as one script in the same
kernel and cwd. Saved charts are named in the output (``Image data saved to
PATH``); a timeout interrupts the kernel, keeps its state, and is exit code 124.

Needs the ``ag2`` extra: ``pip install -e '.[ag2]'`` in a clone, or the
wheel with ``[ag2]``; without it, importing this module raises a
``ModuleNotFoundError`` saying so.
"""

from __future__ import annotations

from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from .._extras import missing_extra

try:
    from autogen.beta.tools.code import CodeLanguage, CodeRunResult
except ImportError as exc:
    raise missing_extra(__name__, "ag2", exc) from exc

from .._session._async import AsyncSession
from ._blocks import combine, prepare

if TYPE_CHECKING:
    from autogen.beta.context import ConversationContext

__all__ = ["KernelexecCodeEnvironment"]

_LANGUAGES: tuple[CodeLanguage, ...] = ("python", "bash")


class KernelexecCodeEnvironment:
    """AG2's ``CodeEnvironment`` protocol over one kernelexec session.

    Args:
        session: the session to run code in, with whatever backend, limits
            or interpreter it was made with (a Docker one, say); the caller
            closes it. None makes a local one from ``output_dir`` and
            ``timeout``, which ``aclose`` then closes.
        output_dir: the kernel's cwd (None: a temp dir), where saved outputs
            (``outputs/``) and the transcript notebook go.
        timeout: seconds per call.

    Raises:
        ValueError: both ``session`` and ``output_dir``/``timeout`` were given.
    """

    def __init__(
        self,
        session: AsyncSession | None = None,
        *,
        output_dir: str | Path | None = None,
        timeout: float = 60,
    ) -> None:
        if session is not None and (output_dir is not None or timeout != 60):
            raise ValueError(
                "give KernelexecCodeEnvironment a session or the output_dir and timeout "
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

    @property
    def supported_languages(self) -> tuple[CodeLanguage, ...]:
        """Python, and bash run as one script in the same kernel."""
        return _LANGUAGES

    async def run(
        self, code: str, language: CodeLanguage, *, context: ConversationContext | None = None
    ) -> CodeRunResult:
        """Runs ``code`` in the kernel; the kernel starts on the first call.

        Returns:
            The output as the executors word it (saved files named by
            absolute path, a timeout ending with ``Timeout``) and the exit
            code: 0, 124 after a timeout, else 1. A language other than
            Python or bash runs nothing and is exit code 1.
        """
        if language not in _LANGUAGES:
            return CodeRunResult(
                output=f"Unsupported language {language!r}: use one of "
                f"{', '.join(_LANGUAGES)}. Nothing was run.",
                exit_code=1,
            )
        result = await self._session.execute(prepare(code, language), language=language)
        combined = combine([result], self._session.work_dir)
        return CodeRunResult(output=combined.output, exit_code=combined.exit_code)

    def __deepcopy__(self, memo: dict[int, object]) -> KernelexecCodeEnvironment:
        # AG2's Agent deep-copies every tool it is given. A copy would be a
        # second session that starts its own kernel on the first call and that
        # nobody closes: the agent's calls must reach this one, so a copy is itself.
        return self

    async def aclose(self) -> None:
        """Shuts the kernel down if this environment made the session; files stay."""
        if self._owns_session:
            await self._session.close()

    async def __aenter__(self) -> KernelexecCodeEnvironment:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
