"""A kernel's IPython shell, made once in the zygote and taken by the kernels it forks.

Loaded by ``boot.py`` (standard library, ipykernel and IPython only). Making
the shell was half of ipykernel's app start (its magics, their argument
parsers, formatters, completer, history, traitlets' configuration of each
part) and parsing the command line a tenth: 30 of its 60 ms with the data
stack (``docs/design.md`` has the steps), and none of it needs a socket, a
thread or anything of the kernel's own. So the zygote reads the arguments
and the config files as a kernel would, and makes the shell from them
(``make``); a kernel it forks takes that reading of its arguments, and is
handed that shell when ipykernel asks for one (``made_app``), with the few
things the shell took from the zygote's process taken again from the
kernel's: its folders (IPython's and the profile's, which a contained kernel
has of its own), its cwd, its streams, its logger and the time its history
session started. What a kernel does with its shell afterwards (extensions,
the inline backend, startup files, exec_lines) is done in the kernel, as
before. A kernel the zygote did not make keeps its own reading of its
arguments the same way, for its forks (``fork.py``), which run a new app on
the same arguments.

A kernel takes the made shell only where nothing could tell the difference:
its configuration equals the zygote's (a config file edited since, or a
contained kernel's own empty profile where the user has config files, and it
makes its own), ipykernel asks for exactly the shell class and arguments the
zygote used, and every step above applies. Otherwise the kernel makes its
shell as ipykernel does. ``taken`` says which happened;
``tests/test_made_shell.py`` runs on the oldest and the newest ipykernel we
support, so an upgrade that moves what this relies on fails there, loudly.
"""

from __future__ import annotations

import atexit
import contextlib
import copy
import datetime
import sys
from pathlib import Path
from typing import Any

# The zygote's: the shell, the configuration it was made with (less the
# connection file, which is per kernel), the compiler class it was given, and
# whether its IPython folder came from the environment (then a kernel's is
# found again from the kernel's environment) or from the configuration.
_shell: Any = None
_config: Any = None
_compiler: Any = None
_dir_from_env = False
# The zygote's reading of a kernel's arguments, its connection file a placeholder.
_PLACEHOLDER = "kernelexec-made-connection-file.json"
_argv: list[str] | None = None
_cli: Any = None
taken = False  # in a kernel: whether its shell is the zygote's
parsed = False  # in a kernel: whether its arguments were the zygote's reading


def make(app_class: type, argv: list[str]) -> bool:
    """In the zygote: the shell a kernel of ``app_class`` started with ``argv`` would make.

    Reads the arguments and the profile's config files as the kernel's app
    does (``BaseIPythonApplication.initialize``: no sockets, no threads), and
    makes the shell as ipykernel's kernel would, less the kernel. Returns
    whether it was made; a configuration this cannot reproduce makes none.
    """
    global _shell, _config, _compiler, _dir_from_env, _argv, _cli
    from ipykernel.compiler import XCachingCompiler
    from ipykernel.zmqshell import ZMQInteractiveShell
    from IPython.core.application import BaseIPythonApplication
    from IPython.paths import get_ipython_dir

    hook = sys.excepthook  # the app's start sets its own: the zygote keeps Python's
    try:
        app = app_class()
        argv = ["-f", _PLACEHOLDER, *argv]
        BaseIPythonApplication.initialize(app, argv)
        config = _comparable(app.config)
        if config is None or app.subapp is not None or app.extra_args:
            return False
        _argv, _cli = argv, copy.deepcopy(app.cli_config)
        shell = ZMQInteractiveShell(
            parent=app,
            profile_dir=app.profile_dir,
            user_module=None,
            user_ns=None,
            kernel=None,
            compiler_class=XCachingCompiler,
        )
    except BaseException:  # a config error ends an app with SystemExit
        return False
    finally:
        sys.excepthook = hook
    _shell, _config, _compiler = shell, config, XCachingCompiler
    _dir_from_env = shell.ipython_dir == get_ipython_dir()
    return True


def _comparable(config: Any) -> Any:
    """``config`` less the connection file, to compare; None if it cannot be compared.

    A section nested in a section (config by a parent's class) would reach the
    shell through its parent, the kernel, which the zygote has not: none then.
    """
    try:
        found = {name: dict(section) for name, section in config.items()}
    except Exception:
        return None
    for section in found.values():
        section.pop("connection_file", None)
        if any(isinstance(value, dict) for value in section.values()):
            return None
    # Reading a missing section of a traitlets Config makes it, empty.
    return {name: section for name, section in found.items() if section}


def made_app(base: type) -> type:
    """``base`` (ipykernel's app) whose kernel takes the zygote's shell where it can."""

    class MadeShellKernelApp(base):  # type: ignore[misc]
        def parse_command_line(self, argv: Any = None) -> None:
            global parsed
            given = list(argv if argv is not None else sys.argv[1:])
            found = _read_as_made(given)
            if found is None:
                super().parse_command_line(argv)
                _keep_reading(given, getattr(self, "cli_config", None))
                return
            # What traitlets' parse_command_line leaves, for arguments it has no
            # help, version or subcommand in: the same, less its parser's 10 ms.
            self.argv = given
            self.cli_config = found
            self.update_config(found)
            self.extra_args = list[str]()
            parsed = True

        def init_kernel(self) -> None:
            global _shell
            shell, _shell = _shell, None  # once: a fork of this kernel keeps its own
            if shell is None or _comparable(self.config) != _config:
                _drop(shell)
                super().init_kernel()
                return
            kind = type(shell)
            offered = "instance" in vars(kind)
            kind.instance = classmethod(_offer(shell))
            try:
                super().init_kernel()
            finally:
                if not offered:
                    del kind.instance
            if not taken:
                _drop(shell)

    return MadeShellKernelApp


