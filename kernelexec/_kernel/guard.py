"""Keeping the kernel's process tree tied to its owner, and the owner's secrets from it.

Loaded by ``boot.py`` inside the kernel's process (standard library and
ipykernel only). kernelexec's own process imports it too, as
``kernelexec._kernel.guard``, for the same process-tree and privilege calls.

- ``protect()``, first thing at boot:

  - the kernel cannot read other processes: it is made non-dumpable (its
    ``/proc/<pid>/environ``, ``mem``, ``fd`` then need CAP_SYS_PTRACE, so a
    sibling kernel of the same uid cannot read its key), and a root kernel
    drops the capabilities that would read a non-dumpable owner anyway;
  - boot's process stays as the kernel's supervisor, a child subreaper: a
    process that leaves the kernel's process group (``setsid``, a double fork)
    is reparented to it, not to init, so it is still found and ended. The
    supervisor ends the whole tree when the kernel ends (even on its own: a
    segfault, ``os._exit``), when it is told to (SIGTERM, as jupyter_client's
    shutdown does when a kernel does not stop), and when its owner is gone
    (even SIGKILLed), then exits as the kernel did, so the owner sees the
    kernel's exit status or signal. It ignores SIGINT: interrupts go to the
    process group and are for the kernel;
  - a watchdog thread in the kernel ends it and its tree if the supervisor is
    gone;

- ``end_tree()``: every process below one, frozen and then killed, in a loop
  until none is left, so a fork loop cannot outrun it;
- the app tweaks: ipykernel's own parent poller is off (the supervisor does
  that job, for the whole tree); IOPub queues without a high-water mark (a zmq
  PUB socket silently drops messages past it, 1000 by default, so a flood
  could lose output and even the final "idle"; the client's small receive
  queue bounds memory instead); no sleep before each reply (ipykernel waits
  0.5 ms); and the connection file is removed once the kernel has read it: the
  key then lives only in this process and its owner's, both non-dumpable.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, NoReturn

try:
    import ctypes
except ImportError:  # a Python built without libffi: no prctl, nothing to confine with
    ctypes = None  # type: ignore[assignment]

_LINUX = sys.platform.startswith("linux")
_PR_SET_DUMPABLE = 4
_PR_CAPBSET_READ = 23
_PR_CAPBSET_DROP = 24
_PR_SET_CHILD_SUBREAPER = 36
_PR_CAP_AMBIENT = 47
_PR_CAP_AMBIENT_CLEAR_ALL = 4
_CAPABILITY_VERSION_3 = 0x20080522
# What a root kernel gives up, from every set including the bounding set, so
# that neither exec nor a setuid-root program brings it back. Each of these
# reads another process's memory or environment in spite of PR_SET_DUMPABLE,
# directly or by way of the Linux kernel:
#   CAP_SYS_PTRACE (19): ptrace, /proc/<pid>/environ, mem and fd of anyone;
#   CAP_SYS_ADMIN (21): perf and BPF on older Linux, and much else;
#   CAP_PERFMON (38), CAP_BPF (39): perf sampling, bpf_probe_read_user;
#   CAP_SYS_MODULE (16): loading code into the Linux kernel;
#   CAP_SYS_RAWIO (17): /dev/mem, /proc/kcore.
# A root kernel keeps the rest and so keeps working as root (apt-get, pip into
# the system, chown); SECBIT_NOROOT would give every program it runs no
# capabilities at all, so it is not set. A root kernel is still root over
# files (it could have cron run something with every capability): these drops
# close the direct reads; hostile code belongs in a non-root or Docker kernel.
DROPPED_CAPABILITIES = (16, 17, 19, 21, 38, 39)
FD_TABLE_SLOTS = 512  # a kernel's table of descriptors, grown at boot (grow_fd_table)
_POLL = 0.2  # seconds between looks at the owner
_END_WITHIN = 10.0  # seconds end_tree keeps at it (a process stuck in the OS)
_PRIVATE_TMP = "tmp"  # a contained kernel's temp dir, in the dir of its sockets
_GIVEN_CONNECTION_FILE: str | None = None  # the owner's, removed once read


def protect(
    connection_file: str | None,
    owner_alive: Callable[[], bool] | None = None,
    owner: int | None = None,
    status_file: str | None = None,
    box: Any = None,
) -> None:
    """Confines this process, then splits off the kernel and guards it.

    Returns in the kernel's process; boot's own process stays behind as the
    supervisor and never returns from here. The supervisor ends the tree
    when ``owner_alive()`` turns False; by default, when this process's
    parent (the owner) is gone. A kernel forked by a zygote, or from another
    kernel, passes a check on the owner itself and the owner's pid
    (``owner``), the only process whose ``release`` it heeds. With
    ``status_file``, the supervisor writes its exit status there (its
    parent may not be the owner, who then cannot wait for it). With ``box``
    (``contain.Box``), the kernel is contained: namespaces made here, the
    rest in the kernel before this returns there.
    """
    global _GIVEN_CONNECTION_FILE
    drop_capabilities()
    set_undumpable()
    info = _read_connection(connection_file)
    _GIVEN_CONNECTION_FILE = connection_file if info is not None else None
    # The process the kernel must not outlive, taken before any fork: read
    # after it, a parent killed in between would already read as init's pid,
    # and the watchdog would then watch init forever (an orphan seen in a
    # stress run: a zygote's fork killed as its start was cancelled).
    parent = os.getppid()
    if box is not None:
        box.enter()
    if _set_subreaper():
        parent = os.getpid()  # this process: it stays behind as the supervisor
        _split_off_kernel(connection_file, info, owner_alive, owner, status_file)
        if box is not None:
            box.seal()
            # The supervisor is outside the kernel's PID namespace, so this is
            # 0 for good; were it to die, its namespace's init would end, and
            # Linux with it every process of the namespace.
            parent = os.getppid()
    elif box is not None:
        box.refuse("no child subreaper (Linux 3.4) to supervise the kernel")
    grow_fd_table()  # here: a fork's table fits the descriptors open, and from here on, threads
    threading.Thread(
        target=_watch_parent, args=(parent, connection_file, info), daemon=True
    ).start()


def grow_fd_table(slots: int = FD_TABLE_SLOTS) -> bool:
    """Grows this process's table of descriptors to ``slots``; call it while it has one thread.

    Linux grows the table as descriptors pass its size (64, then powers of
    two), and while more than one thread shares it each growth waits for an
    RCU grace period (``expand_fdtable``): 10 to 15 ms here, in the middle of
    whatever call opened the descriptor. A kernel has some 55 descriptors once
    started and a fork of one some 100, so a fork passed 64 as its app made
    its sockets (one ``socket()`` took 14.7 ms), and any kernel did at its
    code's first few files or subprocesses. With one thread the growth waits
    for nothing, and the table never shrinks. Returns whether it grew (not
    where the descriptor limit is lower, nor off Linux).
    """
    if not _LINUX:
        return False
    import fcntl
    import resource

    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    top = slots - 1 if soft == resource.RLIM_INFINITY else min(slots, soft) - 1
    if top < 64:
        return False
    # A copy of any open descriptor, at the lowest free number from top: no
    # file is opened, so a contained kernel's Landlock rules do not matter.
    for fd in (0, 1, 2):
        try:
            os.close(fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, top))
        except OSError:  # closed
            continue
        return True
    return False


def set_undumpable() -> bool:
    """Makes this process's /proc files need CAP_SYS_PTRACE, even for its own uid.

    ``environ``, ``mem``, ``fd``, ``maps`` and the like of a non-dumpable
    process are closed to other processes without that capability; core dumps
    are off and a debugger (gdb, py-spy) needs root. ``cmdline`` stays readable
    by everyone. Returns False where this cannot be done (not Linux).
    """
    return _prctl(_PR_SET_DUMPABLE, 0) == 0


def drop_capabilities(capabilities: tuple[int, ...] = DROPPED_CAPABILITIES) -> None:
    """Drops ``capabilities`` from this thread's every set, the bounding set included.

    Run it before any other thread starts: capabilities belong to threads, and
    threads and children made afterwards inherit them. A process without
    CAP_SETPCAP cannot shrink its bounding set; it then has none of these
    capabilities to lose anyway (non-root, or a container started with
    ``--cap-drop``), only a setuid-root program could grant them.
    """
    libc = _libc()
    if libc is None:
        return
    for cap in capabilities:
        if _prctl(_PR_CAPBSET_READ, cap) == 1:
            _prctl(_PR_CAPBSET_DROP, cap)
    _prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL)

    # struct __user_cap_header_struct {u32 version; int pid}, then two
    # struct __user_cap_data_struct {u32 effective, permitted, inheritable}.
    header = (ctypes.c_uint32 * 2)(_CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()
    if libc.capget(header, data) != 0:
        return
    for cap in capabilities:
        word = 3 * (cap // 32)
        for field in range(3):
            data[word + field] &= ~(1 << (cap % 32)) & 0xFFFFFFFF
    libc.capset(header, data)


def descendants(root: int, spare: set[int] | None = None) -> list[int]:
    """Every living process below ``root``, from /proc (zombies left out; none without /proc).

    A process in ``spare`` is left out, with everything below it.
    """
    children: dict[int, list[int]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as file:
                fields = file.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone since the listing
        if fields[0] not in (b"Z", b"X"):
            children.setdefault(int(fields[1]), []).append(int(name))
    found: list[int] = []
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            if spare and child in spare:
                continue
            found.append(child)
            todo.append(child)
    return found


def end_tree(root: int, spare: set[int] | None = None) -> None:
    """Kills every process below ``root`` (not ``root`` itself), until none is left.

    ``spare``: processes left running with everything below them (forks of
    the kernel that have become sessions of their own).

    Each round freezes what it finds (SIGSTOP) and looks again until a look
    finds nothing new, so no process can fork in between, then kills them all.
    A process that left the group or session is still below ``root`` when
    ``root`` (or a process between) is a child subreaper. Gives up after
    ``_END_WITHIN`` seconds on a process the OS does not let go.
    """
    deadline = time.monotonic() + _END_WITHIN
    while time.monotonic() < deadline:
        frozen: set[int] = set()
        while time.monotonic() < deadline:
            fresh = set(descendants(root, spare)) - frozen
            if not fresh:
                break
            for pid in fresh:
                _signal(pid, signal.SIGSTOP)
            frozen |= fresh
        if not frozen:
            return
        for pid in frozen:
            _signal(pid, signal.SIGKILL)
        time.sleep(0.005)  # let the killed become zombies before the next look


def guarded_app(base: type) -> type:
    """``base`` (ipykernel's IPKernelApp) with the app tweaks in the module docstring."""
    import zmq

    class GuardedKernelApp(base):  # type: ignore[misc]
        def initialize(self, argv: Any = None) -> None:
            super().initialize(argv)
            if _GIVEN_CONNECTION_FILE is not None:
                with contextlib.suppress(OSError):
                    os.remove(_GIVEN_CONNECTION_FILE)

        def init_iopub(self, context: Any) -> None:
            context.setsockopt(zmq.SNDHWM, 0)  # default for the sockets made from here on
            super().init_iopub(context)

        def init_poller(self) -> None:
            pass  # the supervisor and the watchdog do this job, for the whole tree

        def init_kernel(self) -> None:
            super().init_kernel()
            self.kernel._execute_sleep = 0.0

    return GuardedKernelApp


# -- the supervisor


def _split_off_kernel(
    connection_file: str | None,
    info: dict[str, Any] | None,
    owner_alive: Callable[[], bool] | None,
    owner_pid: int | None,
    status_file: str | None,
) -> None:
    """Forks; returns in the child, the kernel-to-be; the parent supervises it until it ends.

    The parent is a child subreaper (set before), so every orphan of the
    kernel's tree becomes its child: it reaps them, and ``end_tree`` of itself
    reaches them all.
    """
    owner = os.getppid()
    if owner_alive is None:
        owner_alive = lambda: os.getppid() == owner  # noqa: E731
    owner = owner_pid or owner
    watched = {signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP, RELEASE}
    # Set before the fork, so no interrupt or SIGTERM can catch the supervisor
    # unprepared; the kernel gets the originals back.
    interrupt = signal.signal(signal.SIGINT, signal.SIG_IGN)
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, watched)
    kernel = os.fork()
    if kernel == 0:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        signal.signal(signal.SIGINT, interrupt)
        return
    if (merge := sys.modules.get("kernelexec_kernel_merge")) is not None:
        merge.unmark()  # a zygote's fork: this supervisor holds nothing worth merging
    released: set[int] = set()  # forks of the kernel that are sessions of their own

    def finish(code: int) -> NoReturn:
        _take_releases(owner, released)
        end_tree(os.getpid(), spare=released)
        if status_file is not None:
            with contextlib.suppress(OSError), open(status_file, "w") as file:
                file.write(str(code))
        _exit_with(code)

    status = None
    while status is None:
        received = _wait_signal(watched, _POLL)
        if received is not None and received[0] == RELEASE:
            if received[1] == owner and received[2] > 0:
                released.add(received[2])
            continue
        if received is not None and received[0] != signal.SIGCHLD:
            finish(-received[0])
        if not owner_alive():
            _forget_connection(connection_file, info)
            finish(1)
        status = _reap(kernel)
    _reap(kernel)
    finish(os.waitstatus_to_exitcode(status))


