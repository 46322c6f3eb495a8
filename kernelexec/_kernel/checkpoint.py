"""Saving and loading a kernel's user namespace, variable by variable.

kernelexec sends this file's source to the kernel as code (silently), so it
works in any kernel that runs Python: a local one, a Docker one, a gateway's.
It imports only the standard library at the top; the serializer, cloudpickle,
is imported when a checkpoint is made or loaded, and a kernel whose Python
lacks it gets an ``ImportError`` naming the command that installs it.

Why cloudpickle (not dill): its ``Pickler`` subclasses the C pickler, so
numpy arrays and DataFrames go at the speed of ``pickle`` itself, with
protocol 5 out-of-band buffers written straight to a file (no copy in a
pickle stream); it pickles lambdas, closures and classes and functions
defined in cells by value, and pickles installed modules' objects by
reference. dill's pickler is the pure-Python one (many times slower on large
object graphs) and its extra reach (frames, open files by content) is what a
checkpoint should report, not half-carry.

A checkpoint is files in a staging folder: ``NNNN.pkl`` (the pickle) and
``NNNN.buf`` (its out-of-band buffers, back to back) per variable, and
``report.json``, written last, saying what was carried and what was not. The
owner moves them into the checkpoint directory and writes the manifest.

Each variable has its own pickler, so one that fails costs only itself. Three
things keep the namespace whole across those separate pickles:

- A variable whose object (or a part of it) is the value of a variable saved
  before it is pickled as a reference to that name, so ``b = a`` and an
  instance of a class from a cell come back as the same objects (the class
  really is ``type(instance)``). Classes are saved first, functions last.
- Functions defined in cells get the restored namespace as their globals (not
  a copy of what they used), so a function sees later changes to the names
  it uses, as before.
- A variable whose pickling takes longer than ``variable_timeout`` seconds (a
  ``__reduce__`` that hangs) is stopped by a timer and reported.

What the files may hold together is capped by ``max_bytes`` (the owner's
budget: the room on its disk and the operator's limits): every write is
counted before it is made, and a variable that would pass the cap is stopped
there and reported, so a full disk is never the way a checkpoint learns it
is too big. Each variable left out says why in ``cause``: ``"object"`` (the
object cannot be pickled: a socket, a generator), or a reason that is not
the object's and may pass (``"disk"``: the cap or a full disk, ``"io"``,
``"timeout"``, ``"memory"``). The owner checks the sizes again; this side
only stops early.
"""

from __future__ import annotations

import contextlib
import errno
import importlib
import json
import os
import re
import signal
import sys
import threading
import time
import types
from collections.abc import Iterator
from typing import Any

__all__ = ["dump", "load"]

FORMAT = 1
REPORT = "report.json"
# IPython's own names, not the user's state: the history (In, Out, _, __,
# ___, _i, _ii, _iii, _iN, _N, _ih, _oh, _dh) and the shell's helpers.
_IPYTHON_NAME = re.compile(r"^(_{1,3}|_i{1,3}|_i?\d+|_ih|_oh|_dh|In|Out)$")
_IPYTHON_HELPERS = {"get_ipython", "exit", "quit"}
_ATOMIC = (int, float, complex, bool, str, bytes, type(None), range)


class _TimedOut(Exception):
    pass


class _Missing(Exception):
    pass


class _OverBudget(Exception):
    pass


class _WriteFailed(Exception):
    """Writing a checkpoint file failed: the disk's doing, not the object's."""

    def __init__(self, error: OSError) -> None:
        super().__init__(str(error))
        self.errno = error.errno


_DISK_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


class _Budget:
    """Bytes the checkpoint's files may still take (None: no cap)."""

    def __init__(self, max_bytes: Any) -> None:
        self.left = int(max_bytes) if isinstance(max_bytes, (int, float)) else None

    def spend(self, size: int) -> None:
        if self.left is not None:
            if size > self.left:
                raise _OverBudget(self.left)
            self.left -= size

    def refund(self, size: int) -> None:
        if self.left is not None:
            self.left += size


class _Sink:
    """A file the pickler writes to: each write counted against the budget, then made."""

    def __init__(self, path: str, budget: _Budget) -> None:
        try:
            self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise _WriteFailed(exc) from None
        self.budget = budget
        self.size = 0

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        count = len(view)
        self.budget.spend(count)
        self.size += count
        try:
            while view:
                view = view[os.write(self.fd, view) :]
        except OSError as exc:
            raise _WriteFailed(exc) from None
        return count

    def close(self) -> None:
        os.close(self.fd)


