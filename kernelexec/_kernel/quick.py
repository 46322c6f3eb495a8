"""Per-execution work that ipykernel and IPython do for nothing, not done.

Loaded by ``boot.py`` inside the kernel process (standard library, ipykernel
and IPython only). Each change keeps what the kernel sends exactly as it was;
each reaches into a library's internals, so ``install`` applies a change only
where it finds the internals it was written against, and says which it
applied (``tests/test_kernel_quick.py`` runs on the oldest and the newest
ipykernel we support, so an upgrade that moves them fails there, loudly):

- **the kernel's log**: traitlets sets the app's logger to DEBUG and filters
  at its handler, so each of the several ``log.debug`` calls per message
  built a log record (formatting the whole message) to throw it away. The
  logger's level is raised to its handlers' lowest.
- **signatures**: ipykernel asks ``inspect.signature`` of the shell's
  ``run_cell_async`` on every execution (``_accepts_parameters``); the answer is kept per
  function.
- **the module scans**: as each kernel starts, ipykernel lists the file of
  every loaded module (for its debugger's rules) and IPython keeps the set of
  their names (for ``%reset -f aggressive``), touching every module object
  and name: in a kernel forked from the zygote, the reference counts those
  scans write copy some 8 MB of the zygote's pages into the kernel (with the
  data stack loaded). The zygote makes both once (``remember_modules``), and
  so does a kernel about to be forked (``fork.py``), where modules were loaded
  since; a kernel that has loaded no module since takes them as they are, and
  its scans see no modules. One that has (``len(sys.modules)`` differs: a
  startup file's import) scans as before.
- **plain values**: a cell's value that is an ``int``, ``float``, ``str``...
  went through every one of IPython's formatters (about a dozen, each behind
  a ``decorator``-made wrapper that binds its arguments), to find that only
  ``text/plain`` has anything to say. Where no formatter has a printer
  registered for the value's type (or for the value itself), only
  ``text/plain`` is asked, as IPython would have found.
- **one shell, read by the main thread**: ipykernel 7 reads the shell socket
  in a thread of its own (``Shell channel``) so that it can hand requests to
  subshells (JEP 91), and every request and reply then crosses threads twice
  (through inproc sockets): about a quarter of an idle kernel's CPU per
  execution, and a thread. A kernelexec kernel has no subshells unless
  ``KERNELEXEC_SUBSHELLS=1`` is in its environment: its main thread reads the
  shell socket, as ipykernel 6 did; ``kernel_info`` then does not list
  "kernel subshells", so a client (JupyterLab) sends everything to the one
  shell, and a ``create_subshell_request`` gets an error reply (ipykernel
  would send none). Only for ipykernel's own kernel class (one configured in
  its place keeps the thread).
- **one transform a cell**: for a cell without top-level ``await``,
  ipykernel transforms it (magics, ``!``, ``?``...) and asks whether it must
  run async, then hands the raw cell to the shell's ``run_cell``, which does
  both again: twice IPython's transforms and a compile of the whole cell, for
  nothing (1.4 ms a 30-line cell here, 40 us ``x + 1``). While ipykernel's
  ``do_execute`` has not yet reached the cell's run (IPython's
  ``pre_execute`` event), the shell's second answer for the very same cell
  (the same string object) is its first; outside that window every call is
  IPython's own, so the code's own calls are answered afresh.
- **a stray interrupt does not end the kernel**: ipykernel turns SIGINT into
  ``KeyboardInterrupt`` only while it handles a request, from its
  ``pre_handler_hook`` to its ``post_handler_hook``, and catches it around
  the handler; one that lands in the few bytecodes outside that guard (in
  the hooks, or as the handler's ``finally`` begins) escaped
  ``dispatch_shell``, stopped the event loop, and the kernel's app
  returned: the kernel ended, its variables lost. An interrupt sent as a
  quick cell ends lands there now and then (the host sends one as a cell
  begins when it was asked for before). It is caught around
  ``dispatch_shell`` now: SIGINT is ignored again, as between requests, the
  kernel logs it and says it is idle (so the request ends: a client waits
  for that status), and goes on reading requests.
- **signals wake the event loop**: a signal's Python handler runs only once the
  main thread runs Python again, and the loop waiting on its sockets did not,
  so an interrupt reached an async cell only when the loop next woke (a cell
  awaiting a minute, a minute later, and a timeout restarted the kernel). A
  wakeup pipe the loop reads (``signal.set_wakeup_fd``) wakes it at once.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import os
import sys
import threading
from collections.abc import Iterator
from typing import Any

# Exact types whose instances have no _repr_*_ methods of their own, so only a
# registered printer could give them a format other than text/plain.
_PLAIN_TYPES = (int, float, complex, bool, str, bytes)
_SIGNATURES_KEPT = 64
SUBSHELLS_VARIABLE = "KERNELEXEC_SUBSHELLS"  # 1: the kernel keeps ipykernel's subshells
# Made in the zygote, shared by its kernels: how many modules were loaded, their
# files as ipykernel lists them, their names as IPython keeps them.
_known_count = -1
_known_modules: list[str] | None = None
_known_names: set[str] | None = None


def install(app: Any) -> list[str]:
    """Applies each change the running libraries allow; the names of those applied."""
    applied = []
    if _quiet_log(app.log):
        applied.append("log")
    if _kept_signatures():
        applied.append("signatures")
    if _plain_values(app.shell):
        applied.append("plain-values")
    kernel = getattr(app, "kernel", None)
    shell = getattr(app, "shell", None)
    if kernel is not None and _transform_once(kernel, shell):
        applied.append("transform-once")
    if isinstance(getattr(kernel, "shell_channel_thread", None), _NoShellChannel):
        applied.append("one-shell")
    if kernel is not None and _wake_on_signals(kernel):
        applied.append("signal-wakeup")
    if kernel is not None and _survive_stray_interrupts(kernel):
        applied.append("interrupt-guard")
    if _known_modules is not None and (
        getattr(kernel, "_kernel_modules", None) is _known_modules
        or getattr(shell, "_sys_modules_keys", None) is _known_names
    ):
        applied.append("modules")
    return applied


def remember_modules(changed_only: bool = False) -> None:
    """The loaded modules' files and names, for the kernels this process forks.

    Made once in the zygote, its imports done; in a kernel about to fork
    (``fork.py``), again where modules were loaded since (``changed_only``).
    """
    global _known_count, _known_modules, _known_names
    if changed_only and _nothing_loaded_since():
        return
    _known_modules = [
        m.__file__ for m in sys.modules.copy().values() if hasattr(m, "__file__") and m.__file__
    ]
    _known_names = set(sys.modules.keys())
    _known_count = len(sys.modules)


def _nothing_loaded_since() -> bool:
    """Whether this process has the modules the zygote had when it made its lists.

    By count, so as not to touch them: a kernel imports, it does not unload.
    """
    return _known_modules is not None and len(sys.modules) == _known_count


def lean_app(base: type) -> type:
    """``base`` (ipykernel's app) whose kernel and shell take the zygote's module lists,
    and whose kernel reads the shell socket in its main thread (no subshells)."""

    class LeanKernelApp(base):  # type: ignore[misc]
        def init_sockets(self) -> None:
            from ipykernel import kernelapp

            if _wants_subshells() or _one_shell_kernel(getattr(self, "kernel_class", None)) is None:
                super().init_sockets()
                return
            with _replaced(kernelapp, "ShellChannelThread", _no_thread):
                super().init_sockets()

        def init_kernel(self) -> None:
            one_shell = _one_shell_kernel(getattr(self, "kernel_class", None))
            if one_shell is not None and getattr(self, "shell_channel_thread", 0) is None:
                self.kernel_class = one_shell
            self._init_lean_kernel()

        def _init_lean_kernel(self) -> None:
            if not _nothing_loaded_since():
                super().init_kernel()  # not from a zygote, or more modules: scanned
                return
            from ipykernel import ipkernel

            with _no_modules_in(ipkernel):
                super().init_kernel()
            kernel: Any = self.kernel
            if isinstance(getattr(kernel, "_kernel_modules", None), list):
                kernel._kernel_modules = _known_modules
            debugger: Any = getattr(kernel, "debugger", None)
            if isinstance(getattr(debugger, "kernel_modules", None), list):
                debugger.kernel_modules = _known_modules

        def init_code(self) -> None:
            if _known_names is None:
                super().init_code()
                return
            from IPython.core import shellapp

            with _no_modules_in(shellapp):
                super().init_code()  # startup files and exec_lines run here
            # IPython's snapshot, taken as init_code ends: the zygote's where no
            # module was loaded since, else made as IPython makes it.
            names = _known_names if _nothing_loaded_since() else set(sys.modules.keys())
            self.shell._sys_modules_keys = names

    return LeanKernelApp


def _survive_stray_interrupts(kernel: Any) -> bool:
    """A ``KeyboardInterrupt`` that escapes ``dispatch_shell`` is caught there (see above)."""
    import inspect
    import signal

    dispatch = getattr(kernel, "dispatch_shell", None)
    if getattr(dispatch, "_kernelexec_guard", False):
        return True  # installed already (install runs again in a test)
    if not inspect.iscoroutinefunction(dispatch) or not hasattr(kernel, "_publish_status"):
        return False

    async def guarded(*args: Any, **kwargs: Any) -> Any:
        try:
            return await dispatch(*args, **kwargs)
        except KeyboardInterrupt:
            # First of all, so that another interrupt cannot land here too.
            signal.signal(signal.SIGINT, getattr(kernel, "saved_sigint_handler", signal.SIG_IGN))
            with contextlib.suppress(Exception):
                kernel.log.error("KeyboardInterrupt outside the request's handler, caught")
                kernel._publish_status("idle", "shell")
            return None

    guarded._kernelexec_guard = True  # type: ignore[attr-defined]
    kernel.dispatch_shell = guarded
    return True


_wakeup: list[int] = []  # [pid, read end, write end] of the pipe signals wake the loop through


def _wake_on_signals(kernel: Any) -> bool:
    """A signal wakes the kernel's event loop, so its Python handler runs at once.

    Python runs a signal's handler in the main thread, between bytecodes; while
    the event loop waits in ``epoll`` for a socket, none run. ipykernel puts in
    a SIGINT handler for an async cell that cancels it, and an interrupt then
    waited for the loop's next wake: a cell awaiting a minute ended when the
    minute did, and a timeout restarted the kernel. asyncio wakes its loop only
    for handlers set with ``add_signal_handler``; this sets a wakeup pipe the
    loop reads, once the loop runs (in a forked kernel, again). The kernel's
    ``start`` is where ipykernel takes its loop (``io_loop``), so the pipe is
    set up from there.
    """
    if threading.current_thread() is not threading.main_thread():
        return False
    start = kernel.start

    def start_and_wake() -> None:
        start()
        loop = getattr(kernel, "io_loop", None)
        if loop is not None:
            loop.add_callback(_set_wakeup)

    kernel.start = start_and_wake
    return True


def _set_wakeup() -> None:
    import asyncio
    import signal

    if _wakeup and _wakeup[0] == os.getpid():
        return
    inherited = _wakeup[2] if _wakeup else None
    for fd in _wakeup[1:]:  # a forked kernel's parent's pipe
        with contextlib.suppress(OSError):
            os.close(fd)
    _wakeup.clear()
    read, write = os.pipe()
    os.set_blocking(read, False)
    os.set_blocking(write, False)
    try:
        before = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
    except (ValueError, OSError):
        before = -2  # not settable here: leave signals as they are
    if before not in (-1, inherited):  # someone's (asyncio's add_signal_handler): it wakes a loop
        if before >= 0:
            signal.set_wakeup_fd(before, warn_on_full_buffer=False)
        os.close(read)
        os.close(write)
        return
    asyncio.get_running_loop().add_reader(read, _drain, read)
    _wakeup[:] = [os.getpid(), read, write]


def _drain(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.read(fd, 4096)  # signal numbers: their handlers run as Python regains control


def _wants_subshells() -> bool:
    value = os.environ.get(SUBSHELLS_VARIABLE, "").strip().lower()
    return value in ("1", "true", "yes", "on")


def _no_thread(*args: Any, **kwargs: Any) -> None:
    return None  # what the app makes in place of its shell channel thread


@contextlib.contextmanager
def _replaced(module: Any, name: str, value: Any) -> Iterator[None]:
    """While in the block, ``module``'s global ``name`` is ``value`` (if it has one)."""
    names = vars(module)
    if name not in names:
        yield  # an ipykernel without it: nothing to replace
        return
    real = names[name]
    names[name] = value
    try:
        yield
    finally:
        names[name] = real


class _NoShellChannel:
    """Where ipykernel looks for its shell channel thread, in a kernel that has none.

    False, so ipykernel takes its paths for a kernel without one (``if
    self.shell_channel_thread:``); its ``parent_thread`` is the thread that
    runs the shell, which ipykernel 7.4 asks for, unchecked, before an async
    cell (to cancel it on an interrupt there, as in the main shell).
    """

    def __init__(self) -> None:
        self.parent_thread = threading.current_thread()

    def __bool__(self) -> bool:
        return False


_one_shell_class: dict[type, type] = {}
_NO_SUBSHELLS = {
    "status": "error",
    "ename": "SubshellsOff",
    "evalue": f"this kernel has no subshells; {SUBSHELLS_VARIABLE}=1 in its environment keeps them",
    "traceback": [],
}


def _one_shell_kernel(kernel_class: Any) -> type | None:
    """ipykernel's kernel class, with no shell channel thread; None where that cannot be."""
    from ipykernel import ipkernel, kernelbase

    if kernel_class is not ipkernel.IPythonKernel:
        return None
    supports = vars(kernelbase.Kernel).get("_supports_kernel_subshells")
    if not isinstance(supports, property) or not kernel_class.class_traits().get(
        "shell_channel_thread"
    ):
        return None  # not the ipykernel 7 this was written against
    if kernel_class not in _one_shell_class:

        class OneShellKernel(kernel_class):  # type: ignore[misc]
            """ipykernel's kernel, its shell socket read by the main thread (no subshells)."""

            def __init__(self, **kwargs: Any) -> None:
                super().__init__(**kwargs)
                if getattr(self, "shell_channel_thread", None) is None:
                    self.shell_channel_thread = _NoShellChannel()

            @property
            def _supports_kernel_subshells(self) -> bool:
                return bool(self.shell_channel_thread)

            # ipykernel answers these with nothing where it has no subshells: a
            # client that asks anyway (kernel_info does not list them) would wait.
            async def create_subshell_request(self, socket: Any, ident: Any, parent: Any) -> None:
                await self._subshell_request(socket, ident, parent, "create")

            async def delete_subshell_request(self, socket: Any, ident: Any, parent: Any) -> None:
                await self._subshell_request(socket, ident, parent, "delete")

            async def list_subshell_request(self, socket: Any, ident: Any, parent: Any) -> None:
                await self._subshell_request(socket, ident, parent, "list")

            async def _subshell_request(
                self, socket: Any, ident: Any, parent: Any, verb: str
            ) -> None:
                if self._supports_kernel_subshells:
                    await getattr(super(), f"{verb}_subshell_request")(socket, ident, parent)
                    return
                content = _NO_SUBSHELLS if verb != "list" else {"status": "ok", "subshell_id": []}
                self.session.send(socket, f"{verb}_subshell_reply", content, parent, ident)

        OneShellKernel.__qualname__ = OneShellKernel.__name__
        _one_shell_class[kernel_class] = OneShellKernel
    return _one_shell_class[kernel_class]


def _no_modules_in(module: Any) -> contextlib.AbstractContextManager[None]:
    """While in the block, ``module``'s ``sys`` has no modules to scan."""
    return _replaced(module, "sys", _NoModulesSys(vars(module)["sys"]))


class _NoModulesSys:
    """``sys`` for ipykernel's kernel module while its kernel is made: no modules to scan."""

    def __init__(self, real: Any) -> None:
        object.__setattr__(self, "_real", real)

    @property
    def modules(self) -> dict[str, Any]:
        return {}  # .copy(), .keys() and .values() of it are empty too

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._real, name, value)


