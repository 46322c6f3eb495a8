"""When a contained kernel's code fails on its containment: a note naming the option that allows it.

The cell keeps the operating system's error as it came (``PermissionError``,
``Network is unreachable``); the result's ``message`` adds what an agent (or
its developer) cannot guess from it: that the session is contained, and which
option would allow the action. Read from the error and what the code printed,
so a shell command's failure (``cat: ...: Permission denied``, pip's
``Failed to establish a new connection``) is seen too. A failure that the
containment did not cause (a path missing, a file of the work dir made
read-only) gets no note.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from .._kernel import MASKED
from ._sandbox import Sandbox, gpu_devices

__all__ = ["containment_note"]

# Landlock refuses with EACCES; a write outside the writable paths meets a
# read-only mount first (EROFS).
_DENIED = re.compile(
    r"\[Errno (?:13|30)\] (?:Permission denied|Read-only file system): '(?P<py>[^']+)'"
    r"|(?P<sh>/[^\s:'\"]+)'?: (?:Permission denied|Read-only file system)"
)
# A file in a folder the kernel does not see (hidden under an empty file system).
_MISSING = re.compile(
    r"\[Errno 2\] No such file or directory: '(?P<py>[^']+)'"
    r"|(?P<sh>/[^\s:'\"]+)'?: No such file or directory"
)
# What torch, CuPy, JAX, numba and nvidia-smi say when no GPU can be opened.
_NO_GPU = re.compile(
    r"Found no NVIDIA driver|No CUDA GPUs are available|CUDA driver initialization failed|"
    r"no CUDA-capable device|CUDA_ERROR_NO_DEVICE|cudaErrorNoDevice|CUDA unknown error|"
    r"Unable to initialize backend '(?:cuda|gpu|rocm)'|couldn't communicate with the NVIDIA driver|"
    r"Failed to initialize NVML|CUDA_ERROR_NOT_INITIALIZED|hipErrorNoDevice|"
    r"Unexpected error from cudaGetDeviceCount"
)
_NOT_PERMITTED = re.compile(r"\[Errno 1\] Operation not permitted|Operation not permitted")
_OFFLINE = re.compile(
    r"Network is unreachable|Temporary failure in name resolution|"
    r"Name or service not known|No address associated with hostname|"
    r"\[Errno -3\]|\[Errno 101\]|Could not resolve host|getaddrinfo failed"
)
_REFUSED = re.compile(r"Connection refused|Errno 111|ConnectionRefusedError")
# This machine's own addresses, named in the code or in what it printed.
_LOOPBACK = re.compile(r"127\.\d+\.\d+\.\d+|\blocalhost\b|\[?::1\]?|0\.0\.0\.0")
_INSTALLS = re.compile(r"\b(?:pip3?|uv pip|conda|mamba)\s+install\b")


def containment_note(
    sandbox: Sandbox, *, work_dir: Path, code: str, text: str, raised: bool
) -> str | None:
    """A sentence for the result's message when the failure came from ``sandbox``; else None.

    Args:
        sandbox: the session's policy.
        work_dir: its work dir (a denial there is the file's own mode, not the sandbox).
        code: the code that ran.
        text: what it printed, and its error (name, value, the traceback's end).
        raised: whether the execution ended with an error.
    """
    if not sandbox.network and _OFFLINE.search(text):
        if _INSTALLS.search(code):
            return (
                "This session's kernel is contained and has no network, so packages cannot "
                "be installed from it: ask for them when the session is made (packages=[...]; "
                "the environment is made outside the sandbox), or give it a network "
                "(Sandbox(network=True); kernelexec serve: --allow-network)."
            )
        return (
            "This session's kernel is contained and has no network (only its own loopback): "
            "give it one with sandbox=Sandbox(network=True) (kernelexec serve: a session's "
            'sandbox {"network": true}, allowed by --allow-network).'
        )
    if not sandbox.network and _REFUSED.search(text) and _LOOPBACK.search(f"{code}\n{text}"):
        return (
            "This session's kernel is contained: its 127.0.0.1 is a loopback of its own, not "
            "this machine's, so this machine's services cannot be reached there; "
            "sandbox=Sandbox(network=True) shares this machine's network."
        )
    if not sandbox.gpus and _NO_GPU.search(text) and gpu_devices():
        return (
            "This session's kernel is contained without this machine's GPUs: give it "
            "sandbox=Sandbox(gpus=True) to use them (kernelexec serve: --sandbox-gpus)."
        )
    denied = _denied_path(_DENIED, text, work_dir)
    hidden = _denied_path(_MISSING, text, work_dir)
    if hidden is not None and _hidden(hidden, sandbox):
        return (
            f"This session's kernel is contained: {hidden} is in a folder it does not see "
            "(it sees Python's and the system's files, its work dir and its temp dir). If "
            "the file is there on this machine, give the session "
            "sandbox=Sandbox(read=[...]) to read its folder (kernelexec serve: --sandbox-read "
            "PATH), or Sandbox(write=[...]) to write it."
        )
    if denied is not None:
        return (
            f"This session's kernel is contained: {denied} is outside what it may use (it "
            "reads Python's and the system's files, its work dir and its temp dir, and writes "
            "only those two). To let it read a folder, give the session "
            "sandbox=Sandbox(read=[...]) (kernelexec serve: --sandbox-read PATH); to write "
            "one, Sandbox(write=[...])."
        )
    if _NOT_PERMITTED.search(text) and raised:
        return (
            "This session's kernel is contained: it cannot make namespaces, mount file "
            "systems, trace or signal processes outside its own, or gain privileges "
            "(sandbox=False runs a kernel uncontained)."
        )
    return None


def _hidden(path: str, sandbox: Sandbox) -> bool:
    """Whether ``path`` is below a folder a contained kernel has hidden, and not given back."""
    inside = path + "/"
    hidden = [*MASKED, os.path.expanduser("~")]
    given = [*sandbox.read, *sandbox.write]
    return any(inside.startswith(f + "/") for f in hidden) and not any(
        inside.startswith(g.rstrip("/") + "/") for g in given
    )


def _denied_path(pattern: re.Pattern[str], text: str, work_dir: Path) -> str | None:
    """The first path in ``text`` that ``pattern`` finds, outside the work dir; normalized."""
    roots: set[str] = set()
    for found in pattern.finditer(text):
        path = found.group("py") or found.group("sh")
        if not path:
            continue
        # Found only now: most executions print no path, and realpath costs syscalls.
        roots = roots or {os.path.normpath(work_dir), os.path.realpath(work_dir)}
        # Compared by name only: a path the kernel printed is never looked up
        # here (it may name anything of this machine's, /proc/self/... too).
        # A relative one is from the work dir, where the kernel runs.
        normal = os.path.normpath(os.path.join(work_dir, path))
        if not any((normal + "/").startswith(root + "/") for root in roots):
            return normal
    return None
