"""Optional parts ship as extras; this says, in one way everywhere, which one is missing.

``kernelexec gateway`` needs ``gateway``, ``kernelexec mcp`` needs ``mcp``; the
AutoGen integration needs ``autogen``, AG2 1.x's ``ag2`` and AG2's classic
framework's ``ag2-classic`` (their modules add, as a ``note``, which AG2 is
installed instead), the Agent Framework's ``agent-framework``, and JupyterLab's
file browser on a server's sessions (``integrations.jupyterlab``) ``lab``. kernelexec
is not on a package index: the install line names a clone (``pip install -e
'.[x]'``) or a wheel built from one (``python -m build``).
"""

from __future__ import annotations

__all__ = ["install_line", "missing_extra"]


def install_line(extra: str) -> str:
    """How to install an extra: from a clone, or from a wheel built from one."""
    return f"pip install -e '.[{extra}]' from a clone, or the wheel with [{extra}]"


def missing_extra(
    what: str, extra: str, cause: ImportError, *, note: str = ""
) -> ModuleNotFoundError:
    """The error for ``what`` (a module, a command) used without its extra installed.

    A ``ModuleNotFoundError``, as the import that failed was, so code that
    catches that (or ``ImportError``) still does; it names the missing module.

    Args:
        note: sentences to end the message with: what the extra installs, or
            what is installed instead (another line of the same framework).
    """
    missing = f" (no module named {cause.name!r})" if cause.name else ""
    ending = f". {note}" if note else ""
    return ModuleNotFoundError(
        f"{what} needs the {extra} extra: {install_line(extra)}{missing}{ending}", name=cause.name
    )
