"""The kernel's stdout and stderr: exact, bounded stream messages.

Loaded by ``boot.py`` inside the kernel process (standard library and
ipykernel only). ``chunked_outstream()`` gives ipykernel 7's ``OutStream``
with these changes, or the stock class, said in a log line, for an ipykernel
it does not know (it reaches into OutStream's private parts):

- **order**: every stream message is built and queued for the I/O thread
  while one lock, shared by stdout and stderr, is held, the same lock that
  write() takes. So "no buffered text" means "all of it is queued", and a
  flush needs no round trip to the I/O thread: it queues what is buffered,
  in the calling thread, and whatever the caller sends next (a display, the
  reply) queues behind it. (ipykernel's I/O thread takes the buffers and
  queues their message a moment later; a flush that saw the empty buffers in
  between and returned let a display overtake the text before it.) A write
  to one stream first queues what the other holds, so stdout and stderr
  keep the order they were written in, as in a terminal; past
  ``CUTS_PER_INTERVAL`` switches per flush interval (a flood alternating the
  two) the streams coalesce as ipykernel's do, rather than becoming a
  message per write;
- **bounded messages**: at most ``CHUNK`` characters per stream message, so
  a flood cannot make one message of hundreds of MB (split on the I/O
  thread, where ipykernel takes its buffers);
- **output belongs to its execution**: ipykernel tags what a thread writes
  or displays with whichever request is current at that moment, so a thread
  started by one cell wrote into the next cells' results. Here a thread
  keeps the parent header of the cell that started it (and so do the threads
  it starts), and a thread pool's task its submitter's. Text written to the
  file descriptors 1 and 2 (subprocesses, C code) goes through a fresh pipe
  per execution, read under that execution's header: a background process
  started by a cell still writes to that cell's pipe, so its output never
  lands in a later result. What the execution's own processes wrote is
  taken from the pipe before the main thread's next print, display or
  reply, so it keeps its place among them. (A child's fd 1 and fd 2 are two
  pipes: which of the two it wrote first is not known.)
"""

from __future__ import annotations

import codecs
import contextlib
import fcntl
import os
import select
import selectors
import sys
import threading
import time
from typing import Any

CHUNK = 128 * 1024
CUTS_PER_INTERVAL = 1000
KNOWN_MAJOR = 7  # the ipykernel whose OutStream internals this is written against
_PIPE_READ = 65536

# One lock for both streams' buffers and their queueing (an RLock: a hook
# or a stream switch re-enters it). Replaced in a forked child, where another
# thread may have held it at the fork.
_order_lock = threading.RLock()
_streams: list[Any] = []  # this process's ChunkedOutStreams: stdout, stderr
_main_ident = threading.main_thread().ident
# The current pipes of both streams, polled by the main thread before each
# write: a finished subprocess's output goes before what is printed after it.
_poller = select.poll()
_poll_owner: dict[int, Any] = {}
_cuts = [0.0, 0]  # [start of the current flush interval, switches in it]
_flushing = threading.local()  # depth: this thread is inside a flush (and its hooks)
_forked = [False]  # this process is a fork of the kernel (os.getpid() costs a syscall)
_draining: set[Any] = set()  # streams whose _drain holds text not yet appended


def known_ipykernel(version: str) -> bool:
    """Whether this module's OutStream is written for ipykernel ``version``."""
    head = version.split(".", 1)[0]
    return head.isdigit() and int(head) == KNOWN_MAJOR


_made: list[type] = []  # the class chunked_outstream made: a forked kernel's new app reuses it


def chunked_outstream() -> type:
    """The OutStream class for the kernel; threads keep their cell's parent from here on."""
    import ipykernel
    from ipykernel.iostream import OutStream

    if _made:
        return _made[0]

    version = str(getattr(ipykernel, "__version__", "unknown"))
    if not known_ipykernel(version):
        # Before the app starts, so stderr is still the kernel's log, not a stream.
        sys.stderr.write(
            f"kernelexec: ipykernel {version} is not {KNOWN_MAJOR}.x; using its "
            "stock output streams (no bounded messages, no stdout/stderr order, late "
            "output from threads and background processes may land in a later result)\n"
        )
        sys.stderr.flush()
        return OutStream
    _keep_parents_in_threads()
    os.register_at_fork(after_in_child=_after_fork)
    _made.append(_make_class(OutStream))
    return _made[0]