def dump(staging: str, options: dict[str, Any]) -> None:
    """Saves every user variable to ``staging`` (made here) and writes the report.

    Args:
        staging: a folder to make; the owner chose a name nobody has.
        options: ``variable_timeout`` (seconds per variable), ``max_bytes``
            (what the files may take together; None or absent: no cap).

    Raises:
        ImportError: this Python has no cloudpickle.
    """
    cloudpickle = _serializer()
    shell = _shell()
    ns: dict[str, Any] = shell.user_ns
    os.mkdir(staging, 0o700)
    report: dict[str, Any] = {
        "format": FORMAT,
        "python": _python(),
        "execution_count": shell.execution_count,
        "variables": [],
        "modules": {},
        "skipped": [],
        "packages": {"cloudpickle": cloudpickle.__version__},
    }
    names = [n for n in list(ns) if not _is_ipython_name(n, ns, shell)]
    carried: list[str] = []
    for name in names:
        value = ns[name]
        if isinstance(value, types.ModuleType):
            if sys.modules.get(value.__name__) is value:
                report["modules"][name] = value.__name__
            else:
                report["skipped"].append(
                    _skip(name, value, f"module {value.__name__} cannot be imported by name")
                )
        else:
            carried.append(name)
    refs: dict[int, str] = {}
    timeout = float(options.get("variable_timeout", 30.0))
    budget = _Budget(options.get("max_bytes"))
    pickler_class = _pickler_class(cloudpickle)
    for index, name in enumerate(sorted(carried, key=lambda n: _rank(ns[n]))):
        value = ns[name]
        stem = f"{index + 1:04d}"
        started = time.monotonic()
        sinks: list[_Sink] = []
        try:
            with _deadline(timeout):
                entry = _dump_one(pickler_class, staging, stem, value, ns, refs, budget, sinks)
        except KeyboardInterrupt:
            raise  # the owner gave up on the whole checkpoint
        except BaseException as exc:  # any failure costs this variable only
            for sink in sinks:
                budget.refund(sink.size)
            for suffix in (".pkl", ".buf"):
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(staging, stem + suffix))
            report["skipped"].append(_skip(name, value, _reason(exc, timeout), _cause(exc)))
            continue
        entry.update(name=name, type=_type_name(value), seconds=time.monotonic() - started)
        for package in entry["packages"]:
            version = _version(package)
            if version is not None:
                report["packages"][package] = version
        entry["packages"] = sorted(p for p in entry["packages"] if p in report["packages"])
        report["variables"].append(entry)
        if not isinstance(value, _ATOMIC):
            refs[id(value)] = name
    _write_json(os.path.join(staging, REPORT), report)


def load(staging: str, manifest: dict[str, Any], options: dict[str, Any]) -> None:
    """Loads the variables in ``staging`` into the user namespace and writes the report.

    Args:
        staging: the folder the owner copied the variable files into.
        manifest: the checkpoint's manifest (python, packages, variables, modules).
        options: ``on_mismatch`` ("refuse": load nothing when a package differs;
            "skip": leave out the variables that use it), ``variable_timeout``,
            ``execution_count`` (set the shell's count to the checkpoint's).
    """
    report: dict[str, Any] = {"restored": [], "modules": [], "skipped": [], "refused": None}
    path = os.path.join(staging, REPORT)
    python = _python()
    theirs = manifest.get("python", {})
    if (
        theirs.get("version", "")[:2] != python["version"][:2]
        or theirs.get("implementation") != python["implementation"]
    ):
        report["refused"] = (
            f"the checkpoint was made by {_shown_python(theirs)} and this kernel runs "
            f"{_shown_python(python)}; restore it with a kernel on the same Python "
            "(major.minor and implementation)"
        )
        _write_json(path, report)
        return
    changed = _changed_packages(manifest.get("packages", {}))
    if changed and options.get("on_mismatch") == "refuse":
        report["refused"] = (
            "the checkpoint holds objects of packages whose versions differ in this kernel ("
            + ", ".join(changed.values())
            + "); install those versions in the kernel's Python, or restart(keep_state=True) "
            "to carry what does not depend on them"
        )
        _write_json(path, report)
        return
    shell = _shell()
    ns: dict[str, Any] = shell.user_ns
    builtins_entry = ns.get("__builtins__")
    for alias, module in manifest.get("modules", {}).items():
        try:
            ns[alias] = importlib.import_module(module)
            report["modules"].append(alias)
        except BaseException as exc:  # an import may fail any way
            report["skipped"].append(
                {"name": alias, "type": "module", "reason": f"import {module} failed: {exc!r}"}
            )
    loaded: dict[str, Any] = {}
    timeout = float(options.get("variable_timeout", 30.0))
    try:
        for entry in manifest.get("variables", []):
            name = entry["name"]
            blocked = [changed[p] for p in entry.get("packages", []) if p in changed]
            if blocked:
                reason = "its package changed: " + ", ".join(blocked)
                report["skipped"].append({"name": name, "type": entry["type"], "reason": reason})
                continue
            try:
                with _deadline(timeout):
                    value = _load_one(staging, entry, ns, loaded)
            except KeyboardInterrupt:
                raise
            except BaseException as exc:  # any failure costs this variable only
                report["skipped"].append(
                    {"name": name, "type": entry["type"], "reason": _reason(exc, timeout)}
                )
                continue
            ns[name] = loaded[name] = value
            report["restored"].append(name)
    finally:
        # cloudpickle sets a function's __builtins__ to the builtins dict.
        if builtins_entry is not None:
            ns["__builtins__"] = builtins_entry
    count = manifest.get("execution_count")
    if options.get("execution_count") and type(count) is int and count > shell.execution_count:
        shell.execution_count = count
    _write_json(path, report)


