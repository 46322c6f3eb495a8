"""Kernel zygotes, from the owner's side: start one per configuration, fork kernels from it.

A zygote (``kernelexec/_kernel/zygote.py``) is a process that has imported
ipykernel and a preload's modules once and forks kernels on request, in a few
milliseconds and sharing those pages copy-on-write. This module starts one per
configuration (interpreter, preload imports, environment) the first time a
kernel of that configuration is started cold, keeps at most ``_MOST`` of them,
restarts one that died, and ends them when this process ends.

It talks to a zygote from a thread of its own, so any event loop (and the
synchronous facade's) can fork from the same zygote.

Off with ``KERNELEXEC_ZYGOTE=0`` or ``zygote=False``; not used off Linux or
where ``os.pidfd_open`` is missing, nor for kernelspecs other than kernelexec's
own boot script. With ``KERNELEXEC_SHARE_PAGES=1`` a zygote offers its memory,
and so its kernels', to the machine's same-page merging (``_kernel/merge.py``).
"""

from __future__ import annotations

import ast
import asyncio
import atexit
import concurrent.futures
import contextlib
import itertools
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

from .._environment import share_pages, zygote_enabled
from .._kernel import ZYGOTE_SCRIPT
from .._kernel.guard import end_tree
from ._caps import read_tail
from ._kernel_fork import PidfdProcess

__all__ = ["ForkedKernel", "Zygote", "zygote_for"]

log = logging.getLogger("kernelexec")

_MOST = 4  # zygotes kept at once; the least recently used beyond that is ended
_MESSAGE = 1 << 20
_ANSWER_WITHIN = 10.0  # seconds a zygote gets to answer a fork request
_RELEASED_STATUS_WAIT = 1.0  # seconds to wait for a dead kernel's exit status
_ZYGOTES: OrderedDict[tuple[Any, ...], Zygote] = OrderedDict()
_LOCK = threading.Lock()
_SAID: set[str] = set()  # reasons the spawn path was used, each logged once
_KSM_RUN = "/sys/kernel/mm/ksm/run"


class ForkedKernel(PidfdProcess):
    """A kernel process forked by a zygote, which keeps it unreaped until ``release()``.

    Its exit status comes from the zygote.
    """

    def __init__(self, zygote: Zygote, pid: int) -> None:
        super().__init__(pid)
        self._zygote = zygote

    def _exit_status(self) -> int | None:
        return self._zygote.exit_status(self.pid, _RELEASED_STATUS_WAIT)

    def release(self) -> None:
        """Lets the zygote reap the (ended) process; its pid may then be reused."""
        super().release()
        self._zygote.release(self.pid)


class Zygote:
    """One zygote process and the thread that hears it."""

    def __init__(
        self, python: str, env: Mapping[str, str], imports: list[str], *, share: bool = False
    ) -> None:
        self.python = python
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._channel = ours
        self._stderr: IO[bytes] = tempfile.TemporaryFile()
        self._process = subprocess.Popen(
            [python, str(ZYGOTE_SCRIPT), str(theirs.fileno())],
            pass_fds=(theirs.fileno(),),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self._stderr,
            env=dict(env),
            cwd=tempfile.gettempdir(),
            start_new_session=True,  # a Ctrl-C at the owner's terminal is not for it
        )
        theirs.close()
        self._ids = itertools.count(1)
        self._send_lock = threading.Lock()
        self._pending: dict[int, concurrent.futures.Future[int]] = {}
        self._statuses: dict[int, int] = {}
        self._status_arrived = threading.Condition()
        self.ready = concurrent.futures.Future[bool]()
        self.failure: str | None = None
        self.hopeless = False  # it said it cannot work (no ipykernel): not restarted
        self._send({"imports": imports, "share_pages": share})
        threading.Thread(target=self._hear, name="kernelexec-zygote", daemon=True).start()

    @property
    def alive(self) -> bool:
        return self._process.poll() is None and self.failure is None

    async def fork(
        self,
        *,
        connection_file: str,
        cwd: Path,
        env: Mapping[str, str],
        stderr: IO[bytes],
        sandbox: Mapping[str, Any] | None = None,
    ) -> ForkedKernel:
        """A new kernel, forked and launching on ``connection_file``.

        ``sandbox``: the policy that contains it (``_kernel/contain.py``), or None.
        """
        ident = next(self._ids)
        answer = concurrent.futures.Future[int]()
        self._pending[ident] = answer
        request = {
            "fork": ident,
            "connection_file": connection_file,
            "cwd": str(cwd),
            "env": dict(env),
            "sandbox": None if sandbox is None else dict(sandbox),
        }
        try:
            self._send(request, [stderr.fileno()])
        except OSError as exc:
            self._pending.pop(ident, None)
            raise ZygoteGone(f"the zygote is gone ({exc})") from exc
        try:
            pid = await asyncio.wait_for(asyncio.wrap_future(answer), timeout=_ANSWER_WITHIN)
        except asyncio.TimeoutError as exc:
            answer.cancel()  # the fork, if it comes, is ended on arrival
            raise ZygoteGone(f"the zygote did not answer within {_ANSWER_WITHIN:g} s") from exc
        except asyncio.CancelledError:
            answer.cancel()
            raise
        return ForkedKernel(self, pid)

    def exit_status(self, pid: int, wait: float) -> int | None:
        with self._status_arrived:
            self._status_arrived.wait_for(
                lambda: pid in self._statuses or not self.alive, timeout=wait
            )
            return self._statuses.get(pid)

    def release(self, pid: int) -> None:
        with self._status_arrived:
            self._statuses.pop(pid, None)
        try:
            self._send({"release": pid})
        except OSError:
            pass  # the zygote is gone; its orphans are reaped by init

    def close(self) -> None:
        """Ends the zygote (its kernels live on: they watch their owner, not it)."""
        self._channel.close()
        if self._process.poll() is None:
            self._process.kill()
        try:
            self._process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        self._stderr.close()

    # -- internals

    def _send(self, message: dict[str, Any], fds: list[int] | None = None) -> None:
        data = json.dumps(message).encode()
        with self._send_lock:
            if fds:
                socket.send_fds(self._channel, [data], fds)
            else:
                self._channel.send(data)

    def _hear(self) -> None:
        while True:
            try:
                data = self._channel.recv(_MESSAGE)
            except OSError:
                data = b""
            if not data:
                break
            message = json.loads(data)
            if "forked" in message:
                self._deliver(message["forked"], int(message["pid"]))
            elif "exited" in message:
                with self._status_arrived:
                    self._statuses[int(message["exited"])] = int(message["status"])
                    self._status_arrived.notify_all()
            elif "ready" in message:
                self.ready.set_result(True)
            elif "failed" in message:
                self.failure, self.hopeless = str(message["failed"]), True
        self._gone()

    def _deliver(self, ident: int, pid: int) -> None:
        answer = self._pending.pop(ident, None)
        try:
            if answer is None:
                raise concurrent.futures.InvalidStateError
            answer.set_result(pid)
        except concurrent.futures.InvalidStateError:
            # Nobody waits for it any more (the start was cancelled or timed
            # out): it must not live on as an orphan kernel.
            end_tree(pid)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
            # And its group (the session it made with setsid): a kernel it
            # forked after end_tree looked is in it.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
            self.release(pid)

    def _gone(self) -> None:
        if self.failure is None:
            self.failure = "the zygote exited" + self._said()
        if not self.ready.done():
            self.ready.set_result(False)
        for answer in list(self._pending.values()):
            if not answer.done():
                answer.set_exception(ZygoteGone(self.failure))
        self._pending.clear()
        with self._status_arrived:
            self._status_arrived.notify_all()

    def _said(self) -> str:
        try:
            text = read_tail(self._stderr, 1000).decode("utf-8", "replace").strip()
        except (OSError, ValueError):
            return ""
        return f": {text}" if text else ""