def _reap(kernel: int) -> int | None:
    """Reaps every child that ended (orphans reparented here too); the kernel's status."""
    status = None
    while True:
        try:
            pid, code = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return status
        if pid == 0:
            return status
        if pid == kernel:
            status = code


def _exit_with(code: int) -> NoReturn:
    """Ends this process as one whose exit code (``Popen.returncode``) is ``code``."""
    if code < 0:
        with contextlib.suppress(OSError, ValueError):  # SIGKILL has no handler to reset
            signal.signal(-code, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {-code})
        os.kill(os.getpid(), -code)
        code = 128 - code  # still here: a signal whose default is not to end a process
    os._exit(code)


# -- the kernel's side


def _watch_parent(
    parent_pid: int, connection_file: str | None, info: dict[str, Any] | None
) -> None:
    while True:
        time.sleep(_POLL)
        if os.getppid() != parent_pid:
            try:
                _forget_connection(connection_file, info)
                end_tree(os.getpid())
                os.killpg(0, signal.SIGKILL)
            finally:
                os._exit(1)


def _read_connection(path: str | None) -> dict[str, Any] | None:
    # Read at boot, before the kernel removes the file: clean-up needs it later.
    if path is None:
        return None
    try:
        with open(path) as file:
            info = json.load(file)
    except (OSError, ValueError):
        return None
    return info if isinstance(info, dict) else None


