"""``exit`` and ``quit`` leave the kernel running.

In ipykernel, code that calls ``exit()`` (or ``quit``) stops the kernel's
event loop, and the kernel process ends. A kernel that kernelexec booted
belongs to a session, which restarts and shuts it down itself and records it
in the transcript: code it runs, and a person's console attached to it
(``kernelexec attach``, a JupyterLab notebook on the server), must not end it
behind the session's back. Typed in ``jupyter console``, ``exit`` was the way
a person debugging an agent ended the agent's kernel by accident.

So here ``exit`` does what it asks of a frontend only: the ``ask_exit``
payload says ``keepkernel``, a console leaves and the kernel stays, and a
note on stderr says so. ``sys.exit()`` already behaves this way (IPython
reports the ``SystemExit``); ``os._exit()`` still ends the process, as it
would anywhere.

Loaded by boot.py; imports nothing but the standard library.
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["NOTE", "keep_on_exit", "kept_app"]

NOTE = (
    "kernelexec: exit() does not end this kernel: it belongs to a kernelexec session, "
    "which restarts or closes it\n"
)


def keep_on_exit(shell: Any) -> None:
    """Makes ``exit``/``quit`` in ``shell`` (a ZMQInteractiveShell) keep the kernel running."""

    def ask_exit() -> None:
        shell.keepkernel_on_exit = True
        shell.payload_manager.write_payload({"source": "ask_exit", "keepkernel": True})
        sys.stderr.write(NOTE)

    shell.ask_exit = ask_exit


def kept_app(base: type) -> type:
    """``base`` (an IPKernelApp) whose shell keeps the kernel running on ``exit``."""

    class KeptKernelApp(base):  # type: ignore[misc]
        def init_kernel(self) -> None:
            super().init_kernel()
            keep_on_exit(self.kernel.shell)

    return KeptKernelApp
