"""The one place kernelexec reads the process environment."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

__all__ = ["kernel_env"]

# Names that carry credentials by convention. A kernel runs code an LLM wrote,
# so it gets none of them unless the caller passes them in ``env`` on purpose.
_SECRET_NAME = re.compile(
    r"TOKEN|SECRET|PASSW(OR)?D|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|CREDENTIAL|AUTH|^KERNELEXEC_",
    re.IGNORECASE,
)
# Pagers and colour would hang or clutter output nobody reads in a terminal.
_KERNEL_DEFAULTS = {"PAGER": "cat", "GIT_PAGER": "cat", "TERM": "dumb", "PYTHONUNBUFFERED": "1"}


def kernel_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment without secrets, plus ``extra`` (which wins)."""
    env = {k: v for k, v in os.environ.items() if not _SECRET_NAME.search(k)}
    env.update(_KERNEL_DEFAULTS)
    env.update(extra or {})
    return env