def _quiet_log(log: Any) -> bool:
    handlers = [h for h in getattr(log, "handlers", ()) if isinstance(h, logging.Handler)]
    if not isinstance(log, logging.Logger) or not handlers:
        return False
    # Debug records still reach a handler that asks for them (--debug).
    log.setLevel(max(log.level, min(h.level for h in handlers)))
    return True


def _kept_signatures() -> bool:
    from ipykernel import ipkernel

    ask = getattr(ipkernel, "_accepts_parameters", None)
    if ask is None or getattr(ask, "kernelexec_kept", False):
        return ask is not None
    known: dict[tuple[Any, tuple[str, ...]], Any] = {}

    def accepts_parameters(meth: Any, param_names: Any) -> Any:
        # A bound method's signature is its function's: keyed by that, so a
        # run_cell replaced at run time (an extension's) is asked afresh.
        key = (getattr(meth, "__func__", meth), tuple(param_names))
        try:
            return dict(known[key])
        except (KeyError, TypeError):
            pass
        found = ask(meth, param_names)
        if len(known) >= _SIGNATURES_KEPT:
            known.clear()
        try:
            known[key] = dict(found)
        except TypeError:
            pass  # an unhashable callable: asked every time, as before
        return found

    accepts_parameters.kernelexec_kept = True  # type: ignore[attr-defined]
    setattr(ipkernel, "_accepts_parameters", accepts_parameters)  # noqa: B010
    return True


