"""Starts an IPython kernel guarded and tuned for an agent's use.

Run by path with whatever Python hosts the kernel (it may not have kernelexec
installed), so it imports nothing but the standard library and ipykernel, and
loads its sibling modules by path:

- ``guard.py``: the supervisor and watchdog that tie the kernel's whole process
  tree to its owner, the confinement that keeps the owner's secrets from the
  kernel, and the app tweaks (no parent poller, no IOPub high-water mark, no
  sleep, no connection file left on disk);
- ``streams.py``: bounded, quick stream messages;
- ``caps.py``: displays, results and errors cut to the session's byte caps
  before they are sent;
- ``exits.py``: ``exit``/``quit`` leave the kernel running (its session, not
  its code or an attached console, ends it).
- ``data.py``: DataFrames and figures shown also as data (table and chart
  payloads in their own mimetypes).
- ``quick.py``: per-execution work ipykernel and IPython do for nothing, not done.
- ``made.py``: in a kernel forked from a zygote, the shell and the reading of
  the arguments the zygote made once.
- ``contain.py``: with a policy in ``KERNELEXEC_SANDBOX``, the kernel is
  contained before any of its code runs (namespaces, Landlock, seccomp, limits).

History is kept in memory: an agent's code (and the secrets in it) does not go
into the user's ~/.ipython history database, and concurrent kernels do not
contend for its lock; In, Out and %history work as usual.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import sys
from types import ModuleType
from typing import Any

NO_IPYKERNEL = 97  # exit status kernelexec reads as "install ipykernel"
SANDBOX_VARIABLE = "KERNELEXEC_SANDBOX"  # the policy of a contained kernel, as JSON
_HERE = os.path.dirname(os.path.abspath(__file__))
_APP: Any = None  # app_class()'s


def load(name: str) -> ModuleType:
    """A sibling module, imported by path under a name no user module has."""
    qualified = f"kernelexec_kernel_{name}"
    if qualified in sys.modules:
        return sys.modules[qualified]
    spec = importlib.util.spec_from_file_location(qualified, os.path.join(_HERE, f"{name}.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[qualified] = module
    spec.loader.exec_module(module)
    return module


def _connection_file(argv: list[str]) -> str | None:
    return argv[argv.index("-f") + 1] if "-f" in argv[:-1] else None


def main() -> None:
    guard = load("guard")
    hooks = _site_without_hooks() if sys.flags.no_site else None
    # Returns in the kernel's own process; boot's stays behind as its supervisor.
    guard.protect(_connection_file(sys.argv), box=box(os.environ.pop(SANDBOX_VARIABLE, None)))
    if hooks is not None:
        hooks()
    start_app()


def _site_without_hooks() -> Any:
    """Python's site, but for sitecustomize and usercustomize; what runs those, later.

    A contained kernel's boot starts without site (``python -S``): the hooks
    may start threads (OpenTelemetry's auto-instrumentation does), and the
    namespaces the supervisor makes need a process with one thread. The rest
    of site is done here, before them (the venv's prefix and packages, .pth
    files: the kernel's readable paths are found from ``sys.path``); the hooks
    run in the kernel, once contained, as Python would have run them.
    """
    import site

    kept = site.execsitecustomize, site.execusercustomize
    site.execsitecustomize = site.execusercustomize = lambda: None
    try:
        site.main()
    finally:
        site.execsitecustomize, site.execusercustomize = kept

    def hooks() -> None:
        site.execsitecustomize()
        if site.ENABLE_USER_SITE:
            site.execusercustomize()

    return hooks


def box(policy: Any) -> Any:
    """A ``contain.Box`` for the owner's policy (JSON text or a dict); None for none."""
    if not policy:
        return None
    contain = load("contain")
    try:
        found = json.loads(policy) if isinstance(policy, str) else policy
    except ValueError as exc:
        contain.refuse(f"the policy is not JSON: {exc}")
    if not isinstance(found, dict):
        contain.refuse("the policy is not an object")
    return contain.Box(found, load)


def app_class() -> Any:
    """ipykernel's app with every kernelexec tweak (the module docstring), made once."""
    global _APP
    if _APP is None:
        from ipykernel import kernelapp

        base = load("made").made_app(load("guard").guarded_app(kernelapp.IPKernelApp))
        _APP = load("exits").kept_app(load("caps").capped_app(load("quick").lean_app(base)))
    return _APP


def app_arguments() -> list[str]:
    """The arguments every kernel's app is given, beyond its connection file.

    Only names: the stream class is made in the kernel (``start_app``), never
    in a zygote, whose forks would all take themselves for forks of a kernel.
    """
    return [
        f"--IPKernelApp.outstream_class={load('streams').__name__}.ChunkedOutStream",
        "--HistoryManager.hist_file=:memory:",
    ]


def start_app(after_init: Any = None) -> None:
    """Runs ipykernel's app, tuned, on the connection file in ``sys.argv``.

    A fork of this kernel (``fork.py``) comes back here in the child, with the
    old app unwound, and runs a new app around the old shell; ``after_init``
    is then called with the new app before it starts.
    """
    # A signal mask is inherited through fork and exec: a kernel started from a
    # thread that blocks SIGINT (Ray's workers block it; so may a library user's
    # thread) would never see an interrupt, and every timeout would end in a restart.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    try:
        from ipykernel import kernelapp  # noqa: F401  (the clear error below, first)
    except ImportError:
        sys.stderr.write(
            f"kernelexec: {sys.executable} cannot import ipykernel; "
            f"install it with: {sys.executable} -m pip install ipykernel\n"
        )
        sys.exit(NO_IPYKERNEL)
    streams = load("streams")
    streams.ChunkedOutStream = streams.chunked_outstream()  # type: ignore[attr-defined]
    sys.argv += app_arguments()
    fork = load("fork")
    become: Any = None
    try:
        instance = app_class().instance()
        instance.initialize()
        fork.install(instance.kernel, load)
        load("usage").install(instance.kernel)
        load("variables").install(instance.kernel)
        load("data").install(instance.shell)
        load("quick").install(instance)
        if after_init is not None:
            after_init(instance)
        instance.start()
    except fork.BecomeFork as exc:
        become = exc
    if become is not None:
        # Out of the except clause: inside it, every error the fork's code
        # raised would be chained to BecomeFork, and sys.exc_info() between
        # cells would be it.
        fork.become_fork(become, load, start_app)
        # The fork's own app has ended: leave as a kernel does, but without
        # the old kernel's exit handlers (its streams and sockets are not ours).
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


if __name__ == "__main__":
    main()