# -- saving


def _serializer() -> Any:
    try:
        import cloudpickle
    except ImportError:
        raise ImportError(
            f"kernelexec checkpoints need cloudpickle in the kernel's Python ({sys.executable}); "
            f"install it there: {sys.executable} -m pip install cloudpickle"
        ) from None
    return cloudpickle


def _pickler_class(cloudpickle: Any) -> type:
    class Pickler(cloudpickle.Pickler):  # type: ignore[misc]
        """cloudpickle's, with references to earlier variables and to the namespace."""

        def __init__(self, file: Any, ns: dict[str, Any], refs: dict[int, str], **kw: Any):
            super().__init__(file, protocol=5, **kw)
            # Functions from cells are rebuilt with the namespace as their globals.
            self.globals_ref[id(ns)] = ns
            self.ns, self.refs = ns, refs
            self.packages: set[str] = set()

        def persistent_id(self, obj: Any) -> Any:
            if obj is self.ns:
                return "ns"
            name = self.refs.get(id(obj))
            return None if name is None else ("var", name)

        def reducer_override(self, obj: Any) -> Any:
            if isinstance(obj, types.ModuleType):
                module = obj.__name__
            elif isinstance(obj, (type, types.FunctionType, types.BuiltinFunctionType)):
                module = getattr(obj, "__module__", None) or ""
            else:
                module = type(obj).__module__ or ""
            self.packages.add(module.partition(".")[0])
            return super().reducer_override(obj)

    return Pickler


def _dump_one(
    pickler_class: type,
    staging: str,
    stem: str,
    value: Any,
    ns: dict[str, Any],
    refs: dict[int, str],
    budget: _Budget,
    sinks: list[_Sink],
) -> dict[str, Any]:
    buffers: list[int] = []
    raw = _Sink(os.path.join(staging, stem + ".buf"), budget)
    sinks.append(raw)
    try:

        def out_of_band(buffer: Any) -> bool:
            with buffer.raw() as view:
                raw.write(view)
                buffers.append(view.nbytes)
            return False

        # Unbuffered: the pickler writes whole frames (64 KiB) or whole large objects.
        file = _Sink(os.path.join(staging, stem + ".pkl"), budget)
        sinks.append(file)
        try:
            pickler = pickler_class(file, ns, refs, buffer_callback=out_of_band)
            pickler.dump(value)
        finally:
            file.close()
    finally:
        raw.close()
    size = file.size + sum(buffers)
    packages = {p for p in pickler.packages if p and _is_third_party(p)}
    return {"file": stem, "size": size, "buffers": buffers, "packages": packages}


def _rank(value: Any) -> int:
    # Classes before the instances that need them; functions after the data they use.
    if isinstance(value, type):
        return 0
    if isinstance(value, (types.FunctionType, types.MethodType)):
        return 2
    return 1


@contextlib.contextmanager
def _deadline(seconds: float) -> Iterator[None]:
    """Raises _TimedOut in this (the main) thread after ``seconds``."""
    if threading.current_thread() is not threading.main_thread() or seconds <= 0:
        yield
        return

    def expire(signum: int, frame: Any) -> None:
        raise _TimedOut

    previous = signal.signal(signal.SIGALRM, expire) or signal.SIG_DFL
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _is_ipython_name(name: str, ns: dict[str, Any], shell: Any) -> bool:
    if name.startswith("__") and name.endswith("__"):
        return True  # __builtins__, __name__, __doc__, ...
    if _IPYTHON_NAME.match(name):
        return True
    hidden = getattr(shell, "user_ns_hidden", {})
    if name in hidden and hidden[name] is ns[name]:
        return True
    if name not in _IPYTHON_HELPERS:
        return False
    value = ns[name]
    module = getattr(value, "__module__", None) or type(value).__module__ or ""
    return module.startswith(("IPython", "ipykernel", "kernelexec"))


