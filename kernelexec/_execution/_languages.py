"""Which block languages run, and how each becomes code for an IPython kernel."""

from __future__ import annotations

__all__ = ["SUPPORTED_LANGUAGES", "kernel_source", "normalize_language"]

_PYTHON = {"", "python", "py", "python3", "ipython"}
_SHELL = {"sh", "bash", "shell"}
SUPPORTED_LANGUAGES = tuple(sorted((_PYTHON | _SHELL) - {""}))


def normalize_language(language: str | None) -> str | None:
    """ "python" or "bash" for a language kernelexec runs, None for any other."""
    name = (language or "").strip().lower()
    if name in _PYTHON:
        return "python"
    if name in _SHELL:
        return "bash"
    return None


def kernel_source(code: str, language: str) -> str:
    """The cell an IPython kernel runs for ``code`` in a normalized language.

    Shell runs through the same kernel with ``%%bash``, so it shares the cwd and
    is interrupted like Python; IPython's ``%%bash`` raises on a non-zero exit,
    so a failed script is a failed execution, not a silent one.
    """
    if language == "bash":
        return "%%bash\n" + code
    return code
