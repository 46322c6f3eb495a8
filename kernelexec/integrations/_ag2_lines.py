"""Which AG2 is installed, so that a module written for the other line says what to do.

AG2 ships as two packages since its 1.0. ``ag2`` 1.x is imported as ``ag2``
(it is the former ``autogen.beta``) and has no ``autogen`` any more; AG2's
classic framework (``autogen.coding``, ``ConversableAgent``, ``autogen.tools``,
and ``autogen.beta`` too) is the ``autogen`` package, 0.14.x. Before 1.0 the
``ag2`` package itself was imported as ``autogen``. The two lines have two
extras, ``ag2`` and ``ag2-classic``; a user who has the other line installed
gets an error saying so, and which of our modules fits it.

``ag2`` before 1.0 and the ``autogen`` package both write the ``autogen``
folder, and pip installs one beside the other without a word (neither declares
the other). No extra can refuse that, so the classic modules warn when they
find both.
"""

from __future__ import annotations

import warnings
from importlib import metadata

from packaging.version import InvalidVersion, Version

from .._extras import missing_extra

__all__ = ["CLASSIC", "CURRENT", "ag2_missing", "warn_if_two_owners"]

CURRENT = "ag2"
"""The extra for ``ag2`` 1.x: ``kernelexec.integrations.ag2_code``."""
CLASSIC = "ag2-classic"
"""The extra for the ``autogen`` package: ``ag2``, ``ag2_tools`` and ``ag2_beta``."""

_WHAT = {
    CURRENT: "The ag2 extra installs ag2 1.x, imported as ag2.",
    CLASSIC: "The ag2-classic extra installs the autogen package (0.14.x), AG2's classic "
    "framework, imported as autogen.",
}


def _version(distribution: str) -> Version | None:
    try:
        return Version(metadata.version(distribution))
    except (metadata.PackageNotFoundError, InvalidVersion):
        return None


def _other_line(extra: str) -> str:
    """What is installed of the line ``extra`` is not for, and what fits it; "" for nothing."""
    ag2, autogen = _version("ag2"), _version("autogen")
    if extra == CLASSIC and ag2 is not None and ag2.major >= 1:
        return (
            f"Installed: ag2 {ag2}, AG2 1.x, which has no autogen; its agents' SandboxCodeTool "
            "takes kernelexec.integrations.ag2_code."
        )
    if extra == CURRENT:
        # ag2 before 1.0 was the classic framework under the ag2 name.
        for name, version in (("autogen", autogen), ("ag2", ag2)):
            if version is not None and version.major < 1:
                return (
                    f"Installed: {name} {version}, AG2's classic framework (imported as "
                    "autogen): its autogen.beta agents take kernelexec.integrations.ag2_beta, "
                    "its ConversableAgent kernelexec.integrations.ag2."
                )
    return ""


def ag2_missing(what: str, extra: str, cause: ImportError) -> ModuleNotFoundError:
    """``missing_extra`` for an AG2 module: what the extra installs, and what is installed.

    Args:
        what: the module that could not import its AG2.
        extra: ``CURRENT`` or ``CLASSIC``, the line ``what`` is written for.
        cause: the failed import.
    """
    note = " ".join(filter(None, [_WHAT[extra], _other_line(extra)]))
    return missing_extra(what, extra, cause, note=note)


def warn_if_two_owners() -> None:
    """A ``RuntimeWarning`` when ``ag2`` before 1.0 and ``autogen`` are both installed.

    Each wrote its files into the one ``autogen`` folder, so what it holds is
    a mix, whichever came last. Uninstalling either deletes files the other
    needs: the fix is to uninstall both and install one line again.
    """
    ag2, autogen = _version("ag2"), _version("autogen")
    if ag2 is None or autogen is None or ag2.major >= 1:
        return
    warnings.warn(
        f"ag2 {ag2} and autogen {autogen} are both installed, and both wrote the autogen "
        "folder: it holds whichever files came last. AG2's classic framework is the autogen "
        "package now: pip uninstall ag2 autogen, then install kernelexec's ag2-classic extra "
        "(or its ag2 extra, for AG2 1.x).",
        RuntimeWarning,
        stacklevel=2,
    )
