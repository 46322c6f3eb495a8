"""Starts an IPython kernel guarded and tuned for an agent's use.

Run by path with whatever Python hosts the kernel (it may not have kernelexec
installed), so it imports nothing but the standard library and ipykernel:

- a watchdog thread: when the process that started the kernel is gone (even
  SIGKILLed), it kills the kernel's whole process group, children included;
  ipykernel's own parent poller would only end the kernel itself; and it
  removes the connection file (with the key) and the kernel's Unix sockets;
- bounded stream messages: ipykernel sends whatever was printed in 0.2 s as
  one message, hundreds of MB under a flood; here each message carries at most
  CHUNK characters, so the client's memory stays bounded (split on the I/O
  thread, from ipykernel 6.29's per-parent buffers);
- one parent watch: ipykernel's own poller would ``os._exit`` the kernel when
  its parent dies, racing the watchdog and orphaning the kernel's children,
  so it is turned off;
- no dropped output: a zmq PUB socket silently drops messages past its
  high-water mark (1000 by default), so a flood could lose output and even the
  final "idle" status; here IOPub queues without limit in the kernel's process,
  and the client's small receive queue bounds the client's memory instead;
- a quick execute cycle: ipykernel flushes stdout and stderr about six times
  per execution, each a wait on its I/O thread, even with nothing printed, and
  sleeps 0.5 ms before every reply; here a flush with nothing to send returns
  at once (later IOPub messages still queue behind any send in flight, so the
  order up to "idle" is kept) and there is no sleep; and write() reuses its
  buffer key for the same parent header instead of building it every time;
- history kept in memory: an agent's code (and the secrets in it) does not go
  into the user's ~/.ipython history database, and concurrent kernels do not
  contend for its lock; In, Out and %history work as usual.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
import time

NO_IPYKERNEL = 97  # exit status kernelexec reads as "install ipykernel"
CHUNK = 256 * 1024


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


def _connection_file(argv: list[str]) -> str | None:
    return argv[argv.index("-f") + 1] if "-f" in argv[:-1] else None


def _chunked_outstream() -> type:
    from ipykernel.iostream import OutStream

    class ChunkedOutStream(OutStream):
        # ipykernel keys its buffers by a frozenset of the parent header, made
        # anew on every write(); for the same header it is the same key.
        _keyed: tuple[object, object] = (None, None)  # (parent header, its key), set at once

        def write(self, string: str) -> int:
            parent = self.parent_header
            keyed_parent, key = self._keyed
            if (
                parent is keyed_parent
                and type(string) is str
                and self.echo is None
                and self.pub_thread is not None
                and os.getpid() == self._master_pid
            ):
                with self._buffer_lock:
                    self._buffers[key].write(string)
                self._schedule_flush()
                return len(string)
            written = super().write(string)
            if isinstance(parent, dict) and hasattr(self, "_buffers"):
                self._keyed = (parent, frozenset(parent.items()))
            return written or 0

        def _flush_buffers(self):  # type: ignore[no-untyped-def]
            # Runs in the I/O thread: splitting here costs nothing per write().
            for parent, data in super()._flush_buffers():
                for start in range(0, max(len(data), 1), CHUNK):
                    yield parent, data[start : start + CHUNK]

        def flush(self) -> None:
            # An empty buffer means every write so far is taken by a send on
            # the I/O thread (done or in flight), so there is nothing to wait for.
            buffers = getattr(self, "_buffers", None)
            if buffers is None or buffers:
                super().flush()

    return ChunkedOutStream


def _guarded_app(base: type) -> type:
    import zmq

    class GuardedKernelApp(base):  # type: ignore[misc]
        def init_iopub(self, context: zmq.Context[zmq.Socket[bytes]]) -> None:
            context.setsockopt(zmq.SNDHWM, 0)  # default for the sockets made from here on
            super().init_iopub(context)

        def init_poller(self) -> None:
            pass  # _watch_parent does this job, for the whole process group

        def init_kernel(self) -> None:
            super().init_kernel()
            self.kernel._execute_sleep = 0.0

    return GuardedKernelApp


def main() -> None:
    threading.Thread(
        target=_watch_parent, args=(os.getppid(), _connection_file(sys.argv)), daemon=True
    ).start()
    try:
        from ipykernel import kernelapp
    except ImportError:
        sys.stderr.write(
            f"kernelexec: {sys.executable} cannot import ipykernel; "
            f"install it with: {sys.executable} -m pip install ipykernel\n"
        )
        sys.exit(NO_IPYKERNEL)
    globals()["ChunkedOutStream"] = _chunked_outstream()
    sys.argv += [
        f"--IPKernelApp.outstream_class={__name__}.ChunkedOutStream",
        "--HistoryManager.hist_file=:memory:",
    ]
    _guarded_app(kernelapp.IPKernelApp).launch_instance()  # type: ignore[attr-defined]


if __name__ == "__main__":
    main()
