"""Kernels on this machine: jupyter_client's AsyncKernelManager and ipykernel."""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

from jupyter_client.connect import write_connection_file
from jupyter_client.kernelspec import NoSuchKernel
from jupyter_client.manager import AsyncKernelManager
from jupyter_client.session import Session

from .._containment._platform import choose
from .._containment._sandbox import Sandbox
from .._containment._secrecy import protect_process
from .._containment._start import ContainedStart, contained_start, movable_to
from .._exceptions import KernelStartError
from .._kernel import CANNOT_CONTAIN, NO_IPYKERNEL, SANDBOX_VARIABLE
from .._kernel.guard import end_tree
from ._base import KernelMessage
from ._caps import MAX_MESSAGE_BYTES, read_tail
from ._kernel_fork import PidfdProcess, ProcessFork
from ._local_fork import fork_kernel
from ._local_process import BootSpecs, ask_forked_to_stop, ask_to_stop, context, describe_exit
from ._ready import await_kernel_info
from ._zmq import KernelSockets, ask_control
from ._zygote import Zygote, ZygoteGone, zygote_for

__all__ = ["LocalBackend"]

_LIVE: set[LocalBackend] = set()  # killed at interpreter exit if still running
_PORT_TAKEN = "Address already in use"
_PORT_ATTEMPTS = 3
_MOVE_FAILED = 86  # the exit status of a kernel that could not enter its work dir
_STDERR_TAIL = 2000  # bytes of a kernel's stderr a start-up failure quotes
_MOVE = """\
import os as _k
try:
    _k.chdir({path!r})
    _k.environ["PWD"] = _k.getcwd()
except BaseException:
    _k._exit({status})
del _k
"""
# A first execution pays for lazy imports and cold caches (the display
# formatters above all); a pooled kernel pays before anyone waits on it.
_WARM_UP = """\
try:
    get_ipython().display_formatter.format(0)
except Exception:
    pass
"""