def _after_fork() -> None:
    global _order_lock
    _forked[0] = True
    _order_lock = threading.RLock()
    for stream in _streams:
        stream._buffer_lock = _order_lock


def forget_streams() -> None:
    """In a fork that becomes a kernel of its own: the old streams are not its own."""
    global _poller
    _forked[0] = False
    _streams.clear()
    _draining.clear()  # a watcher that was draining at the fork has no thread here
    _poll_owner.clear()
    _poller = select.poll()


class _Pipe:
    """One execution's pipe for a file descriptor, and the header its text goes under."""

    def __init__(self, fd: int, parent: dict[str, Any] | None) -> None:
        self.fd = fd
        self.parent = parent  # None: whichever request is current (before the first one)
        self.decoder: codecs.IncrementalDecoder | None = None  # made once there is text
        # Set, under the stream's pipe lock, when ``fd`` is closed: its number may
        # then belong to a new file, which must never be read or closed as this one.
        self.closed = False

    def decode(self, raw: bytes, final: bool) -> str:
        """Text of ``raw``; a character cut between two reads waits for its other bytes."""
        if self.decoder is None:
            if not raw:
                return ""
            self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        return self.decoder.decode(raw, final=final)


def _make_class(base: type) -> type:
    class ChunkedOutStream(base):  # type: ignore[misc]
        _keyed: tuple[object, object] = (None, None)  # (parent header, its buffer key)
        _pipe: _Pipe | None = None
        _exc: Any = None  # the watcher's failure, printed by close() as ipykernel does

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._buffer_lock = _order_lock
            _streams.append(self)

        # -- writing and queueing

        def write(self, string: str) -> int | None:
            # (_forked, not _is_master(): a write is the flood's hot path.)
            if type(string) is not str or self.pub_thread is None or _forked[0]:
                return super().write(string)  # type: ignore[no-any-return]
            if self.echo is not None:
                with contextlib.suppress(OSError):
                    self.echo.write(string)
            if threading.get_ident() == _main_ident and _fd_output_waiting():
                _take_fd_output()
            return self._append(string, self.parent_header)

        def _is_master(self) -> bool:
            return not _forked[0]

        def _append(self, string: str, parent: dict[str, Any]) -> int:
            with self._buffer_lock:
                for other in _streams:
                    if other is not self and other._buffers and _may_cut():
                        other._flush()  # what the other stream holds was written first
                keyed_parent, key = self._keyed
                if parent is not keyed_parent:
                    # ipykernel keys its buffers by the parent header's items,
                    # made anew on every write; same header object, same key.
                    key = frozenset(parent.items())
                    self._keyed = (parent, key)
                self._buffers[key].write(string)
            self._schedule_flush()
            return len(string)

        def _flush(self) -> None:
            # Buffers taken and their messages queued as one step, under the
            # lock write() takes (see the module docstring: order).
            with self._buffer_lock:
                _flushing.depth = getattr(_flushing, "depth", 0) + 1
                try:
                    super()._flush()
                finally:
                    _flushing.depth -= 1

        def flush(self) -> None:
            thread = getattr(self.pub_thread, "thread", None)
            if thread is None or not thread.is_alive() or not self._is_master():
                super().flush()
                return
            if threading.get_ident() == _main_ident and _fd_output_waiting():
                _take_fd_output()
            self._flush()  # queued here, ahead of whatever this thread sends next

        def _flush_buffers(self):  # type: ignore[no-untyped-def]
            for parent, data in super()._flush_buffers():
                for start in range(0, max(len(data), 1), CHUNK):
                    yield parent, data[start : start + CHUNK]

        # -- file descriptors 1 and 2: a pipe per execution

        def _setup_stream_redirects(self, name: str) -> None:
            fd = self._original_stdstream_fd = getattr(sys, name).fileno()
            self._original_stdstream_copy = os.dup(fd)
            self._fid = None
            self._pipe_lock = threading.RLock()  # _take_fd_output holds it around _drain
            # epoll: the main thread registers each new pipe while the watcher waits.
            self._selector = selectors.DefaultSelector()
            self._open_pipe(None)
            self.watch_fd_thread = threading.Thread(
                target=self._watch_pipes, name=f"kernelexec {name} pipes", daemon=True
            )
            self.watch_fd_thread.start()

        def set_parent(self, parent: dict[str, Any]) -> None:
            super().set_parent(parent)
            header = self.parent_header
            if (
                self._pipe is not None
                and header.get("msg_type") == "execute_request"
                and header.get("msg_id") != (self._pipe.parent or {}).get("msg_id")
                and threading.get_ident() == _main_ident
                and self._is_master()
            ):
                self._open_pipe(header)

        def _open_pipe(self, parent: dict[str, Any] | None) -> None:
            # Under the pipe lock: the watcher, woken by the old pipe's end of
            # file, must not unregister or close it while it is moved aside here.
            with self._pipe_lock:
                self._switch_pipe(parent)

        def _switch_pipe(self, parent: dict[str, Any] | None) -> None:
            read, write = (_above_std(fd) for fd in os.pipe())
            os.set_blocking(read, False)
            pipe = _Pipe(read, parent)
            self._selector.register(read, selectors.EVENT_READ, pipe)
            old, self._pipe = self._pipe, pipe
            if old is not None:
                # Out of the watcher's sight while fd 1 moves on: its end of
                # file would wake the watcher on every execution. (Not in its
                # selector any more if the code closed fd 1 itself.)
                with contextlib.suppress(KeyError):
                    self._selector.unregister(old.fd)
                _poller.unregister(old.fd)
                del _poll_owner[old.fd]
            _poller.register(read, select.POLLIN)
            _poll_owner[read] = self
            # From here on fd 1 (or 2) is the new pipe.
            os.dup2(write, self._original_stdstream_fd)
            os.close(write)
            if old is not None:
                # What the old pipe holds was written before this execution.
                # Still open, a process of that execution holds it: the watcher
                # reads it to its end, under that execution's header.
                if self._drain(old):
                    self._selector.register(old.fd, selectors.EVENT_READ, old)
                else:
                    self._close_pipe(old)

        def _close_pipe(self, pipe: _Pipe) -> None:
            """Closes ``pipe`` once, whichever thread gets there first."""
            with self._pipe_lock:
                if not pipe.closed:
                    pipe.closed = True
                    os.close(pipe.fd)

        def _watch_pipes(self) -> None:
            try:
                while self._should_watch:
                    for key, _ in self._selector.select():
                        if not self._should_watch:
                            return  # close() woke us with a byte that is not output
                        if self._drain(key.data):
                            continue
                        with self._pipe_lock:
                            if key.data.closed:
                                continue  # moved aside and closed meanwhile
                            with contextlib.suppress(KeyError):
                                self._selector.unregister(key.fd)
                            if key.data is not self._pipe:
                                self._close_pipe(key.data)
                            # else the code closed fd 1 itself: the read end stays
                            # open, so its number is not reused while it is polled.
            except Exception:
                self._exc = sys.exc_info()

        def _drain(self, pipe: _Pipe) -> bool:
            """Moves what ``pipe`` holds into the stream; False once it is closed and empty."""
            with self._pipe_lock:
                if pipe.closed:
                    return False
                # While this drain holds text it read but has not appended yet:
                # the main thread's quick check reads it without the lock.
                _draining.add(self)
                try:
                    return self._drain_locked(pipe)
                finally:
                    _draining.discard(self)

        def _drain_locked(self, pipe: _Pipe) -> bool:
            chunks, open_ = [], True
            while True:
                try:
                    data = os.read(pipe.fd, _PIPE_READ)
                except BlockingIOError:
                    break
                except OSError:
                    data = b""
                if not data:
                    open_ = False
                    break
                chunks.append(data)
            raw = b"".join(chunks)
            if raw:
                with contextlib.suppress(OSError):
                    os.write(self._original_stdstream_copy, raw)  # the kernel's own log
            text = pipe.decode(raw, final=not open_)
            if text and self.pub_thread is not None:
                self._append(text, self.parent_header if pipe.parent is None else pipe.parent)
            return open_

    ChunkedOutStream.__name__ = ChunkedOutStream.__qualname__ = "ChunkedOutStream"
    return ChunkedOutStream