def _keep_reading(argv: list[str], cli: Any) -> None:
    """Keeps a kernel's own reading of its arguments, for its forks (``fork.py``).

    A kernel the zygote did not make read them itself; a fork of it runs a new
    app with the same arguments but its own connection file, and takes this
    reading as a zygote's kernel takes the zygote's (10 ms of its start). Kept
    only where the connection file is the one value that names it.
    """
    global _argv, _cli
    if _argv is not None or len(argv) < 2 or argv[0] != "-f":
        return
    try:
        found = copy.deepcopy(cli)
        named = 0
        for section in found.values():
            for name, value in section.items():
                if value == argv[1]:
                    section[name] = type(value)(_PLACEHOLDER)
                    named += 1
    except Exception:
        return
    if named == 1:
        _argv, _cli = ["-f", _PLACEHOLDER, *argv[2:]], found


def _read_as_made(argv: list[str]) -> Any:
    """The zygote's reading of ``argv``, if they differ by the connection file only; else None."""
    if _argv is None or len(argv) != len(_argv) or argv[0] != "-f":
        return None
    if argv[2:] != _argv[2:]:
        return None
    found = copy.deepcopy(_cli)
    for section in found.values():
        for name, value in section.items():
            if value == _PLACEHOLDER:
                section[name] = type(value)(argv[1])  # a DeferredConfigString stays one
    return found


def _offer(shell: Any) -> Any:
    """The shell class's ``instance`` while the kernel is made: ``shell``, where it fits."""
    kind = type(shell)
    # traitlets' SingletonConfigurable, where instance() is defined (kind's is ours, for now).
    base = next(k for k in kind.__mro__[1:] if "instance" in vars(k))

    def instance(cls: type, *args: Any, **kwargs: Any) -> Any:
        global taken
        fits = (
            cls is kind
            and not args
            and getattr(cls, "_instance", None) is None
            and kwargs.get("user_module") is None
            and kwargs.get("user_ns") is None
            and kwargs.get("compiler_class") is _compiler
            and kwargs.get("kernel") is not None
        )
        if fits:
            try:
                _take(shell, kwargs)
            except Exception:
                fits = False
        if not fits:
            return vars(base)["instance"].__func__(cls, *args, **kwargs)
        for k in cls.__mro__:  # as traitlets' instance() registers one
            if k is base:
                break
            if issubclass(k, base):
                k._instance = shell  # type: ignore[attr-defined]
        taken = True
        return shell

    return instance


def _take(shell: Any, kwargs: dict[str, Any]) -> None:
    """What the shell took from the zygote's process when made, taken from this kernel's.

    Each line mirrors a step of ``InteractiveShell.__init__``.
    """
    from IPython.paths import get_ipython_dir

    kernel = kwargs["kernel"]
    shell.parent = kwargs["parent"]
    shell.kernel = kernel
    shell.log = kernel.log
    if _dir_from_env:
        shell.ipython_dir = get_ipython_dir()
    shell.init_profile_dir(kwargs["profile_dir"])
    shell.init_instance_attrs()  # its compiler, cwd and temp files
    state = shell._orig_sys_module_state  # the streams and hook restored at exit
    for name in list(state):
        state[name] = getattr(sys, name)
    shell.init_encoding()
    shell.init_pushd_popd_magic()  # its home
    _renew_lazily(shell, "db", "init_db")
    _renew_lazily(shell, "logger", "init_logger")
    history = shell.history_manager
    history.dir_hist[:] = [Path.cwd()]
    with history.db:
        history.db.execute(
            "UPDATE sessions SET start=? WHERE session==?",
            (datetime.datetime.now().isoformat(" "), history.session_number),
        )
    # Its exit handler, in the place among this kernel's that a new shell's takes.
    atexit.unregister(shell.atexit_operations)
    atexit.register(shell.atexit_operations)


def _renew_lazily(shell: Any, name: str, init: str) -> None:
    """``shell.<name>`` made again from the kernel's folders: on first use (IPython 9),
    or now (IPython 8 makes it in ``__init__``; for ``db``, as it does)."""
    if isinstance(getattr(type(shell), name, None), property):
        setattr(shell, name, None)  # the property makes it again when first read
    elif init == "init_db":
        import os

        shell.db = type(shell.db)(os.path.join(shell.profile_dir.location, "db"))
    else:
        getattr(shell, init)()


def _drop(shell: Any) -> None:
    """A made shell this kernel does not take: its exit handler is not this kernel's."""
    if shell is not None:
        with contextlib.suppress(Exception):
            atexit.unregister(shell.atexit_operations)
