"""pip and uv, run to make a kernel's environment: where, with what, and what a failure says.

- **Where.** Each build runs in an empty directory of its own, removed after:
  nothing a requirement could name relative to it (pip and uv would build a
  bare ``x-1.0.zip`` found there, though ``check_packages`` refuses it first),
  and no configuration for them to find in it.
- **Settings.** The installers read their settings from this process's
  environment only: the operator's ``PIP_*`` and ``UV_*`` variables (how a
  site points them at its mirror), and a configuration file where one of
  those names it (``PIP_CONFIG_FILE``, ``UV_CONFIG_FILE``). They look for no
  file of their own: uv finds ``uv.toml`` and ``pyproject.toml`` in every
  folder above its working directory (``/tmp``, which anyone on the machine
  may write), and both read the user's files under ``~/.config``, which a
  local kernel may write. ``--isolated`` is not used: pip would then ignore
  the variables too.
- **Secrets.** A package's build runs its own code here, so the installers
  get the environment a kernel gets, without credentials (but the
  installers' own variables, which may hold an index's).
- **Failures** raise ``EnvironmentBuildError`` naming the packages and the
  installer's reason, its last meaningful error lines, with no path of this
  machine in them (the environment's, the cache's, the build's): the message
  goes to whoever asked for the packages, a server's client too.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from .._environment import installer_env
from .._exceptions import EnvironmentBuildError

__all__ = ["Installers", "failure_reason", "output_tail"]

_TIMEOUT = 1800.0
_TAIL_LINES = 40
_TAIL_CHARS = 4000
_REASON_LINES = 6
_REASON_CHARS = 1500
# What pip and uv say of their own, after these: "ERROR:", uv's "error:" and
# "cause:", and the lines after pip's and uv's crosses and arrows.
_SAID = re.compile(r"^(ERROR: |error: |cause: |Caused by: |\u00d7 |[├╰]─▶ )")
_BOX = re.compile(r"^[│├╰─▶\u00d7>\s]+")
# The framing around a failure, which says nothing of its own.
_FRAMING = re.compile(
    r"^(subprocess-exited-with-error|note: This error originates from a subprocess"
    r"|hint: |exit code: \d+|See above for output|\[end of output\]|\[\d+ lines of output\]"
    r"|\[stderr\]|\[stdout\]|Traceback \(most recent|File \".*\", line \d+)"
)
_EXCEPTION = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Failure)(: .*)?$")
_FILE_URL = re.compile(r"file://\S*")
_ABSOLUTE = re.compile(r"(?<![\w:/.~-])(~|/)[^\s'\"`,;:()<>]*/[^\s'\"`,;:()<>]*")


class Installers:
    """The installer runs that make one environment, in a working directory of their own.

    Args:
        venv: the environment being made (its path never shows in a message).
        fd: the build's lock, held by the installers too.
    """

    def __init__(self, venv: Path, fd: int) -> None:
        self._fd = fd
        self._hidden = [venv]
        self._cwd: str | None = None

    def __enter__(self) -> Installers:
        self._cwd = tempfile.mkdtemp(prefix="kernelexec-build-")
        self._hidden.append(Path(self._cwd))
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._cwd is not None:
            shutil.rmtree(self._cwd, ignore_errors=True)

    def make(self, label: str, argv: list[str]) -> None:
        """Runs ``argv``, which makes the environment; ``label`` names it in messages.

        Raises:
            EnvironmentBuildError: it failed; the message says why.
        """
        self._run(label, argv, None)

    def install(self, label: str, argv: list[str], packages: Sequence[str]) -> None:
        """Runs ``argv``, which installs ``packages`` (requirement strings).

        Raises:
            EnvironmentBuildError: it failed; the message names the packages and says why.
        """
        self._run(label, argv, packages)

    def _run(self, label: str, argv: list[str], packages: Sequence[str] | None) -> None:
        assert self._cwd is not None, "used outside its with block"
        try:
            proc = subprocess.run(
                argv,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                errors="replace",
                env=installer_env(),
                cwd=self._cwd,
                pass_fds=(self._fd,),
                timeout=_TIMEOUT,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            reason = _hide(str(exc), self._hidden)
            raise EnvironmentBuildError(f"`{label}` could not run: {reason}") from None
        if proc.returncode == 0:
            return
        reason = failure_reason(proc.stdout + "\n" + proc.stderr, self._hidden)
        if packages is None:
            what = "could not make the environment"
        else:
            what = f"could not install {', '.join(_named(packages, reason))}"
        raise EnvironmentBuildError(
            f"`{label}` {what} (exit {proc.returncode}): {reason}\n"
            "Fix the package list (requirements for packages of the index) or the interpreter."
        )


def failure_reason(output: str, hidden: Sequence[Path] = ()) -> str:
    """What an installer's output says went wrong: its last meaningful error lines.

    The exception a failed build ended with, and the installer's own error
    lines (pip's ``ERROR:``, uv's lines after a cross or ``╰─▶``), without tracebacks, the
    framing around them or any path of this machine (``hidden`` named, any
    other absolute path cut out too). The last lines of the output if it
    says nothing of the kind.
    """
    said: list[str] = []
    exceptions: list[str] = []
    lines: list[str] = []
    for raw in output.splitlines():
        prefixed = _SAID.match(raw.strip())
        line = _BOX.sub("", _SAID.sub("", raw.strip())).strip()
        if not line or _FRAMING.match(line):
            continue
        if _EXCEPTION.match(line):
            exceptions.append(line)
        elif prefixed:
            said.append(line)
        lines.append(line)
    # The installer's account, then the exception a build ended with.
    picked = (said + exceptions[-1:]) or lines[-3:]
    unique = list(dict.fromkeys(line for line in picked if line))[-_REASON_LINES:]
    reason = "; ".join(unique) or "it said nothing"
    return _hide(reason, hidden)[:_REASON_CHARS]


def _hide(text: str, hidden: Sequence[Path]) -> str:
    """``text`` with ``hidden`` paths, file URLs and any other absolute path made ``<path>``."""
    paths = {str(p) for p in hidden} | {str(p.resolve()) for p in hidden}
    for path in sorted(paths, key=len, reverse=True):  # a longer one may hold a shorter
        text = text.replace(path, "<path>")
    text = _FILE_URL.sub("file://<path>", text)
    return _ABSOLUTE.sub("<path>", text)


def _named(packages: Sequence[str], reason: str) -> list[str]:
    """The packages the reason names; all of them if it names none."""
    words = {canonicalize_name(w) for w in re.findall(r"[A-Za-z0-9][A-Za-z0-9._-]*", reason)}
    named = [p for p in packages if canonicalize_name(Requirement(p).name) in words]
    return named or list(packages)


def output_tail(output: str) -> str:
    """The end of an installer's (or a build's) output, where it says what failed.

    Without the lines of pip's noise that a machine's pip configuration adds.
    """
    lines = [
        line
        for line in output.strip().splitlines()
        if line.strip() and "is ignored: it is neither a file nor a directory" not in line
    ]
    text = "\n".join(lines[-_TAIL_LINES:])
    return text[-_TAIL_CHARS:]