def _above_std(fd: int) -> int:
    """``fd``, or a copy of it numbered 3 or more if the code closed fd 0, 1 or 2."""
    if fd > 2:
        return fd
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
    os.close(fd)
    return moved


def _may_cut() -> bool:
    now = time.monotonic()
    if now - _cuts[0] > 0.2:
        _cuts[0], _cuts[1] = now, 0
    _cuts[1] += 1
    return _cuts[1] <= CUTS_PER_INTERVAL


def _fd_output_waiting() -> bool:
    """Whether a pipe holds text, or a watcher holds text it read but has not appended.

    The quick check before each write of the main thread (one poll, no lock):
    a flood of prints pays only this. The watchers are asked after the poll,
    so text a watcher reads after it was written after this check began.
    """
    return bool(_poller.poll(0)) or bool(_draining)


def _take_fd_output() -> None:
    """Moves what the current pipes hold into their streams (main thread only).

    Both pipes' locks are held while it polls, so text a watcher has read but
    not yet handed to its stream goes first as well.
    """
    if getattr(_flushing, "depth", 0):
        # A hook inside this thread's flush is printing: it holds the buffer
        # lock, which a watcher holding its pipe lock may be waiting for.
        return
    locks = [stream._pipe_lock for stream in _streams if stream._pipe is not None]
    for lock in locks:
        lock.acquire()
    try:
        for fd, _ in _poller.poll(0):
            owner = _poll_owner.get(fd)
            if owner is not None and owner._pipe is not None and owner._pipe.fd == fd:
                owner._drain(owner._pipe)
    finally:
        for lock in reversed(locks):
            lock.release()


