"""The kernel's stdout and stderr: how printed text becomes stream messages.

Loaded by ``boot.py`` inside the kernel process (standard library and
ipykernel only).

- bounded stream messages: ipykernel sends whatever was printed in 0.2 s as
  one message, hundreds of MB under a flood; here each message carries at most
  CHUNK characters, so the client's memory stays bounded (split on the I/O
  thread, from ipykernel 6.29's per-parent buffers);
- a quick execute cycle: ipykernel flushes stdout and stderr about six times
  per execution, each a wait on its I/O thread, even with nothing printed;
  here a flush with nothing to send returns at once (later IOPub messages
  still queue behind any send in flight, so the order up to "idle" is kept);
  and write() reuses its buffer key for the same parent header instead of
  building it every time.
"""

from __future__ import annotations

import os

CHUNK = 256 * 1024


def chunked_outstream() -> type:
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
