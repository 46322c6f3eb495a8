"""Containing a kernel: what its code can reach of this machine, set up in its own process.

Loaded by ``boot.py``'s loader inside the kernel's process (standard library
only), before any code of the session's runs. The owner sends the policy (a
dict, below); ``guard.protect`` calls ``Box.enter`` in boot's process, which
is about to become the supervisor, and ``Box.seal`` in the kernel it forks.
Nothing here can be loosened later: namespaces cannot be left without the
capabilities that are dropped, Landlock and seccomp only ever add
restrictions, and ``no_new_privs`` cannot be unset. A step that fails ends
the process with ``CANNOT_CONTAIN``, its reason on stderr: a kernel told it is
contained is contained, or it does not start.

- ``enter`` (the supervisor-to-be, single-threaded): joins the session's
  cgroups (where the owner could make them: root), then makes a user
  namespace (this user's uid mapped to itself, so files keep their owners) and
  a PID namespace for its children. Its first child is the namespace's init
  (pid 1): it reaps orphans and ends, taking every process of the namespace
  with it, as soon as the supervisor is gone. The supervisor itself stays in
  the owner's PID namespace, where the owner sees, signals and ends the
  kernel's tree as before.
- ``seal`` (the kernel, pid 2, right after its fork): its own mount, IPC,
  cgroup and (unless ``network``) network namespaces; every mount read-only
  but the writable paths (Landlock has no right for ``chmod``, ``utime`` or
  extended attributes); a ``/proc`` that shows only its namespace's
  processes; private ``/dev/shm`` and ptys; a ``/sys`` of its own network
  namespace; the folders where Unix sockets live (``MASKED`` and the home)
  hidden under empty read-only file systems, allowed paths under them bound
  back in place (Landlock cannot refuse a connection to a socket that can be
  named); loopback up; its limits; every capability dropped for good
  (``SECBIT_NOROOT``: a root kernel's programs get none either);
  ``no_new_privs`` (setuid programs run as the caller); Landlock
  (``landlock.py``) on the paths below; seccomp (``seccomp.py``).

Paths readable: the interpreter's (its prefixes, ``sys.path``, this
directory), the system's (``/usr``, ``/lib*``, ``/bin``, ``/sbin``, the
files of ``/etc`` that programs read, not its secrets), ``/proc`` and
``/sys``, and the policy's ``read``. Writable: the work dir, the kernel's own
directory (connection file, sockets, private temp dir), ``/dev/shm`` and the
policy's ``write``. Devices: ``/dev/null`` and its kin, ptys, and the
policy's ``devices`` (the GPUs', where asked for: then the kernel may also
name its own threads, as their driver does).

Policy: ``{"work_dir", "own_dir", "read": [...], "write": [...], "network":
bool, "devices": [...], "movable": [...], "limits": {"open_files", "processes", "data"},
"cgroups": [...], "shm_bytes"}``; ``movable``: a folder kept in view (not
readable) where the work dir will be renamed to (a pool's kernel).

Run as ``python contain.py probe`` it contains a process that does nothing
and prints, as JSON, whether that worked and what is missing.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import json
import os
import resource
import select
import signal
import socket
import stat
import struct
import sys
import tempfile
from collections.abc import Callable, Iterable
from typing import Any, NoReturn

CANNOT_CONTAIN = 96  # the exit status of a kernel that could not be contained
_HERE = os.path.dirname(os.path.abspath(__file__))

_CLONE_NEWNS = 0x00020000
_CLONE_NEWCGROUP = 0x02000000
_CLONE_NEWIPC = 0x08000000
_CLONE_NEWUSER = 0x10000000
_CLONE_NEWPID = 0x20000000
_CLONE_NEWNET = 0x40000000
_MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 2, 4, 8
_MS_BIND, _MS_REC = 4096, 16384
_PR_SET_PDEATHSIG = 1
_PR_CAPBSET_DROP = 24
_PR_SET_SECUREBITS = 28
_PR_SET_NO_NEW_PRIVS = 38
_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
# NOROOT, NO_SETUID_FIXUP, KEEP_CAPS and NO_CAP_AMBIENT_RAISE, each with its lock.
_SECUREBITS = 0b11101111
_CAPABILITY_VERSION_3 = 0x20080522
_MOUNT_SETATTR = 442  # the same number on every architecture
_AT_FDCWD, _AT_RECURSIVE = -100, 0x8000
_MOUNT_ATTR_RDONLY = 0x1
_SIOCSIFFLAGS = 0x8914
_IFF_UP, _IFF_LOOPBACK, _IFF_RUNNING = 0x1, 0x8, 0x40

_SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# What programs read of /etc: the loader's cache, users and groups (no shadow),
# name service and network files, certificates, time zone, MIME types, fonts.
_ETC = (
    "alternatives bash.bashrc ca-certificates ca-certificates.conf crypto-policies "
    "debian_version fonts gai.conf group host.conf hostname hosts inputrc "
    "ld.so.cache ld.so.conf ld.so.conf.d locale.alias locale.conf localtime lsb-release "
    "magic magic.mime mailcap matplotlibrc mime.types networks nsswitch.conf os-release "
    "passwd pki profile protocols python3 resolv.conf rpc services shells ssl terminfo "
    "timezone xdg"
).split()
_DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty")
_PTYS = ("/dev/ptmx", "/dev/pts")
# Where Unix sockets of the machine's services and of this user's programs are
# (a system bus, tmux's or an SSH agent's in /tmp, gpg's in the home): Landlock
# (up to ABI 7) cannot keep a process from connecting to one, so these folders
# are hidden under empty file systems, the allowed paths beneath bound back in
# place. A kernel that waits in a pool keeps the folder its work dir will be
# renamed within (``movable``: a server's work root) in view, which a mount of
# its work dir alone could not follow.
MASKED = ("/run", "/tmp", "/var", "/home", "/root", "/mnt", "/media", "/srv", "/opt")


class ContainmentError(Exception):
    """A step of the containment failed; the process must not run code."""


class Box:
    """One kernel's containment: ``enter`` in its supervisor, ``seal`` in the kernel.

    Args:
        policy: the owner's (see the module docstring).
        load: boot.py's loader, for ``landlock.py`` and ``seccomp.py``.
    """

    def __init__(self, policy: dict[str, Any], load: Callable[[str], Any]) -> None:
        self.policy = policy
        self._load = load
        self._init_pipe: int | None = None

    def enter(self) -> None:
        """Cgroups, a user and a PID namespace, and their init; in the supervisor-to-be."""
        try:
            for folder in self.policy.get("cgroups") or ():
                _write(os.path.join(folder, "cgroup.procs"), str(os.getpid()))
            uid, gid = os.geteuid(), os.getegid()
            threads = _threads()
            if threads > 1:
                # unshare(CLONE_NEWUSER) refuses a process with threads (EINVAL).
                raise ContainmentError(
                    f"the kernel's supervisor has {threads} threads, and a user namespace "
                    "needs one (a .pth file of the kernel's Python started them)"
                )
            _unshare(_CLONE_NEWUSER | _CLONE_NEWPID, "a user and a PID namespace")
            _write("/proc/self/setgroups", "deny")
            _write("/proc/self/uid_map", f"{uid} {uid} 1")
            _write("/proc/self/gid_map", f"{gid} {gid} 1")
            self._init_pipe = _start_init()
        except (OSError, ContainmentError) as exc:
            refuse(exc)

    def seal(self) -> None:
        """Everything else, in the kernel right after its fork, before any code runs."""
        try:
            if self._init_pipe is not None:
                os.close(self._init_pipe)  # only the supervisor holds the init's lifeline
            self._seal()
        except (OSError, ContainmentError) as exc:
            refuse(exc)

    def refuse(self, reason: str) -> NoReturn:
        """Ends this process, which cannot be contained, saying why."""
        refuse(reason)

    def _seal(self) -> None:
        network = bool(self.policy.get("network"))
        flags = _CLONE_NEWNS | _CLONE_NEWIPC | _CLONE_NEWCGROUP
        _unshare(flags | (0 if network else _CLONE_NEWNET), "the kernel's namespaces")
        read, write, devices = self.paths()
        cwd = os.getcwd()
        # Made by a user namespace of less privilege, this mount namespace's
        # mounts are slaves of the owner's: nothing mounted here goes out.
        _read_only_but(write)
        _mount("proc", "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
        if not network:
            _mount("sysfs", "/sys", "sysfs", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
        if os.path.isdir("/dev/shm"):
            size = int(self.policy.get("shm_bytes") or 64 << 20)
            options = f"mode=1777,size={size}"
            _mount("tmpfs", "/dev/shm", "tmpfs", _MS_NOSUID | _MS_NODEV, options)
        if os.path.isdir("/dev/pts"):
            options = "newinstance,ptmxmode=0666,mode=0620"
            _mount("devpts", "/dev/pts", "devpts", _MS_NOSUID | _MS_NOEXEC, options)
        kept = [*read, *write, *devices, *_resolved(self.policy.get("movable") or [])]
        for folder in self.masked():
            _mask(folder, kept)
        os.chdir(cwd)  # the same folder, now through the new mounts
        if not network:
            _loopback_up()
        _limit(self.policy.get("limits") or {})
        _drop_capabilities()
        if _prctl(_PR_SET_NO_NEW_PRIVS, 1) != 0:
            raise _error("no_new_privs")
        # The kernel's own clear_refs (usage.py resets its peak memory there).
        devices.append(f"/proc/{os.getpid()}/clear_refs")
        landlock = self._load("landlock")
        rules = [(p, landlock.READ) for p in read] + [(p, landlock.WRITE) for p in write]
        rules += [(p, landlock.DEVICE) for p in devices]
        if self.policy.get("devices"):  # the GPUs': their driver names the kernel's threads
            rules.append((f"/proc/{os.getpid()}/task", landlock.THREAD_NAMES))
        landlock.restrict(rules)
        self._load("seccomp").install()

    def masked(self) -> list[str]:
        """The folders hidden from the kernel (each resolved; the home's too)."""
        found = _resolved([*MASKED, os.path.expanduser("~")])
        return [f for f in found if f != "/"]

    def paths(self) -> tuple[list[str], list[str], list[str]]:
        """What may be read, written, and used as a device; absolute, links resolved."""
        read = [*prepare(self._load), "/proc", "/sys", *_resolved(self.policy.get("read") or [])]
        write = [self.policy["work_dir"], self.policy["own_dir"], "/dev/shm"]
        write += self.policy.get("write") or []
        devices = [*_DEVICES, *_PTYS, *(self.policy.get("devices") or [])]
        return read, _resolved(write), _resolved(devices)


_PREPARED: list[str] | None = None


def prepare(load: Callable[[str], Any]) -> list[str]:
    """The system's and the interpreter's readable folders, resolved; made once.

    A zygote prepares them (and the seccomp program, and Landlock's ABI level)
    before it forks, so that each kernel only applies them.
    """
    global _PREPARED
    if _PREPARED is None:
        found = [*_SYSTEM, *(f"/etc/{name}" for name in _ETC), *_python_paths()]
        _PREPARED = [p for p in _resolved(found) if os.path.lexists(p)]
        load("landlock").abi()
        with contextlib.suppress(OSError):
            load("seccomp").compiled()
    return _PREPARED


def refuse(reason: BaseException | str) -> NoReturn:
    """Ends this process, which must not run code uncontained, saying why on stderr."""
    with contextlib.suppress(Exception):
        sys.stderr.write(f"kernelexec: the kernel could not be contained: {reason}\n")
        sys.stderr.flush()
    os._exit(CANNOT_CONTAIN)


# -- the steps


def _start_init() -> int:
    """Forks the PID namespace's init; the write end of its lifeline pipe."""
    lifeline, held = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(held)
            _init(lifeline)
        finally:
            os._exit(0)
    os.close(lifeline)
    return held


def _init(lifeline: int) -> NoReturn:
    """Pid 1 of the kernel's namespace: reaps orphans; ends when the supervisor does.

    Linux then kills every process of the namespace. Signals from inside the
    namespace without a handler here are ignored for an init, so the kernel's
    code can neither kill it nor stop it.
    """
    for number in (signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGTSTP):
        signal.signal(number, signal.SIG_IGN)  # a Ctrl-C is for the kernel
    if (merge := sys.modules.get("kernelexec_kernel_merge")) is not None:
        merge.unmark()  # a zygote's fork: this init holds nothing worth merging
    os.closerange(3, lifeline)
    os.closerange(lifeline + 1, 1 << 16)
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    watch = select.poll()
    watch.register(lifeline, select.POLLIN)
    while True:
        if watch.poll(100):
            os._exit(0)  # the supervisor is gone (its end of the pipe closed)
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass


def _mask(folder: str, kept: Iterable[str]) -> None:
    """Hides ``folder`` under an empty tmpfs, ``kept`` paths beneath it bound back in place.

    A folder below one hidden before is hidden already (``isdir`` is False).
    """
    if not os.path.isdir(folder) or os.path.islink(folder):
        return
    inside = sorted({p for p in kept if p.startswith(folder + "/")}, key=len)
    if folder in kept:
        return  # all of it is allowed
    chosen: list[str] = []
    for path in inside:
        if not any(path.startswith(c + "/") for c in chosen):
            chosen.append(path)
    held = []
    for path in chosen:
        with contextlib.suppress(OSError):
            held.append((path, os.open(path, os.O_PATH | os.O_CLOEXEC)))
    _mount("tmpfs", folder, "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=755,size=64k")
    for path, fd in held:
        try:
            if stat.S_ISDIR(os.fstat(fd).st_mode):
                os.makedirs(path, exist_ok=True)
            else:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                os.close(os.open(path, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o600))
            _mount(f"/proc/self/fd/{fd}", path, None, _MS_BIND | _MS_REC)
        finally:
            os.close(fd)
    _set_mount(os.fsencode(folder), _MOUNT_ATTR_RDONLY, 0, recursive=False)


def _read_only_but(writable: Iterable[str]) -> None:
    """Every mount read-only, but for ``writable`` paths, each bound onto itself first.

    Landlock has no right for a file's metadata: without this, the kernel
    could still ``chmod``, ``utime`` or set extended attributes on any file its
    uid owns (a setuid bit on a root-owned program, a secret made readable to
    all). A read-only mount refuses them all (``EROFS``). The binds are made
    while their mounts are still writable: a mount copied from the owner's
    namespace read-only is locked so, and so is a bind of it.
    """
    kept = []
    for path in writable:
        if os.path.exists(path):
            _mount(path, path, None, _MS_BIND | _MS_REC)
            kept.append(path)
    _set_mount(b"/", _MOUNT_ATTR_RDONLY, 0, recursive=True)
    for path in kept:
        _set_mount(os.fsencode(path), 0, _MOUNT_ATTR_RDONLY, recursive=False)


def _loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH22x", b"lo", _IFF_UP | _IFF_LOOPBACK | _IFF_RUNNING)
        fcntl.ioctl(sock.fileno(), _SIOCSIFFLAGS, request)


def _limit(limits: dict[str, Any]) -> None:
    """Lowers the open-files, processes and data-size limits (soft and hard alike)."""
    for name, which in (
        ("open_files", resource.RLIMIT_NOFILE),
        ("processes", resource.RLIMIT_NPROC),
        ("data", resource.RLIMIT_DATA),
    ):
        value = limits.get(name)
        if not value:
            continue
        _, hard = resource.getrlimit(which)
        value = int(value) if hard == resource.RLIM_INFINITY else min(int(value), hard)
        resource.setrlimit(which, (value, value))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _drop_capabilities() -> None:
    """Every capability gone from every set, and none to be had from running a program."""
    with open("/proc/sys/kernel/cap_last_cap") as file:
        last = int(file.read())
    for cap in range(last + 1):
        if _prctl(_PR_CAPBSET_DROP, cap) != 0:
            raise _error(f"dropping capability {cap}")
    _prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL)
    if _prctl(_PR_SET_SECUREBITS, _SECUREBITS) != 0:
        raise _error("securebits")
    libc = _libc()
    header = (ctypes.c_uint32 * 2)(_CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()
    if libc.capset(header, data) != 0:
        raise _error("capset")


# -- paths


def _python_paths() -> list[str]:
    """The interpreter's folders: prefixes, ``sys.path``, this one; never the home or /."""
    found = {
        sys.prefix,
        sys.exec_prefix,
        sys.base_prefix,
        sys.base_exec_prefix,
        os.path.dirname(os.path.realpath(sys.executable)),
        os.path.dirname(os.__file__),
        _HERE,
        *(p for p in sys.path if p),
    }
    home = os.path.realpath(os.path.expanduser("~"))
    chosen = []
    for path in found:
        real = os.path.realpath(path)
        if os.path.isabs(path) and real != "/" and not (home + "/").startswith(real + "/"):
            chosen.append(path)
    return chosen


def _resolved(paths: Iterable[str]) -> list[str]:
    """Each path with its links resolved (a rule and a mount take the target), once."""
    return list(dict.fromkeys(os.path.realpath(p) for p in paths if os.path.isabs(p)))


# -- system calls


_LIBC: Any = None


def _libc() -> Any:
    global _LIBC
    if _LIBC is None:
        _LIBC = ctypes.CDLL(None, use_errno=True)
    return _LIBC


def _prctl(option: int, argument: int = 0) -> int:
    zero = ctypes.c_ulong(0)
    result: int = _libc().prctl(option, ctypes.c_ulong(argument), zero, zero, zero)
    return result


def _unshare(flags: int, what: str) -> None:
    if _libc().unshare(flags) != 0:
        raise _error(f"making {what}")


def _mount(
    source: str | None, target: str, kind: str | None, flags: int, options: str | None = None
) -> None:
    def text(value: str | None) -> bytes | None:
        return None if value is None else os.fsencode(value)

    if _libc().mount(text(source), text(target), text(kind), flags, text(options)) != 0:
        raise _error(f"mounting {kind or source} on {target}")


def _set_mount(path: bytes, attr_set: int, attr_clear: int, *, recursive: bool) -> None:
    """``mount_setattr(2)`` (Linux 5.12): sets and clears flags of the mount at ``path``."""
    # struct mount_attr {u64 attr_set, attr_clr, propagation, userns_fd}
    attr = (ctypes.c_uint64 * 4)(attr_set, attr_clear, 0, 0)
    flags = _AT_RECURSIVE if recursive else 0
    done = _libc().syscall(_MOUNT_SETATTR, _AT_FDCWD, path, flags, attr, ctypes.c_size_t(32))
    if done != 0:
        raise _error(f"mount_setattr on {os.fsdecode(path)}")


def _threads() -> int:
    with contextlib.suppress(OSError, ValueError), open("/proc/self/status") as file:
        for line in file:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    return 1


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _error(what: str) -> ContainmentError:
    number = ctypes.get_errno()
    return ContainmentError(f"{what}: {os.strerror(number)}")


# -- the probe


def probe(load: Callable[[str], Any]) -> dict[str, Any]:
    """Contains a process that does nothing; whether that worked, and what lacks.

    Run in a process of its own (``enter`` needs a single thread).
    """
    landlock, seccomp = load("landlock"), load("seccomp")
    level = landlock.abi()
    report: dict[str, Any] = {"landlock_abi": level, "partial": landlock.missing(level)}
    missing = []
    if level < landlock.MINIMUM_ABI:
        missing.append(f"Landlock ABI {landlock.MINIMUM_ABI} (Linux 6.2), found {level}")
    if not seccomp.supported():
        missing.append("a seccomp table for this architecture")
    if missing:
        return {**report, "ok": False, "missing": missing}
    with tempfile.TemporaryDirectory(prefix="kernelexec-probe-") as folder:
        policy = {"work_dir": folder, "own_dir": folder, "limits": {"processes": 64}}
        readable, writable = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(readable)
            os.dup2(writable, 2)
            box = Box(policy, load)
            box.enter()
            kernel = os.fork()
            if kernel == 0:
                box.seal()
                os._exit(0)
            os._exit(os.waitstatus_to_exitcode(os.waitpid(kernel, 0)[1]) & 0xFF)
        os.close(writable)
        with os.fdopen(readable, "rb") as said:
            text = said.read().decode("utf-8", "replace").strip()
        code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    if code != 0:
        why = text.removeprefix("kernelexec: the kernel could not be contained: ")
        return {**report, "ok": False, "missing": [why or f"exit status {code}"]}
    return {**report, "ok": True, "missing": []}


def _boot_loader() -> Callable[[str], Any]:
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "kernelexec_kernel_boot", os.path.join(_HERE, "boot.py")
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    loader: Callable[[str], Any] = module.load
    return loader


if __name__ == "__main__" and sys.argv[1:] == ["probe"]:
    print(json.dumps(probe(_boot_loader())))
