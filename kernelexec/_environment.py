"""The one place kernelexec reads the process environment."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from ._exceptions import ConfigurationError

__all__ = [
    "installer_env",
    "keep_dumpable",
    "kernel_env",
    "looks_secret",
    "pool_size",
    "preload",
    "remote_env",
    "server_token",
    "share_pages",
    "trace_content",
    "venv_cache_dir",
    "zygote_enabled",
]

# Names that carry credentials by convention. A kernel runs code an LLM wrote,
# so it gets none of them unless the caller passes them in ``env`` on purpose.
_SECRET_NAME = re.compile(
    r"TOKEN|SECRET|PASSW(OR)?D|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|CREDENTIAL|AUTH|^KERNELEXEC_",
    re.IGNORECASE,
)
# Pagers and colour would hang or clutter output nobody reads in a terminal.
_KERNEL_DEFAULTS = {"PAGER": "cat", "GIT_PAGER": "cat", "TERM": "dumb", "PYTHONUNBUFFERED": "1"}
# Set by pytest for its own process: ipykernel that sees it stops capturing what
# subprocesses print, so an agent tested under pytest would lose that output.
# MPLBACKEND (Agg on many headless machines) would stop ipykernel from choosing
# its inline backend, and every figure would vanish; a caller's env= still sets it.
_NOT_INHERITED = {"PYTEST_CURRENT_TEST", "MPLBACKEND"}


def kernel_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment without secrets, plus ``extra`` (which wins)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not _SECRET_NAME.search(k) and k not in _NOT_INHERITED
    }
    env.update(_KERNEL_DEFAULTS)
    env.update(extra or {})
    return env


def installer_env() -> dict[str, str]:
    """The environment pip and uv run in, building a kernel's venv (see ``_venvs/_installer.py``).

    This process's, without secrets but the installers' own variables
    (``PIP_*``, ``UV_*``), and with no configuration file they would find
    themselves: only one a variable names.
    """
    env = {
        k: v
        for k, v in os.environ.items()
        if k.startswith(("PIP_", "UV_")) or not _SECRET_NAME.search(k)
    }
    env.setdefault("PIP_CONFIG_FILE", os.devnull)  # pip then reads no file but the variables
    env.setdefault("UV_NO_CONFIG", "1")  # a UV_CONFIG_FILE is still read
    return env | {"PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"}


def looks_secret(name: str) -> bool:
    """Whether a variable or option named ``name`` carries a credential by convention."""
    return bool(_SECRET_NAME.search(name))


def remote_env(env: Mapping[str, str]) -> dict[str, str]:
    """What of a kernel env to send to a kernel that runs elsewhere.

    kernelexec's defaults and the caller's extras, not this machine's own
    variables: on a gateway or in a container this machine's PATH or HOME
    would be wrong.
    """
    # A name never inherited is in ``env`` only because the caller passed it.
    return {
        k: v
        for k, v in env.items()
        if k in _KERNEL_DEFAULTS or k in _NOT_INHERITED or os.environ.get(k) != v
    }


def server_token() -> str | None:
    """The server token a command was given through ``KERNELEXEC_TOKEN``, if any."""
    return os.environ.get("KERNELEXEC_TOKEN") or None


def venv_cache_dir() -> Path:
    """Where environments made for ``packages=`` live: ``KERNELEXEC_VENV_DIR``.

    Default ``$XDG_CACHE_HOME/kernelexec/venvs``, and ``~/.cache/kernelexec/venvs``
    without XDG_CACHE_HOME: a cache, which anyone may delete to free the space.
    """
    chosen = os.environ.get("KERNELEXEC_VENV_DIR", "").strip()
    if chosen:
        return Path(chosen).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME", "").strip() or "~/.cache"
    return Path(cache).expanduser() / "kernelexec" / "venvs"


def keep_dumpable() -> bool:
    """``KERNELEXEC_DUMPABLE=1``: this process stays readable to its own uid.

    For debugging (gdb, py-spy, core dumps without root); kernels can then read
    this process's environment and memory.
    """
    return os.environ.get("KERNELEXEC_DUMPABLE", "").strip().lower() in ("1", "true", "yes")


def pool_size() -> int:
    """``KERNELEXEC_POOL_SIZE``: warm kernels a server keeps (0 when unset).

    Raises:
        ConfigurationError: it is set to anything but a whole number.
    """
    value = os.environ.get("KERNELEXEC_POOL_SIZE", "").strip()
    if value and not value.isdigit():
        raise ConfigurationError(
            f"KERNELEXEC_POOL_SIZE must be a whole number of kernels, not {value!r}"
        )
    return int(value or 0)


def trace_content() -> bool:
    """``KERNELEXEC_OTEL_CAPTURE_CONTENT=1``: spans carry the code and its output text too.

    Off unless set: code and outputs may hold what an agent was told to keep secret.
    """
    return _switch("KERNELEXEC_OTEL_CAPTURE_CONTENT") is True


def preload() -> str | None:
    """``KERNELEXEC_PRELOAD``: code every new kernel of a server runs first."""
    return os.environ.get("KERNELEXEC_PRELOAD") or None


def zygote_enabled(wanted: bool | None = None) -> bool:
    """Whether local kernels fork from a zygote: ``wanted`` if given, else ``KERNELEXEC_ZYGOTE``.

    On unless ``KERNELEXEC_ZYGOTE`` is 0, false, no or off.
    """
    if wanted is not None:
        return wanted
    return _switch("KERNELEXEC_ZYGOTE") is not False


def share_pages() -> bool:
    """``KERNELEXEC_SHARE_PAGES=1``: zygotes offer their memory to same-page merging (KSM).

    Off unless 1, true, yes or on. ``_kernel/merge.py`` says what it saves and
    why it is not for kernels of different tenants.
    """
    return _switch("KERNELEXEC_SHARE_PAGES") is True


def sandbox_default(built_in: bool) -> bool:
    """Whether ``sandbox=None`` contains a kernel: ``KERNELEXEC_SANDBOX``, else ``built_in``.

    ``KERNELEXEC_SANDBOX=1`` (or true, yes, on) contains kernels by default,
    0 (false, no, off) does not; for running the suite, or a program, either
    way before containment's default changes.
    """
    switch = _switch("KERNELEXEC_SANDBOX")
    return built_in if switch is None else switch


def _switch(name: str) -> bool | None:
    """The variable ``name`` as a switch: True, False, or None (unset or neither).

    True for 1, true, yes or on; False for 0, false, no or off; any case, with
    the spaces around it ignored.
    """
    value = os.environ.get(name, "").strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    return None
