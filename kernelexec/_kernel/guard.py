"""Keeping the kernel's process tree tied to its owner.

Loaded by ``boot.py`` inside the kernel process (standard library and
ipykernel only).

- a watchdog thread: when the process that started the kernel is gone (even
  SIGKILLed), it kills the kernel's whole process group, children included;
  ipykernel's own parent poller would only end the kernel itself; and it
  removes the connection file (with the key) and the kernel's Unix sockets;
- one parent watch: ipykernel's own poller would ``os._exit`` the kernel when
  its parent dies, racing the watchdog and orphaning the kernel's children,
  so it is turned off;
- no dropped output: a zmq PUB socket silently drops messages past its
  high-water mark (1000 by default), so a flood could lose output and even the
  final "idle" status; here IOPub queues without limit in the kernel's process,
  and the client's small receive queue bounds the client's memory instead;
- no sleep before each reply (ipykernel waits 0.5 ms).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
from typing import Any


def start_watchdog(connection_file: str | None) -> None:
    threading.Thread(
        target=_watch_parent, args=(os.getppid(), connection_file), daemon=True
    ).start()


def _watch_parent(parent_pid: int, connection_file: str | None) -> None:
    while True:
        time.sleep(0.2)
        if os.getppid() != parent_pid:
            try:
                if connection_file:
                    _forget_connection(connection_file)
                os.killpg(0, signal.SIGKILL)
            finally:
                os._exit(1)


def _forget_connection(path: str) -> None:
    # Their owner, which would have removed them, is gone: the connection file
    # (it holds the kernel's key), the Unix sockets, and their dir if now empty.
    try:
        with open(path) as file:
            info = json.load(file)
        os.remove(path)
        if info.get("transport") == "ipc":
            for channel in ("shell", "iopub", "stdin", "control", "hb"):
                with contextlib.suppress(OSError):
                    os.remove(f"{info['ip']}-{info[f'{channel}_port']}")
            os.rmdir(os.path.dirname(info["ip"]))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass


def guarded_app(base: type) -> type:
    import zmq

    class GuardedKernelApp(base):  # type: ignore[misc]
        def init_iopub(self, context: Any) -> None:
            context.setsockopt(zmq.SNDHWM, 0)  # default for the sockets made from here on
            super().init_iopub(context)

        def init_poller(self) -> None:
            pass  # the watchdog does this job, for the whole process group

        def init_kernel(self) -> None:
            super().init_kernel()
            self.kernel._execute_sleep = 0.0

    return GuardedKernelApp
