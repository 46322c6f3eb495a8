"""``kernelexec attach``: a terminal on the very kernel an agent's session is using.

The console talks to a stand-in kernel in this process, which passes every
message through the server's channels WebSocket (``_client/_console.py``):
the console never holds the kernel's key, and the server refuses its
``shutdown_request``. With ``exit`` (which kernelexec's kernels survive) the
console leaves and the agent's kernel runs on.

With ``--lab URL``, a notebook in a JupyterLab that uses the server as its
gateway instead, created and opened on the agent's kernel (``_jupyterlab.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shlex
import shutil
import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
from jupyter_core.paths import jupyter_runtime_dir

from .._client._console import channels_url, run_bridged
from .._environment import server_token
from .._exceptions import ServerError
from ._jupyterlab import open_notebook

__all__ = ["add_command"]

_SESSION_ID = re.compile(r"[0-9a-f]{32}")


def add_command(commands: Any) -> None:
    attach = commands.add_parser(
        "attach",
        help="open jupyter console (or, with --lab, a JupyterLab notebook) on a session's kernel",
        description="Opens `jupyter console` on the kernel of a session of a running "
        "`kernelexec serve`, through the server, to inspect and debug what the agent is "
        "doing. What you run there is recorded in the agent's transcript as yours, and `exit` "
        "leaves the agent's kernel running.",
        epilog="example:\n  kernelexec attach 5d41402abc4b2a76b9719d911017c592 --lab "
        'http://127.0.0.1:8888 --lab-token "$JUPYTER_TOKEN"   # ids: GET /sessions\n',
    )
    attach.add_argument("session", help="the session id (GET /sessions lists them)")
    attach.add_argument("--url", default="http://127.0.0.1:8765", help="the server's URL")
    attach.add_argument("--token", help="the server's token (default: $KERNELEXEC_TOKEN)")
    attach.add_argument(
        "--print",
        action="store_true",
        help="print the jupyter console command (to run elsewhere) instead of running it, "
        "and keep the way to the kernel open until Ctrl-C",
    )
    attach.add_argument(
        "--lab",
        metavar="URL",
        help="instead of a console: create a notebook in this JupyterLab (started with "
        "--GatewayClient.url pointing at the server), open it on the session's kernel and "
        "print its URL",
    )
    attach.add_argument("--lab-token", default="", help="that JupyterLab's token")
    attach.add_argument(
        "--notebook",
        default="debug-{session}.ipynb",
        help="the notebook's path in JupyterLab, created if absent (default: %(default)s)",
    )
    attach.set_defaults(handler=_attach)


def _attach(args: argparse.Namespace) -> int:
    token = args.token or server_token()
    if not token:
        print(
            "kernelexec: give the server's token with --token or KERNELEXEC_TOKEN", file=sys.stderr
        )
        return 2
    session = args.session.replace("-", "").lower()
    if not _SESSION_ID.fullmatch(session):
        print(
            f"kernelexec: {args.session!r} is not a session id (32 hex digits; GET /sessions "
            "lists them)",
            file=sys.stderr,
        )
        return 2
    args.session = session
    if args.lab:
        return _attach_lab(args, token)
    if not args.print and shutil.which("jupyter-console") is None:
        print(
            "kernelexec: jupyter console is not installed (pip install jupyter-console)",
            file=sys.stderr,
        )
        return 2
    model = _server_kernel(args.url, args.session, token)
    if isinstance(model, str):
        print(f"kernelexec: {model}", file=sys.stderr)
        return 2
    try:
        return asyncio.run(run_bridged(channels_url(args.url, args.session), token, _console(args)))
    except ServerError as exc:
        print(f"kernelexec: {exc}", file=sys.stderr)
        return 2


def _server_kernel(url: str, session: str, token: str) -> dict[str, Any] | str:
    """The session's kernel's model on the server, or why it cannot be attached to."""
    try:
        response = httpx.get(
            f"{url.rstrip('/')}/api/kernels/{session}",
            headers={"Authorization": f"Bearer {token}"},
            trust_env=False,
            timeout=30,
        )
    except httpx.HTTPError as exc:
        return f"cannot reach {url}: {exc}"
    try:
        body = response.json()
    except ValueError:
        body = None
    if response.status_code == 200 and isinstance(body, dict):
        return body
    if isinstance(body, dict) and "message" in body:
        return str(body["message"])
    return f"{url} answered {response.status_code}: {response.text[:300]}"


def _console(args: argparse.Namespace) -> Callable[[dict[str, Any]], Awaitable[int]]:
    """What runs while the bridge is up: jupyter console, or (--print) waiting for Ctrl-C."""

    async def use(info: dict[str, Any]) -> int:
        path = _write_connection_file(args.session, info)
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        try:
            if args.print:
                for sig in (signal.SIGINT, signal.SIGTERM):
                    loop.add_signal_handler(sig, stop.set)
                print(shlex.join(["jupyter", "console", "--existing", str(path)]), flush=True)
                await stop.wait()
                return 0
            console = shutil.which("jupyter-console") or "jupyter-console"
            command = [console, "--existing", str(path)]
            if not sys.stdin.isatty():
                command.append("--simple-prompt")  # prompt_toolkit needs a terminal
            process = await asyncio.create_subprocess_exec(*command)
            # Ctrl-C is the console's (it interrupts the kernel); SIGTERM ends both.
            loop.add_signal_handler(signal.SIGINT, lambda: None)
            loop.add_signal_handler(signal.SIGTERM, process.terminate)
            try:
                return await process.wait()
            except asyncio.CancelledError:
                print("\nkernelexec: the server closed the connection", file=sys.stderr)
                process.terminate()
                await process.wait()
                raise
        finally:
            path.unlink(missing_ok=True)

    return use


def _attach_lab(args: argparse.Namespace, token: str) -> int:
    session = args.session
    model = _server_kernel(args.url, session, token)
    if isinstance(model, str):
        print(f"kernelexec: {model}", file=sys.stderr)
        return 2
    url = open_notebook(
        args.lab,
        args.lab_token,
        session=session,
        kernel_name=str(model.get("name") or "python3"),
        path=args.notebook.replace("{session}", session[:8]),
        server_url=args.url.rstrip("/"),
    )
    print(url)
    return 0


def _write_connection_file(session: str, info: dict[str, Any]) -> Path:
    # The file holds the bridge's signing key: readable by its owner only.
    runtime = Path(jupyter_runtime_dir())
    runtime.mkdir(parents=True, exist_ok=True)
    path = runtime / f"kernelexec-{session[:32]}.json"
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as file:
        json.dump(info, file)
    os.chmod(path, 0o600)
    return path
