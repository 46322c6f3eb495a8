"""Starts an IPython kernel with the two guards kernelexec needs.

Run by path with whatever Python hosts the kernel (it may not have kernelexec
installed), so it imports nothing but the standard library and ipykernel:

- a watchdog thread: when the process that started the kernel is gone (even
  SIGKILLed), it kills the kernel's whole process group, children included;
  ipykernel's own parent poller would only end the kernel itself;
- bounded stream messages: ipykernel sends whatever was printed in 0.2 s as
  one message, hundreds of MB under a flood; here each message carries at most
  CHUNK characters, so the client's memory stays bounded;
- one parent watch: ipykernel's own poller would ``os._exit`` the kernel when
  its parent dies, racing the watchdog and orphaning the kernel's children,
  so it is turned off;
- no dropped output: a zmq PUB socket silently drops messages past its
  high-water mark (1000 by default), so a flood could lose output and even the
  final "idle" status; here IOPub queues without limit in the kernel, and the
  client's small receive queue throttles it through TCP instead.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

NO_IPYKERNEL = 97  # exit status kernelexec reads as "install ipykernel"
CHUNK = 256 * 1024


def _watch_parent(parent_pid: int) -> None:
    while True:
        time.sleep(0.2)
        if os.getppid() != parent_pid:
            try:
                os.killpg(0, signal.SIGKILL)
            finally:
                os._exit(1)


def _chunked_outstream() -> type:
    from ipykernel.iostream import OutStream

    class ChunkedOutStream(OutStream):
        _unflushed = 0

        def write(self, string: str) -> int:
            if not isinstance(string, str) or len(string) <= CHUNK:
                written = super().write(string) or 0
                self._unflushed += len(string) if isinstance(string, str) else 0
                if self._unflushed > CHUNK:
                    self._unflushed = 0
                    self.flush()
                return written
            for start in range(0, len(string), CHUNK):
                super().write(string[start : start + CHUNK])
                self.flush()
            self._unflushed = 0
            return len(string)

    return ChunkedOutStream


def _guarded_app(base: type) -> type:
    import zmq

    class GuardedKernelApp(base):  # type: ignore[misc]
        def init_iopub(self, context: zmq.Context[zmq.Socket[bytes]]) -> None:
            context.setsockopt(zmq.SNDHWM, 0)  # default for the sockets made from here on
            super().init_iopub(context)

        def init_poller(self) -> None:
            pass  # _watch_parent does this job, for the whole process group

    return GuardedKernelApp


def main() -> None:
    threading.Thread(target=_watch_parent, args=(os.getppid(),), daemon=True).start()
    try:
        from ipykernel import kernelapp
    except ImportError:
        sys.stderr.write(
            f"kernelexec: {sys.executable} cannot import ipykernel; "
            f"install it with: {sys.executable} -m pip install ipykernel\n"
        )
        sys.exit(NO_IPYKERNEL)
    globals()["ChunkedOutStream"] = _chunked_outstream()
    sys.argv.append(f"--IPKernelApp.outstream_class={__name__}.ChunkedOutStream")
    _guarded_app(kernelapp.IPKernelApp).launch_instance()  # type: ignore[attr-defined]


if __name__ == "__main__":
    main()
