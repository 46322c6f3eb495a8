"""A seccomp filter: the system calls a contained kernel may not make.

Loaded by ``contain.py`` inside the kernel's process (standard library only).
The filter is a classic BPF program Linux runs on every system call of this
thread and its later threads and children, for good (a filter can be added,
never removed). A refused call fails with ``EPERM``, as an unprivileged
process's would, so the cell sees an ordinary ``PermissionError`` rather than
a killed kernel. Refused:

- what would undo the containment: new namespaces (``unshare``, ``setns``,
  ``clone`` with a ``CLONE_NEW*`` flag; ``clone3``, whose flags a filter
  cannot read, answers ``ENOSYS`` so that the C library falls back to
  ``clone``) and mounts, old and new API (``mount``, ``pivot_root``,
  ``chroot``, ``open_tree``, ``move_mount``, ``fsopen``...);
- what reads or steers other processes: ``ptrace``, ``process_vm_readv``/
  ``writev``, ``pidfd_getfd``, ``kcmp``, and the terminal ioctls that type
  into a terminal (``TIOCSTI``, ``TIOCLINUX``);
- what reaches into the Linux kernel: ``bpf``, ``perf_event_open``,
  ``userfaultfd``, ``io_uring`` (its requests bypass this filter), the keyring
  (``keyctl``, ``add_key``, ``request_key``), module loading, ``kexec``,
  ``open_by_handle_at``, and the administrator's calls (``reboot``, ``swapon``,
  the clock, ``syslog``, ``acct``, quotas).

A system call of another ABI than the process's own (32-bit calls from a
64-bit process, x32) answers ``ENOSYS``: the tables below are for x86-64 and
arm64, and another architecture cannot be contained.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct

_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2
_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7, "arm64": 0xC00000B7}
_X32_BIT = 0x40000000
# clone's flags that make a namespace: NEWTIME, NEWNS, NEWCGROUP, NEWUTS, NEWIPC,
# NEWUSER, NEWPID, NEWNET.
_CLONE_NEW = 0x80 | 0x20000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000
_CLONE_NEW |= 0x20000000 | 0x40000000
_TIOCSTI, _TIOCLINUX = 0x5412, 0x541C

_DENIED = (
    "ptrace process_vm_readv process_vm_writev kcmp pidfd_getfd "
    "unshare setns mount umount2 pivot_root chroot "
    "open_tree move_mount fsopen fsconfig fsmount fspick mount_setattr "
    "keyctl add_key request_key bpf perf_event_open userfaultfd "
    "io_uring_setup io_uring_enter io_uring_register "
    "kexec_load kexec_file_load init_module finit_module delete_module "
    "open_by_handle_at name_to_handle_at fanotify_init lookup_dcookie "
    "reboot swapon swapoff syslog acct settimeofday clock_settime clock_adjtime adjtimex "
    "quotactl quotactl_fd vhangup iopl ioperm uselib"
).split()
# System call numbers, from the kernel's tables (arch/x86/entry/syscalls/syscall_64.tbl,
# include/uapi/asm-generic/unistd.h for arm64), as "name number" pairs. A name an
# architecture lacks is left out.
_TABLES = {
    "x86_64": """
    ptrace 101 process_vm_readv 310 process_vm_writev 311 kcmp 312 pidfd_getfd 438
    unshare 272 setns 308 mount 165 umount2 166 pivot_root 155 chroot 161 open_tree 428
    move_mount 429 fsopen 430 fsconfig 431 fsmount 432 fspick 433 mount_setattr 442
    keyctl 250 add_key 248 request_key 249 bpf 321 perf_event_open 298 userfaultfd 323
    io_uring_setup 425 io_uring_enter 426 io_uring_register 427 kexec_load 246
    kexec_file_load 320 init_module 175 finit_module 313 delete_module 176
    open_by_handle_at 304 name_to_handle_at 303 fanotify_init 300 lookup_dcookie 212
    reboot 169 swapon 167 swapoff 168 syslog 103 acct 163 settimeofday 164
    clock_settime 227 clock_adjtime 305 adjtimex 159 quotactl 179 quotactl_fd 443
    vhangup 153 iopl 172 ioperm 173 uselib 134 clone 56 clone3 435 ioctl 16
""",
    "aarch64": """
    ptrace 117 process_vm_readv 270 process_vm_writev 271 kcmp 272 pidfd_getfd 438
    unshare 97 setns 268 mount 40 umount2 39 pivot_root 41 chroot 51 open_tree 428
    move_mount 429 fsopen 430 fsconfig 431 fsmount 432 fspick 433 mount_setattr 442
    keyctl 219 add_key 217 request_key 218 bpf 280 perf_event_open 241 userfaultfd 282
    io_uring_setup 425 io_uring_enter 426 io_uring_register 427 kexec_load 104
    kexec_file_load 294 init_module 105 finit_module 273 delete_module 106
    open_by_handle_at 265 name_to_handle_at 264 fanotify_init 262 lookup_dcookie 18
    reboot 142 swapon 224 swapoff 225 syslog 116 acct 89 settimeofday 170 clock_settime 112
    clock_adjtime 266 adjtimex 171 quotactl 60 quotactl_fd 443 vhangup 58 clone 220
    clone3 435 ioctl 29