# -- threads keep their cell's parent header


def _parents_now() -> list[tuple[Any, dict[str, Any]]]:
    """The (context variable, header) pairs a thread started now should keep.

    Never raises: it runs inside every ``Thread.start``, pyzmq's own threads
    started in the middle of a send included, where an exception would break
    the message being sent.
    """
    try:
        if not _streams or not _streams[0].parent_header.get("msg_id"):
            return []  # started outside any request (the kernel's own threads)
        header = _streams[0].parent_header
        owners: list[Any] = list(_streams)
        from IPython.core.getipython import get_ipython

        shell = get_ipython()
        if shell is not None:
            owners.append(shell.display_pub)
        # One request's header for all: ipykernel 7.0's display publisher has
        # none at all outside a request's context (it raises LookupError).
        return [
            (owner._parent_header, header)
            for owner in owners
            if hasattr(getattr(owner, "_parent_header", None), "set")
        ]
    except Exception:
        return []


def _keep_parents_in_threads() -> None:
    from concurrent.futures import ThreadPoolExecutor

    start = threading.Thread.start
    submit = ThreadPoolExecutor.submit

    def start_keeping_parent(self: threading.Thread) -> None:
        parents = _parents_now()
        if parents:
            run = self.run

            def run_under_parent() -> None:
                # A new thread's context is empty: set in it, they last its life.
                for variable, header in parents:
                    variable.set(header)
                run()

            self.run = run_under_parent  # type: ignore[method-assign]
        start(self)

    def submit_keeping_parent(self: Any, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
        parents = _parents_now()
        if not parents:
            return submit(self, fn, *args, **kwargs)

        def call_under_parent(*args: Any, **kwargs: Any) -> Any:
            tokens = [(variable, variable.set(header)) for variable, header in parents]
            try:
                return fn(*args, **kwargs)
            finally:
                for variable, token in reversed(tokens):
                    variable.reset(token)

        return submit(self, call_under_parent, *args, **kwargs)

    threading.Thread.start = start_keeping_parent  # type: ignore[method-assign]
    ThreadPoolExecutor.submit = submit_keeping_parent  # type: ignore[method-assign]