def _forget_connection(path: str | None, info: dict[str, Any] | None) -> None:
    # Their owner, which would have removed them, is gone: the connection file
    # (it holds the kernel's key) if still there, the Unix sockets, a contained
    # kernel's private temp dir (its TMPDIR, there: _containment/_start.py) and
    # their dir if now empty.
    if path is not None:
        with contextlib.suppress(OSError):
            os.remove(path)
    try:
        if info is not None and info.get("transport") == "ipc":
            for channel in ("shell", "iopub", "stdin", "control", "hb"):
                with contextlib.suppress(OSError):
                    os.remove(f"{info['ip']}-{info[f'{channel}_port']}")
            own = os.path.dirname(info["ip"])
            tmp = os.path.join(own, _PRIVATE_TMP)
            if os.path.islink(tmp):
                os.unlink(tmp)  # the kernel's code swapped it: the link goes, not its target
            else:
                shutil.rmtree(tmp, ignore_errors=True)  # links inside are removed, not followed
            os.rmdir(own)
    except (OSError, KeyError, TypeError, AttributeError):
        pass


def _set_subreaper() -> bool:
    return _prctl(_PR_SET_CHILD_SUBREAPER, 1) == 0


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


# A real-time signal the owner sends a supervisor with ``sigqueue``, its value
# a pid: a fork of the kernel the owner made a session of its own. Only the
# owner's counts (the Linux kernel, not the sender, fills in the sender's pid).
RELEASE = signal.SIGRTMIN + 1 if hasattr(signal, "SIGRTMIN") else signal.SIGUSR2
_SI_QUEUE = -1


