"""Whether this machine can contain a kernel, and the policy a caller's ``sandbox=`` means.

Asked once per process, by doing it: ``_kernel/contain.py probe`` contains a
process that does nothing, in a process of its own (the namespaces need a
single thread), and says what failed. A machine without Linux, Landlock (ABI
3, Linux 6.2), user namespaces (some distributions turn them off for
unprivileged users; Docker's default seccomp profile refuses them) or a seccomp
table for its architecture cannot contain a kernel. There, ``sandbox=None``
(the default) runs kernels uncontained and logs once what is missing;
``sandbox=True`` or a ``Sandbox`` is refused; ``kernelexec serve`` and
``kernelexec mcp`` refuse to start until told ``--no-sandbox``.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
from dataclasses import dataclass

from .._environment import sandbox_default
from .._exceptions import ConfigurationError
from .._kernel import CONTAIN_SCRIPT
from ._sandbox import Sandbox

__all__ = ["CONTAINED_BY_DEFAULT", "Support", "choose", "contained_by_default", "support"]

log = logging.getLogger("kernelexec")

# Whether ``sandbox=None`` (the default) contains a kernel where this machine can
# (``KERNELEXEC_SANDBOX=0`` in the environment says otherwise).
CONTAINED_BY_DEFAULT = True
_PROBE_WITHIN = 60.0  # seconds: a Python start and a few system calls, on a loaded machine
_LOCK = threading.Lock()
_FOUND: Support | None = None
_SAID = False


@dataclass(frozen=True)
class Support:
    """What this machine can do to contain a kernel.

    Attributes:
        ok: a kernel can be contained.
        missing: why not, one phrase each (empty when ``ok``).
        partial: what this Linux's Landlock cannot refuse even so (older ABIs).
        landlock_abi: the Landlock ABI level (0: none).
    """

    ok: bool
    missing: tuple[str, ...] = ()
    partial: tuple[str, ...] = ()
    landlock_abi: int = 0

    def why_not(self) -> str:
        return "; ".join(self.missing) or "unknown"


def support() -> Support:
    """This machine's ``Support``, found once per process (a probe of some 50 ms)."""
    global _FOUND
    with _LOCK:
        if _FOUND is None:
            _FOUND = _probe()
        return _FOUND


def _probe() -> Support:
    if not sys.platform.startswith("linux"):
        return Support(False, (f"Linux (this is {sys.platform})",))
    try:
        done = subprocess.run(
            [sys.executable, "-I", str(CONTAIN_SCRIPT), "probe"],
            capture_output=True,
            timeout=_PROBE_WITHIN,
            cwd="/",
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        )
        found = json.loads(done.stdout)
    except (OSError, ValueError, subprocess.TimeoutExpired) as exc:
        return Support(False, (f"the probe failed: {exc}",))
    return Support(
        bool(found.get("ok")),
        tuple(str(m) for m in found.get("missing", ())),
        tuple(str(p) for p in found.get("partial", ())),
        int(found.get("landlock_abi", 0)),
    )


def choose(requested: Sandbox | bool | None, *, ours: bool = True) -> Sandbox | None:
    """The policy in force for a kernel asked for with ``sandbox=requested``.

    ``ours``: the kernel is started by kernelexec's boot script (another
    kernelspec's cannot be contained). None asks for the default
    (``contained_by_default``): when it is off, not contained; when on,
    contained where this machine can, and not where it cannot (logged once). True, or a ``Sandbox``,
    must be honoured.

    Raises:
        ConfigurationError: a sandbox was asked for and cannot be had.
    """
    if requested is False or (requested is None and not contained_by_default()):
        return None
    if requested is not None and not isinstance(requested, (bool, Sandbox)):
        raise ConfigurationError(
            f"sandbox= takes None, True, False or a kernelexec.Sandbox, not {requested!r}"
        )
    if not ours:
        if requested is None:
            return None
        raise ConfigurationError(
            "only kernelexec's own kernel (kernel_name='python3', or python=) can be "
            "contained; pass sandbox=False for another kernelspec"
        )
    found = support()
    if not found.ok:
        if requested is None:
            _say_once(found)
            return None
        raise ConfigurationError(
            f"this machine cannot contain a kernel ({found.why_not()}); "
            "pass sandbox=False to run it uncontained"
        )
    return requested if isinstance(requested, Sandbox) else Sandbox()


def contained_by_default() -> bool:
    """Whether ``sandbox=None`` asks for containment (``KERNELEXEC_SANDBOX``, else the default)."""
    return sandbox_default(CONTAINED_BY_DEFAULT)


def _say_once(found: Support) -> None:
    global _SAID
    if not _SAID:
        _SAID = True
        log.warning(
            "kernelexec: kernels run uncontained, with all the powers of user %s: this "
            "machine cannot contain them (%s). Pass sandbox=False to say that is meant.",
            _user(),
            found.why_not(),
        )


def _user() -> str:
    try:
        import pwd

        return pwd.getpwuid(os.geteuid()).pw_name
    except (ImportError, KeyError):
        return str(os.geteuid()) if hasattr(os, "geteuid") else "this user"