""",
}
_NUMBERS = {
    machine: dict(zip(words[::2], map(int, words[1::2]), strict=True))
    for machine, words in ((m, t.split()) for m, t in _TABLES.items())
}
_NUMBERS["arm64"] = _NUMBERS["aarch64"]

# Classic BPF opcodes (linux/filter.h) and seccomp's return values.
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_JSET_K = 0x45
_RET_K = 0x06
_ALLOW = 0x7FFF0000
_ERRNO = 0x00050000
# struct seccomp_data: int nr; u32 arch; u64 instruction_pointer; u64 args[6]
_NR, _ARCH, _ARG0, _ARG1 = 0, 4, 16, 24


class SeccompError(OSError):
    """The filter could not be made (another architecture) or installed."""


def supported() -> bool:
    """Whether this machine's architecture has a table here."""
    return platform.machine() in _NUMBERS


def install() -> None:
    """Installs the filter on this thread (inherited by threads and children made later).

    Needs ``no_new_privs`` set first (or CAP_SYS_ADMIN).

    Raises:
        SeccompError: another architecture, or Linux refused the filter.
    """
    libc, prog, _ = compiled()
    zero = ctypes.c_ulong(0)
    if libc.prctl(_PR_SET_SECCOMP, ctypes.c_ulong(_SECCOMP_MODE_FILTER), prog, zero, zero) != 0:
        number = ctypes.get_errno()
        raise SeccompError(number, f"seccomp: {os.strerror(number)}")


_Buffer = ctypes.Array[ctypes.c_char]
_COMPILED: tuple[ctypes.CDLL, _Buffer, _Buffer] | None = None


def compiled() -> tuple[ctypes.CDLL, _Buffer, _Buffer]:
    """The C library, the ``sock_fprog`` and the program it points to; made once.

    A zygote makes them before it forks, so that each kernel only installs them.

    Raises:
        SeccompError: no table for this architecture.
    """
    global _COMPILED
    if _COMPILED is None:
        machine = platform.machine()
        if machine not in _NUMBERS:
            raise SeccompError(0, f"no seccomp table for the {machine} architecture")
        program = program_for(machine)
        code = b"".join(struct.pack("HBBI", *op) for op in program)
        buffer = ctypes.create_string_buffer(code, len(code))
        # struct sock_fprog {unsigned short len; struct sock_filter *filter;}
        fprog = struct.pack("HxxxxxxP", len(program), ctypes.addressof(buffer))
        libc = ctypes.CDLL(None, use_errno=True)
        _COMPILED = (libc, ctypes.create_string_buffer(fprog, len(fprog)), buffer)
        libc.prctl  # noqa: B018  (looked up now, not in each kernel)
    return _COMPILED


def program_for(machine: str) -> list[tuple[int, int, int, int]]:
    """The BPF program, as (code, jump if true, jump if false, k) tuples."""
    numbers = _NUMBERS[machine]
    denied = [numbers[name] for name in _DENIED if name in numbers]
    errno_perm, errno_nosys = _ERRNO | errno.EPERM, _ERRNO | errno.ENOSYS
    # The tail, read from the end: clone with a namespace flag, ioctl's terminal
    # requests, clone3; then allow.
    tail = [
        (_LD_W_ABS, 0, 0, _ARG0),  # clone: its flags
        (_JSET_K, 0, 1, _CLONE_NEW),
        (_RET_K, 0, 0, errno_perm),
        (_RET_K, 0, 0, _ALLOW),
        (_LD_W_ABS, 0, 0, _ARG1),  # ioctl: its request
        (_JEQ_K, 2, 0, _TIOCSTI),
        (_JEQ_K, 1, 0, _TIOCLINUX),
        (_RET_K, 0, 0, _ALLOW),
        (_RET_K, 0, 0, errno_perm),
    ]
    clone_at, ioctl_at = 0, 4  # offsets of those two branches within the tail
    body: list[tuple[int, int, int, int]] = []
    # After the denied list come: jeq clone, jeq ioctl, jeq clone3, ret allow,
    # ret EPERM (shared by every denied number), ret ENOSYS, then the tail.
    after = len(denied)
    for index, number in enumerate(denied):
        to_eperm = after - index - 1 + 4  # skip the rest, the three jeqs and ret allow
        body.append((_JEQ_K, to_eperm, 0, number))
    body += [
        # Jumps count from the next instruction: the tail begins 5 after the first.
        (_JEQ_K, 5 + clone_at, 0, numbers["clone"]),
        (_JEQ_K, 4 + ioctl_at, 0, numbers["ioctl"]),
        (_JEQ_K, 2, 0, numbers["clone3"]),  # to ret ENOSYS
        (_RET_K, 0, 0, _ALLOW),
        (_RET_K, 0, 0, errno_perm),
        (_RET_K, 0, 0, errno_nosys),
    ]
    head = [
        (_LD_W_ABS, 0, 0, _ARCH),
        (_JEQ_K, 1, 0, _AUDIT_ARCH[machine]),
        (_RET_K, 0, 0, errno_nosys),  # another ABI's call
        (_LD_W_ABS, 0, 0, _NR),
    ]
    if machine == "x86_64":
        head += [(_JGE_K, 0, 1, _X32_BIT), (_RET_K, 0, 0, errno_nosys)]
    return head + body + tail
