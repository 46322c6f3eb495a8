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
  data stack loaded). The zygote makes both once (``remember_modules``); a
  kernel that has loaded no module since takes them as they are, and its
  scans see no modules. One that has (``len(sys.modules)`` differs: a fork
  of a live kernel, a startup file's import) scans as before.
- **plain values**: a cell's value that is an ``int``, ``float``, ``str``...
  went through every one of IPython's formatters (about a dozen, each behind
  a ``decorator``-made wrapper that binds its arguments), to find that only
  ``text/plain`` has anything to say. Where no formatter has a printer
  registered for the value's type (or for the value itself), only
  ``text/plain`` is asked, as IPython would have found.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator
from typing import Any

# Exact types whose instances have no _repr_*_ methods of their own, so only a
# registered printer could give them a format other than text/plain.
_PLAIN_TYPES = (int, float, complex, bool, str, bytes)
_SIGNATURES_KEPT = 64
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
    if _known_modules is not None and (
        getattr(kernel, "_kernel_modules", None) is _known_modules
        or getattr(shell, "_sys_modules_keys", None) is _known_names
    ):
        applied.append("modules")
    return applied


def remember_modules() -> None:
    """In the zygote, its imports done: the loaded modules' files and names, made once."""
    global _known_count, _known_modules, _known_names
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
    """``base`` (ipykernel's app) whose kernel and shell take the zygote's module lists."""

    class LeanKernelApp(base):  # type: ignore[misc]
        def init_kernel(self) -> None:
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


@contextlib.contextmanager
def _no_modules_in(module: Any) -> Iterator[None]:
    """While in the block, ``module``'s ``sys`` has no modules to scan."""
    real = vars(module)["sys"]
    vars(module)["sys"] = _NoModulesSys(real)
    try:
        yield
    finally:
        vars(module)["sys"] = real


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
