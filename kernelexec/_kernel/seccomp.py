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
- setuid and setgid bits (``chmod`` and kin, and the mode a file is made
  with): a root kernel would otherwise leave in its work dir a program that
  runs as root for whoever runs it; ``openat2``, whose mode a filter cannot
  read, answers ``ENOSYS`` (the C library does not use it);
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
_SET_ID = 0o6000  # S_ISUID | S_ISGID
# Calls that set a file's mode, and which argument is the mode: a setuid or
# setgid bit is refused, so the kernel leaves no program in its work dir that
# runs as its user (root: as root) for whoever runs it later.
_MODES = {
    "chmod": 1,
    "fchmod": 1,
    "fchmodat": 2,
    "fchmodat2": 2,
    "open": 2,
    "openat": 3,
    "creat": 1,
    "mknod": 1,
    "mknodat": 2,
}
# Answered ENOSYS, as on an older Linux, so that the C library falls back:
# clone3, whose flags a filter cannot read (clone's it can), and openat2,
# whose mode it cannot read (openat's it can).
_NOSYS = ("clone3", "openat2")

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
    chmod 90 fchmod 91 fchmodat 268 fchmodat2 452 open 2 openat 257 creat 85 mknod 133
    mknodat 259 openat2 437
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
    clone3 435 ioctl 29 fchmod 52 fchmodat 53 fchmodat2 452 openat 56 mknodat 33 openat2 437
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
    # Each check: a call whose argument (its low 32 bits) decides; refused
    # (EPERM) when (argument & mask) is not 0, or when it equals one of ``equal``.
    checks: list[tuple[int, int, int, tuple[int, ...]]] = [(numbers["clone"], 0, _CLONE_NEW, ())]
    checks += [(numbers["ioctl"], 1, 0, (_TIOCSTI, _TIOCLINUX))]
    checks += [
        (numbers[name], index, _SET_ID, ()) for name, index in _MODES.items() if name in numbers
    ]
    program: list[tuple[int, int, int, int]] = [
        (_LD_W_ABS, 0, 0, _ARCH),
        (_JEQ_K, 1, 0, _AUDIT_ARCH[machine]),
        (_RET_K, 0, 0, _ERRNO | errno.ENOSYS),  # another ABI's call
        (_LD_W_ABS, 0, 0, _NR),
    ]
    if machine == "x86_64":
        program += [(_JGE_K, 0, 1, _X32_BIT), (_RET_K, 0, 0, _ERRNO | errno.ENOSYS)]
    # Jumps are counted from the next instruction, up to 255: the program is
    # laid out as a list of labelled pieces, then the offsets are filled in.
    jumps: list[tuple[int, str]] = []  # (index of a jeq, the label it jumps to when true)
    for number in denied:
        jumps.append((len(program), "eperm"))
        program.append((_JEQ_K, 0, 0, number))
    for number in (numbers[name] for name in _NOSYS if name in numbers):
        jumps.append((len(program), "enosys"))
        program.append((_JEQ_K, 0, 0, number))
    for i, (number, _, _, _) in enumerate(checks):
        jumps.append((len(program), f"check{i}"))
        program.append((_JEQ_K, 0, 0, number))
    labels: dict[str, int] = {}
    program.append((_RET_K, 0, 0, _ALLOW))  # any other call
    for i, (_, index, mask, equal) in enumerate(checks):
        labels[f"check{i}"] = len(program)
        program.append((_LD_W_ABS, 0, 0, _ARG0 + 8 * index))
        if mask:
            jumps.append((len(program), "eperm"))
            program.append((_JSET_K, 0, 0, mask))
        for value in equal:
            jumps.append((len(program), "eperm"))
            program.append((_JEQ_K, 0, 0, value))
        program.append((_RET_K, 0, 0, _ALLOW))
    # Last, as jumps only go forward.
    labels["eperm"] = len(program)
    program.append((_RET_K, 0, 0, _ERRNO | errno.EPERM))
    labels["enosys"] = len(program)
    program.append((_RET_K, 0, 0, _ERRNO | errno.ENOSYS))
    for at, label in jumps:
        code, _, jump_false, k = program[at]
        offset = labels[label] - at - 1
        if not 0 <= offset <= 255:
            raise SeccompError(0, f"seccomp: a jump of {offset} does not fit")
        program[at] = (code, offset, jump_false, k)
    return program