def _plain_values(shell: Any) -> bool:
    from IPython.core import formatters

    display = getattr(shell, "display_formatter", None)
    if type(display) is not formatters.DisplayFormatter:
        return False
    if getattr(display.format, "kernelexec_quick", False):
        return True  # a fork's new app, around the same shell
    # The __call__ of each formatter class IPython makes, but text/plain's: for
    # a value of a plain type, each answers from its registries alone.
    answer_from_registries = {
        formatters.BaseFormatter.__call__,
        formatters.IPythonDisplayFormatter.__call__,
        formatters.MimeBundleFormatter.__call__,
    }
    plain_kind = formatters.PlainTextFormatter
    full = display.format

    def format(obj: Any, include: Any = None, exclude: Any = None) -> Any:
        kind = type(obj)
        if kind in _PLAIN_TYPES and not include and not exclude:
            plain = _only_plain(display, obj, kind, answer_from_registries, plain_kind)
            if plain is not None:
                data = plain(obj)
                if isinstance(data, str):
                    return {"text/plain": data}, {}
        return full(obj, include=include, exclude=exclude)

    format.kernelexec_quick = True  # type: ignore[attr-defined]
    display.format = format  # type: ignore[method-assign]
    return True


def _only_plain(
    display: Any, obj: Any, kind: type, answer_from_registries: set[Any], plain_kind: type
) -> Any:
    """The text/plain formatter, where it is the only one with anything to say for ``obj``."""
    plain = display.formatters.get("text/plain")
    if type(plain) is not plain_kind:
        return None
    others = [display.ipython_display_formatter, display.mimebundle_formatter]
    others += [f for name, f in display.formatters.items() if name != "text/plain"]
    names = [(c.__module__, c.__name__) for c in kind.__mro__]
    for formatter in others:
        if type(formatter).__call__ not in answer_from_registries:
            return None  # a formatter of someone else's making: ask it
        if not formatter.enabled:
            continue
        if id(obj) in formatter.singleton_printers:
            return None
        printers, deferred = formatter.type_printers, formatter.deferred_printers
        if any(c in printers for c in kind.__mro__) or any(n in deferred for n in names):
            return None
    return plain