class ZygoteGone(Exception):
    """The zygote ended before it answered; the kernel is started the usual way."""


def zygote_for(
    python: str, env: Mapping[str, str], preload: str | None, wanted: bool | None
) -> Zygote | None:
    """The ready zygote for this configuration, or None (and one is started for next time).

    Never waits for a zygote to start: a configuration's first kernel starts
    the usual way while its zygote imports in the background.
    """
    if not _usable(wanted):
        return None
    imports = preload_imports(preload)
    share = share_pages()
    key = (python, tuple(imports), tuple(sorted(env.items())), share)
    with _LOCK:
        zygote = _ZYGOTES.get(key)
        if zygote is not None and zygote.hopeless:
            _say_once(f"no zygote for {python}: {zygote.failure}")
            return None  # and none is tried again for this configuration
        if zygote is not None and not zygote.alive:
            zygote.close()  # it died (killed, say): a new one for next time
            zygote = None
            del _ZYGOTES[key]
        if zygote is None:
            if share and not ksm_running():  # read as a zygote starts, not at every kernel's
                _say_once(
                    "KERNELEXEC_SHARE_PAGES=1, but this machine does not merge pages: "
                    f"{_KSM_RUN} is not 1 (root turns it on)",
                    logging.WARNING,
                )
            try:
                _ZYGOTES[key] = Zygote(python, env, imports, share=share)
            except OSError as exc:
                _say_once(f"no zygote for {python}: {exc}")
                return None
            while len(_ZYGOTES) > _MOST:
                _, oldest = _ZYGOTES.popitem(last=False)
                oldest.close()
            return None
        _ZYGOTES.move_to_end(key)
    if zygote.ready.done() and zygote.ready.result():
        return zygote
    return None


def ksm_running() -> bool:
    """Whether this machine merges identical pages (KSM) of memory marked mergeable."""
    try:
        with open(_KSM_RUN) as run:
            return run.read().strip() == "1"
    except OSError:
        return False


def preload_imports(preload: str | None) -> list[str]:
    """The preload's top-level absolute import statements, as source: what a zygote runs."""
    if not preload:
        return []
    try:
        tree = ast.parse(preload)
    except SyntaxError:
        return []  # IPython syntax (magics, say): the kernel's preload deals with it
    found = []
    for node in tree.body:
        if isinstance(node, ast.Import) or (isinstance(node, ast.ImportFrom) and not node.level):
            segment = ast.get_source_segment(preload, node)
            if segment:
                found.append(segment)
    return found


def _usable(wanted: bool | None) -> bool:
    if not zygote_enabled(wanted):
        return False
    if not sys.platform.startswith("linux") or not hasattr(os, "pidfd_open"):
        _say_once("kernels are started the usual way: zygotes need Linux and os.pidfd_open")
        return False
    return True


def _say_once(reason: str, level: int = logging.INFO) -> None:
    if reason not in _SAID:
        _SAID.add(reason)
        log.log(level, "kernelexec: %s", reason)


@atexit.register
def _close_all() -> None:
    with _LOCK:
        while _ZYGOTES:
            _, zygote = _ZYGOTES.popitem()
            zygote.close()