def release(supervisor: int, pid: int) -> bool:
    """Tells ``supervisor`` (from its owner) that ``pid`` below it is not its to end."""
    libc = _libc()
    if libc is None:
        return False

    class _Value(ctypes.Union):
        _fields_ = [("sival_int", ctypes.c_int), ("sival_ptr", ctypes.c_void_p)]  # noqa: RUF012

    value = _Value()
    value.sival_ptr = pid
    try:
        return int(libc.sigqueue(supervisor, int(RELEASE), value)) == 0
    except (AttributeError, ctypes.ArgumentError):
        return False


def _wait_signal(signals: set[int], timeout: float) -> tuple[int, int, int] | None:
    """(signal, sender's pid, value) of one of ``signals``, or None after ``timeout``.

    libc's sigtimedwait, for the value Python's leaves out; Python's where
    there is no libc to call (no value: no releases).
    """
    libc = _libc()
    if libc is None or not hasattr(libc, "sigtimedwait"):
        found = signal.sigtimedwait(signals, timeout)
        return None if found is None else (found.si_signo, found.si_pid, 0)
    sigset = ctypes.create_string_buffer(128)
    libc.sigemptyset(sigset)
    for number in signals:
        libc.sigaddset(sigset, int(number))
    info = ctypes.create_string_buffer(128)
    seconds = int(timeout)
    wait = (ctypes.c_long * 2)(seconds, int((timeout - seconds) * 1e9))
    number = libc.sigtimedwait(sigset, info, wait)
    if number < 0:
        return None  # timed out, or interrupted
    # Linux's siginfo_t on 64-bit machines: si_signo, si_errno, si_code (ints),
    # then at offset 16 si_pid and si_uid, and for a queued signal si_value at 24.
    code = int.from_bytes(info.raw[8:12], sys.byteorder, signed=True)
    sender = int.from_bytes(info.raw[16:20], sys.byteorder, signed=True)
    value = int.from_bytes(info.raw[24:32], sys.byteorder) if code == _SI_QUEUE else 0
    return int(number), sender, value


def _take_releases(owner: int, released: set[int]) -> None:
    """Releases the owner sent that are still pending, before the tree is ended."""
    while True:
        found = _wait_signal({RELEASE}, 0)
        if found is None:
            return
        if found[1] == owner and found[2] > 0:
            released.add(found[2])


_LIBC: Any = None


def _libc() -> Any:
    """The C library, for prctl and capget/capset; None where there is none to use."""
    global _LIBC
    if _LIBC is None:
        _LIBC = False
        if _LINUX and ctypes is not None:
            with contextlib.suppress(OSError):
                _LIBC = ctypes.CDLL(None, use_errno=True)
    return _LIBC or None


def _prctl(option: int, argument: int = 0) -> int:
    """``prctl(option, argument, 0, 0, 0)``; -1 where it failed or cannot be called."""
    libc = _libc()
    if libc is None:
        return -1
    zero = ctypes.c_ulong(0)
    result: int = libc.prctl(option, ctypes.c_ulong(argument), zero, zero, zero)
    return result