class _Once:
    """A shell's answers for the cell its kernel is about to run, each given twice at most."""

    def __init__(self, shell: Any) -> None:
        self.armed = False  # from do_execute's start to the cell's run (pre_execute)
        self.transformed: tuple[str, Any] | None = None
        self.run_async: tuple[Any, bool] | None = None
        self.transform_cell = shell.transform_cell
        self.should_run_async = shell.should_run_async

    def disarm(self, *args: Any) -> None:
        self.armed = False
        self.transformed = self.run_async = None

    def transform(self, raw_cell: Any) -> Any:
        kept, self.transformed = self.transformed, None
        if kept is not None and kept[0] is raw_cell:
            return kept[1]
        transformed = self.transform_cell(raw_cell)  # one that raises is kept by nobody
        if self.armed:
            self.transformed = (raw_cell, transformed)
        return transformed

    def asks_async(self, raw_cell: Any, **kwargs: Any) -> Any:
        kept, self.run_async = self.run_async, None
        transformed = kwargs.get("transformed_cell")
        plain = transformed is not None and kwargs.get("preprocessing_exc_tuple") is None
        if plain and kept is not None and kept[0] is transformed:
            return kept[1]
        answer = self.should_run_async(raw_cell, **kwargs)
        if self.armed and plain and isinstance(answer, bool):
            self.run_async = (transformed, answer)
        return answer


def _transform_once(kernel: Any, shell: Any) -> bool:
    from IPython.core.interactiveshell import InteractiveShell

    if not isinstance(shell, InteractiveShell) or shell.__class__.transform_cell is not (
        InteractiveShell.transform_cell
    ):
        return False  # a shell that transforms its own way: asked every time
    made: Any = shell  # its methods replaced on this instance alone
    once = made.__dict__.get("_kernelexec_once")
    if once is None:  # else a fork's new app, around the same shell
        once = made._kernelexec_once = _Once(made)
        made.transform_cell = once.transform
        made.should_run_async = once.asks_async
        made.events.register("pre_execute", once.disarm)
    do_execute = kernel.do_execute
    if getattr(do_execute, "kernelexec_once", None) is once:
        return True
    if not inspect.iscoroutinefunction(do_execute):
        return False  # a kernel class's own, not ipykernel's: left as it is

    @functools.wraps(do_execute)
    async def armed(*args: Any, **kwargs: Any) -> Any:
        once.disarm()
        once.armed = True
        try:
            return await do_execute(*args, **kwargs)
        finally:
            once.disarm()

    armed.kernelexec_once = once  # type: ignore[attr-defined]
    kernel.do_execute = armed
    return True