def _is_third_party(package: str) -> bool:
    if package in ("__main__", "builtins", "cloudpickle", "copyreg", "_pickle"):
        return False
    return package not in getattr(sys, "stdlib_module_names", ())


def _version(package: str) -> str | None:
    module = sys.modules.get(package)
    version = getattr(module, "__version__", None)
    if isinstance(version, str):
        return version
    try:
        from importlib import metadata

        return metadata.version(package)
    except Exception:
        return None  # a module of the work dir, say: no version to hold it to


# -- loading


def _changed_packages(recorded: dict[str, Any]) -> dict[str, str]:
    """The packages whose version here differs from the recorded one, with a note each."""
    changed = {}
    for package, version in recorded.items():
        try:
            importlib.import_module(package)
            here = _version(package)
        except BaseException:  # a broken install is a difference
            here = None
        if here != version:
            changed[package] = f"{package} {version} in the checkpoint, {here or 'none'} here"
    return changed


def _load_one(
    staging: str, entry: dict[str, Any], ns: dict[str, Any], loaded: dict[str, Any]
) -> Any:
    import pickle

    stem = entry["file"]
    sizes = [int(n) for n in entry.get("buffers", [])]
    memory = bytearray(sum(sizes))
    with open(os.path.join(staging, stem + ".buf"), "rb") as raw:
        if raw.readinto(memory) != len(memory):
            raise ValueError("its buffer file is shorter than the manifest says")
    view, buffers, offset = memoryview(memory), [], 0
    for size in sizes:
        buffers.append(view[offset : offset + size])
        offset += size

    class Unpickler(pickle.Unpickler):
        def persistent_load(self, pid: Any) -> Any:
            if pid == "ns":
                return ns
            if isinstance(pid, tuple) and len(pid) == 2 and pid[0] == "var":
                if pid[1] in loaded:
                    return loaded[pid[1]]
                raise _Missing(pid[1])
            raise pickle.UnpicklingError(f"unknown reference {pid!r}")

    with open(os.path.join(staging, stem + ".pkl"), "rb", buffering=1 << 20) as file:
        return Unpickler(file, buffers=buffers).load()


# -- both


def _shell() -> Any:
    from IPython.core.getipython import get_ipython

    shell = get_ipython()
    if shell is None:
        raise RuntimeError("not in an IPython kernel")
    return shell


def _python() -> dict[str, Any]:
    return {
        "version": list(sys.version_info[:3]),
        "implementation": sys.implementation.name,
        "executable": sys.executable,
    }


def _shown_python(python: dict[str, Any]) -> str:
    version = ".".join(str(p) for p in python.get("version", [])) or "an unknown Python"
    return f"{python.get('implementation', 'python')} {version}"


def _skip(name: str, value: Any, reason: str, cause: str = "object") -> dict[str, str]:
    return {"name": name, "type": _type_name(value), "reason": reason, "cause": cause}


def _cause(exc: BaseException) -> str:
    """Whether the object itself was in the way ("object"), or what else was."""
    if isinstance(exc, _OverBudget) or (isinstance(exc, _WriteFailed) and exc.errno in _DISK_FULL):
        return "disk"
    if isinstance(exc, _WriteFailed):
        return "io"
    if isinstance(exc, _TimedOut):
        return "timeout"
    if isinstance(exc, MemoryError):
        return "memory"
    return "object"


def _type_name(value: Any) -> str:
    kind = type(value)
    module = kind.__module__
    return (
        kind.__qualname__ if module in ("builtins", "__main__") else f"{module}.{kind.__qualname__}"
    )


def _reason(exc: BaseException, timeout: float) -> str:
    if isinstance(exc, _TimedOut):
        return f"took longer than {timeout:g} s (variable_timeout) and was stopped"
    if isinstance(exc, _Missing):
        return f"it refers to {exc.args[0]!r}, which was not restored"
    if isinstance(exc, _OverBudget):
        return f"it would pass the checkpoint's byte budget ({exc.args[0]:,} bytes were left)"
    if isinstance(exc, _WriteFailed):
        return f"writing it failed: {exc}"
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= 500 else text[:497] + "..."


def _write_json(path: str, data: dict[str, Any]) -> None:
    with open(path, "w", encoding="utf-8") as file:
        json.dump(data, file)