class LocalBackend:
    """A kernel process on this machine, in its own process group.

    With the default kernel (or ``python=`` another interpreter) the kernel is
    launched through kernelexec's boot script, which kills the kernel's whole
    process group if this process dies and keeps stream messages small. Any
    other ``kernel_name`` is launched from its installed kernelspec as is.

    Args:
        kernel_name: an installed kernelspec; "python3" means the boot script.
        python: the interpreter for the kernel; default, this one.
        startup_timeout: seconds to wait for a new kernel to answer.
        preload: code run silently in every new kernel (restarts included)
            before it counts as started, e.g. ``import numpy, pandas``; if it
            fails, starting fails with its error.
        zygote: fork kernels from a zygote that has imported ipykernel and the
            preload's modules once (Linux, kernelexec's own boot script only);
            None: unless ``KERNELEXEC_ZYGOTE=0``. A configuration's first
            kernel starts the usual way while its zygote starts.
        max_message_bytes: the host's cap on one message from the kernel
            (``Limits.max_message_bytes``; a session sets its own).
        sandbox: contain the kernel (``kernelexec.Sandbox``): None, the
            default (contained where this machine can); True, the default
            policy; False, not. kernelexec's own kernel only: another kernelspec's runs as
            its spec says.

    Raises:
        ConfigurationError: a sandbox asked for cannot be had here.
    """

    # A running kernel of this backend can be copied by fork() (a container cannot).
    forks_as_process = True

    def __init__(
        self,
        *,
        kernel_name: str = "python3",
        python: str | None = None,
        startup_timeout: float = 60.0,
        preload: str | None = None,
        zygote: bool | None = None,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
        sandbox: Sandbox | bool | None = None,
    ) -> None:
        self.kernel_name = kernel_name
        self.python = python
        self.startup_timeout = startup_timeout
        self.preload = preload
        self.zygote = zygote
        self.max_message_bytes = max_message_bytes
        # The policy in force, None for none; its start's cgroups while one runs.
        self.sandbox = choose(sandbox, ours=self._boots())
        self._contained: ContainedStart | None = None
        # The folder within which the next start's work dir will be renamed (a
        # pool's kernel, see take_work_dir); None: it stays where it is.
        self.movable: Path | None = None
        self._out_of_memory = False  # the last kernel passed its memory limit
        self.forked = False  # the running kernel came from a zygote
        self._km: AsyncKernelManager | None = None
        self._info: dict[str, Any] | None = None  # a forked kernel's connection info
        self._released: set[int] = set()  # forks of this kernel: sessions of their own
        self._channels: KernelSockets | None = None
        self._stderr: IO[bytes] | None = None
        self._pgid: int | None = None
        # boot's process, the kernel's supervisor
        self._process: subprocess.Popen[bytes] | PidfdProcess | None = None
        self._returncode: int | None = None
        self._cwd = Path.cwd()
        self._env: dict[str, str] = {}
        self._ipc_dir: Path | None = None  # Unix sockets, when the kernel listens on them

    def fresh(self) -> LocalBackend:
        """A new, unstarted backend with the same settings (a session's fork, restored)."""
        return LocalBackend(
            kernel_name=self.kernel_name,
            python=self.python,
            startup_timeout=self.startup_timeout,
            preload=self.preload,
            zygote=self.zygote,
            max_message_bytes=self.max_message_bytes,
            sandbox=self.sandbox or False,
        )

    async def start(self, *, cwd: Path, env: dict[str, str]) -> None:
        # Over TCP (other kernelspecs), ports are chosen free, then bound by the
        # kernel: another process can take one in between. A kernel that lost
        # that race is started again.
        for attempt in range(_PORT_ATTEMPTS):
            try:
                await self._start_once(cwd, env)
                return
            except KernelStartError as exc:
                if _PORT_TAKEN not in str(exc) or attempt == _PORT_ATTEMPTS - 1:
                    raise

    async def _start_once(self, cwd: Path, env: dict[str, str]) -> None:
        if (
            self._km is not None
            or self._process is not None
            or self._ipc_dir is not None
            or self._stderr is not None
        ):
            # A kernel that died and was not shut down (auto_restart=False):
            # its sockets, stderr file and IPC dir would leak otherwise.
            await self.shutdown(now=True)
        protect_process()  # before the first kernel can look at this process
        self._cwd, self._env = cwd, env
        zygote = self._zygote(env)
        if zygote is not None:
            try:
                await self._fork_from(zygote, cwd, env)
            except ZygoteGone:
                await self.shutdown(now=True)  # and start the usual way
            else:
                await self._started()
                return
        km = self._manager()
        self._stderr = tempfile.TemporaryFile()
        self._returncode = None
        extra = self._contain(cwd)
        if self._contained is not None:
            extra[SANDBOX_VARIABLE] = json.dumps(self._contained.policy)
        try:
            await km.start_kernel(
                cwd=str(cwd),
                env={**env, "PWD": str(cwd), **extra},
                stdout=subprocess.DEVNULL,
                stderr=self._stderr,
            )
        except (NoSuchKernel, OSError) as exc:
            await self.shutdown()  # its stderr file and IPC dir
            if isinstance(exc, NoSuchKernel):
                raise KernelStartError(
                    f"no kernelspec named {self.kernel_name!r}; list them with "
                    "`jupyter kernelspec list`, or leave kernel_name at 'python3'"
                ) from exc
            raise KernelStartError(f"could not launch the kernel: {exc}") from exc
        self._km = km
        self.forked = False
        self._pgid = getattr(km.provisioner, "pgid", None)
        self._process = getattr(km.provisioner, "process", None)
        _LIVE.add(self)
        self._channels = self._sockets(km.get_connection_info(), km.session)
        await self._started()

    async def _started(self) -> None:
        try:
            await self._wait_ready()
            if self.preload:
                await self._run_silently(self.preload, "preload")
        except KernelStartError:
            await self.shutdown()
            raise

    def move_to(self, cwd: Path) -> None:
        """Sends the running kernel to ``cwd`` (restarts start there too), without waiting.

        Lets a kernel started ahead of time, in a pool, serve a session's work
        dir. The request is queued ahead of any execution, so the kernel runs it
        first; a kernel that cannot enter ``cwd`` exits rather than run anyone's
        code elsewhere, and the session says so and starts a new kernel in ``cwd``.
        """
        self._cwd = cwd
        self._send_execute(
            _MOVE.format(path=str(cwd), status=_MOVE_FAILED), allow_stdin=False, silent=True
        )

    async def warm_up(self) -> None:
        """Runs the code paths of an execution once, so a session's first one is quick."""
        await self._run_silently(_WARM_UP, "warming up")

    async def execute(self, code: str, *, allow_stdin: bool) -> str:
        return self._send_execute(code, allow_stdin=allow_stdin, silent=False)

    async def request_kernel_info(self) -> str:
        assert self._channels is not None, "start() first"
        return self._channels.send("shell", "kernel_info_request", {})

    async def receive(self, timeout: float) -> KernelMessage | None:
        if self._channels is None:
            await asyncio.sleep(timeout)
            return None
        return await self._channels.receive(timeout)

    async def send_input(self, value: str) -> None:
        assert self._channels is not None, "start() first"
        self._channels.send("stdin", "input_reply", {"value": value})

    async def interrupt(self) -> None:
        if not await self.is_alive():
            return
        if self._km is not None:
            await self._km.interrupt_kernel()
        elif self._pgid is not None:
            # As jupyter_client does for interrupt_mode "signal": the whole group.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._pgid, signal.SIGINT)

    async def restart(self) -> None:
        await self.shutdown(now=True)
        await self.start(cwd=self._cwd, env=self._env)

    async def shutdown(self, *, now: bool = False) -> None:
        km, channels = self._km, self._channels
        self._km, self._channels = None, None
        if isinstance(self._process, PidfdProcess):
            if not now and channels is not None:
                await ask_forked_to_stop(self._process, self._info, channels.session)
            if channels is not None:
                channels.close()
            await asyncio.to_thread(self._end_tree)
        elif channels is not None:
            channels.close()
        if km is not None:
            if not now:
                await ask_to_stop(km)
            # What is left, setsid'd descendants included, before the kill
            # below takes the supervisor (the subreaper holding them) with it.
            try:
                await asyncio.to_thread(self._end_tree)
            except RuntimeError:  # interpreter exit: no thread can start any more
                self._end_tree()
            try:
                await asyncio.wait_for(km.shutdown_kernel(now=True), timeout=5)
            except (asyncio.TimeoutError, OSError, RuntimeError):
                pass  # the group kill below is what guarantees the end
        self._kill_group()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    async def is_alive(self) -> bool:
        if self._km is None and self._info is None:
            return False
        process = self._process
        if process is None:
            return False
        code = process.poll()
        if code is None:
            return True
        self._returncode = code
        return False

    def exit_reason(self) -> str | None:
        if self._returncode == _MOVE_FAILED:
            return f"it could not enter its work dir {self._cwd}"
        if self._returncode == CANNOT_CONTAIN:
            return "it could not be contained"
        said = describe_exit(self._returncode)
        if said is not None and self._passed_memory_limit():
            assert self.sandbox is not None and self.sandbox.memory is not None
            said += (
                f", out of memory: the session's limit is {self.sandbox.memory / 2**20:,.0f} MiB "
                "(Sandbox.memory)"
            )
        return said

    def _passed_memory_limit(self) -> bool:
        if self._contained is not None and self._contained.cgroups.out_of_memory():
            self._out_of_memory = True
        return self._out_of_memory

    @property
    def pid(self) -> int | None:
        """The kernel's process id on this host, while it runs (see AsyncSession.kernel_pid)."""
        process = self._process
        return None if process is None or process.poll() is not None else process.pid

    def connection_info(self) -> dict[str, Any] | None:
        """What another client (JupyterLab, jupyter console) needs to reach this kernel."""
        if self._info is not None:
            info: dict[str, Any] = dict(self._info)
        elif self._km is not None:
            info = dict(self._km.get_connection_info(session=False))
        else:
            return None
        key = info.get("key")
        if isinstance(key, bytes):
            info["key"] = key.decode("ascii")
        return info

    # -- internals

    def _zygote(self, env: dict[str, str]) -> Zygote | None:
        if self.python is None and self.kernel_name != "python3":
            return None  # another kernelspec: launched as it says
        return zygote_for(self.python or sys.executable, env, self.preload, self.zygote)

    async def _fork_from(self, zygote: Zygote, cwd: Path, env: dict[str, str]) -> None:
        """Starts the kernel as a fork of ``zygote``, on a connection of our making."""
        self._stderr = tempfile.TemporaryFile()
        self._returncode = None
        path = self._new_connection()
        extra = self._contain(cwd)
        kernel = await zygote.fork(
            connection_file=path,
            cwd=cwd,
            env={**env, "PWD": str(cwd), **extra},
            stderr=self._stderr,
            sandbox=None if self._contained is None else self._contained.policy,
        )
        self._adopt(kernel)

    def _contain(self, cwd: Path) -> dict[str, str]:
        """Makes this start's policy, private dirs and cgroups if contained; its variables."""
        if self.sandbox is None:
            return {}
        assert self._ipc_dir is not None, "the kernel's own dir first"
        self._contained = contained_start(
            self.sandbox, work_dir=cwd, own_dir=self._ipc_dir, movable=self.movable
        )
        self._out_of_memory = False
        return dict(self._contained.env)

    def _new_connection(self) -> str:
        """A connection file (Unix sockets in a new private dir, a new key) for a forked kernel."""
        self._ipc_dir = Path(tempfile.mkdtemp(prefix="kernelexec-ipc-"))
        key = os.urandom(32).hex()
        path, info = write_connection_file(
            str(self._ipc_dir / "kernel.json"),
            transport="ipc",
            ip=str(self._ipc_dir / "kernel"),
            key=key.encode("ascii"),
            signature_scheme="hmac-sha256",
            kernel_name="kernelexec-python",
        )
        os.chmod(path, 0o600)
        self._info = {**info, "key": key}
        return str(path)

    def _adopt(self, kernel: PidfdProcess) -> None:
        assert self._info is not None
        self._process, self._pgid, self.forked = kernel, kernel.pid, True
        _LIVE.add(self)
        key = str(self._info["key"]).encode("ascii")
        session = Session(key=key, signature_scheme="hmac-sha256")
        self._channels = self._sockets(self._info, session)

    async def fork(self, *, cwd: Path, env: dict[str, str], force: bool = False) -> ProcessFork:
        """A new backend whose kernel is a fork of this one's: its Python state, copy-on-write.

        The fork request is queued on the shell channel behind any execution,
        so the copy is taken between executions. The kernel first looks for
        what would not survive the fork (a GPU context, a live OpenMP pool:
        ``_kernel/hazards.py``); unless ``force``, such a hazard declines the
        fork, and the result has no backend. The fork is known by its
        connection to a socket of ours (``ForkWitness``), never by the pid in
        the kernel's reply. This kernel's supervisor is told (by this
        process, the only one it listens to) that the fork is not its to end:
        the fork outlives this kernel.

        Raises:
            KernelStartError: no running kernel of kernelexec's to fork, the
                fork failed, or the new kernel did not answer.
        """
        return await fork_kernel(self, cwd=cwd, env=env, force=force)

    def can_fork(self) -> bool:
        """Whether ``fork()`` can work: kernelexec's own kernel, running, on Linux, uncontained.

        A contained kernel's copy would keep its file access, which can only
        narrow (Landlock), so it could not be given a work dir of its own.
        """
        running = self._channels is not None and self._process is not None
        uncontained = self.sandbox is None
        pidfds = hasattr(os, "pidfd_open")
        return self.forks_as_process and self._boots() and running and uncontained and pidfds

    def _boots(self) -> bool:
        """Whether the kernel is kernelexec's boot script's (others' are launched as is)."""
        return self.python is not None or self.kernel_name == "python3"

    def take_work_dir(self, cwd: Path) -> bool:
        """Moves the running kernel to ``cwd`` (see ``move_to``); False where it cannot go.

        A contained kernel may write only the work dir it was started in, and
        that cannot change: the folder itself, empty, is renamed to ``cwd``
        (Landlock's rule holds the folder, not its name), which must then be an
        empty folder or none, below ``movable`` (the folder kept in the
        kernel's view: see ``_kernel/contain.py``).
        """
        if self.sandbox is not None:
            if self.movable is None or not movable_to(cwd, self.movable):
                return False  # the kernel would not see its new work dir
            try:
                os.rename(self._cwd, cwd)
            except OSError:
                return False
        self.movable = None  # a restart starts in the session's work dir, and stays there
        self.move_to(cwd)
        return True

    async def ask_control(
        self, msg_type: str, content: dict[str, Any], reply: str, timeout: float
    ) -> dict[str, Any] | None:
        """A request to kernelexec's boot script on the control channel; None if unanswered.

        Raises:
            KernelStartError: the kernel is not running, or is not one of
                kernelexec's boot script (another kernelspec's does not know the request).
        """
        channels, info = self._channels, self.connection_info()
        if channels is None or info is None:
            raise KernelStartError("the kernel is not running")
        if self.python is None and self.kernel_name != "python3":
            raise KernelStartError(
                f"the {self.kernel_name!r} kernel was not started by kernelexec's boot script, "
                "which answers this request; use the default kernel (or python=)"
            )
        return await ask_control(
            info,
            channels.session,
            context(),
            msg_type,
            content,
            reply,
            timeout,
            max_message_bytes=self.max_message_bytes,
        )

    def _sockets(self, info: Mapping[str, Any], session: Session) -> KernelSockets:
        return KernelSockets(info, session, context(), max_message_bytes=self.max_message_bytes)

    def _manager(self) -> AsyncKernelManager:
        if self.python is None and self.kernel_name != "python3":
            return AsyncKernelManager(kernel_name=self.kernel_name, context=context())
        python = self.python or sys.executable
        return AsyncKernelManager(
            kernel_name="kernelexec-python",
            kernel_spec_manager=BootSpecs(python, contained=self.sandbox is not None),
            context=context(),
            **self._ipc_transport(),
        )

    def _ipc_transport(self) -> dict[str, str]:
        # TCP ports are chosen free by the client and bound later by the kernel,
        # so on a busy machine a client socket could meet another process in
        # that window. After a failed handshake (a SUB meeting some kernel's
        # ROUTER) libzmq never reconnects: the kernel then starts fine but is
        # never heard on IOPub. Unix sockets in a private dir (0700: only this
        # user can connect) leave nothing to race for.
        if os.name != "posix":
            return {}
        self._ipc_dir = Path(tempfile.mkdtemp(prefix="kernelexec-ipc-"))
        found = {"transport": "ipc", "ip": str(self._ipc_dir / "kernel")}
        if self.sandbox is not None:
            # Where a contained kernel can read it (not Jupyter's runtime dir, in the home).
            found["connection_file"] = str(self._ipc_dir / "kernel.json")
        return found

    def _send_execute(self, code: str, *, allow_stdin: bool, silent: bool) -> str:
        assert self._channels is not None, "start() first"
        content = {
            "code": code,
            "silent": silent,
            "store_history": not silent,
            "user_expressions": {},
            "allow_stdin": allow_stdin,
            "stop_on_error": False,
        }
        return self._channels.send("shell", "execute_request", content)

    async def _wait_ready(self) -> None:
        channels = self._channels
        assert channels is not None

        async def check() -> None:
            if not await self.is_alive():
                raise KernelStartError(self._start_failure())

        if await await_kernel_info(
            ask=self.request_kernel_info,
            receive=self.receive,
            check=check,
            timeout=self.startup_timeout,
            retry=1.0,
            poll=0.1,
            connected=channels.connected,
        ):
            return
        raise KernelStartError(
            f"the kernel did not answer within {self.startup_timeout:g} s; "
            "raise startup_timeout if this machine is slow"
        )

    async def _run_silently(self, code: str, what: str) -> None:
        """Runs set-up code that leaves no trace in the history or the execution count."""
        msg_id = self._send_execute(code, allow_stdin=False, silent=True)
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            item = await self.receive(0.2)
            if item is None:
                if not await self.is_alive():
                    raise KernelStartError(f"the kernel died during {what} ({self.exit_reason()})")
                continue
            channel, msg = item
            if channel != "shell" or msg["parent_header"].get("msg_id") != msg_id:
                continue
            content = msg["content"]
            if content.get("status") != "ok":
                raise KernelStartError(
                    f"{what} failed: {content.get('ename', 'Error')}: {content.get('evalue', '')}"
                )
            return
        raise KernelStartError(
            f"{what} did not finish within {self.startup_timeout:g} s; "
            "raise startup_timeout if it needs longer"
        )

    def _start_failure(self) -> str:
        if self._returncode == NO_IPYKERNEL:
            python = self.python or sys.executable
            return (
                f"{python} cannot import ipykernel; "
                f"install it with: {python} -m pip install ipykernel"
            )
        stderr = ""
        if self._stderr is not None:
            stderr = read_tail(self._stderr, _STDERR_TAIL).decode("utf-8", "replace").strip()
        if self._returncode == CANNOT_CONTAIN:
            return (
                f"{stderr or 'the kernel could not be contained'}; pass sandbox=False to "
                "run it uncontained (serve and mcp: --no-sandbox)"
            )
        return f"the kernel exited during start-up ({self.exit_reason()})" + (
            f"; it said:\n{stderr}" if stderr else ""
        )

    def _end_tree(self) -> None:
        process = self._process
        # Not reaped yet, so its pid cannot have been reused.
        if process is not None and process.poll() is None:
            end_tree(process.pid, spare=self._released)

    def _kill_group(self) -> None:
        _LIVE.discard(self)
        self._end_tree()  # first: the group kill takes the supervisor, which holds the rest
        process, self._process, self._info = self._process, None, None
        pgid, self._pgid = self._pgid, None
        if isinstance(process, PidfdProcess):
            # A process this one did not start: its group only while it lives
            # (then no other group can have its number; it may have none yet,
            # a fork that has not run setsid), itself through its pidfd.
            if pgid is not None and process.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pgid, signal.SIGKILL)
            process.kill()
            process.release()  # after the kill: until released, its pid is not reused
        elif pgid is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)
        self._remove_ipc_dir()

    def _remove_ipc_dir(self) -> None:
        if self._ipc_dir is not None:
            shutil.rmtree(self._ipc_dir, ignore_errors=True)
            self._ipc_dir = None
        contained, self._contained = self._contained, None
        if contained is not None and contained.cgroups.folders:
            self._out_of_memory = self._out_of_memory or contained.cgroups.out_of_memory()
            contained.cgroups.remove_when_empty()


@atexit.register
def _kill_leftover_kernels() -> None:
    for backend in list(_LIVE):
        backend._kill_group()
