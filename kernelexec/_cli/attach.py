"""``kernelexec attach``: a terminal on the very kernel an agent's session is using.

The console talks to a stand-in kernel in this process, which passes every
message through the server's channels WebSocket (``_client/_console.py``):
the console never holds the kernel's key, and the server refuses its
``shutdown_request``. With ``exit`` (which kernelexec's kernels survive) the
console leaves and the agent's kernel runs on.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import shutil
import signal
import sys
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
from jupyter_core.paths import jupyter_runtime_dir

from .._client._console import channels_url, run_bridged
from .._environment import server_token
from .._exceptions import ServerError

__all__ = ["add_command"]


def add_command(commands: Any) -> None:
    attach = commands.add_parser(
        "attach",
        help="open jupyter console on a session's kernel",
        description="Opens `jupyter console` on the kernel of a session of a running "
        "`kernelexec serve`, through the server, to inspect and debug what the agent is "
        "doing. What you run there is not recorded in the agent's transcript, and `exit` "
        "leaves the agent's kernel running.",
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
        help="instead of a console: open a notebook on the kernel in this JupyterLab (started "
        "with --GatewayClient.url pointing at the server) and print the notebook's URL",
    )
    attach.add_argument("--lab-token", default="", help="that JupyterLab's token")
    attach.add_argument(
        "--notebook", default="debug-{session}.ipynb", help="the notebook's path in JupyterLab"
    )
    attach.set_defaults(handler=_attach)


def _attach(args: argparse.Namespace) -> int:
    token = args.token or server_token()
    if not token:
        print(
            "kernelexec: give the server's token with --token or KERNELEXEC_TOKEN", file=sys.stderr
        )
        return 2
    if args.lab:
        return _attach_lab(args)
    if not args.print and shutil.which("jupyter-console") is None:
        print(
            "kernelexec: jupyter console is not installed (pip install jupyter-console)",
            file=sys.stderr,
        )
        return 2
    refusal = _check_session(args.url, args.session, token)
    if refusal is not None:
        print(f"kernelexec: {refusal}", file=sys.stderr)
        return 2
    try:
        return asyncio.run(run_bridged(channels_url(args.url, args.session), token, _console(args)))
    except ServerError as exc:
        print(f"kernelexec: {exc}", file=sys.stderr)
        return 2


def _check_session(url: str, session: str, token: str) -> str | None:
    """Why the server will not let a console on the session's kernel, or None."""
    try:
        response = httpx.get(
            f"{url.rstrip('/')}/api/kernels/{session}",
            headers={"Authorization": f"Bearer {token}"},
            trust_env=False,
            timeout=30,
        )
    except httpx.HTTPError as exc:
        return f"cannot reach {url}: {exc}"
    if response.status_code == 200:
        return None
    try:
        message = str(response.json().get("message", response.text))
    except (ValueError, AttributeError):
        message = response.text[:300]
    return message


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


def _attach_lab(args: argparse.Namespace) -> int:
    # JupyterLab's gateway client lists only the kernels it has a session for, so
    # give it one on the agent's kernel; the notebook then opens on that kernel.
    lab = args.lab.rstrip("/")
    path = args.notebook.format(session=args.session[:8])
    try:
        kernel = str(uuid.UUID(hex=args.session.replace("-", "")))
    except ValueError:
        print(f"kernelexec: {args.session!r} is not a session id", file=sys.stderr)
        return 2
    body = {"path": path, "name": path, "type": "notebook", "kernel": {"id": kernel}}
    headers = {"Authorization": f"token {args.lab_token}"} if args.lab_token else {}
    try:
        response = httpx.post(
            f"{lab}/api/sessions", json=body, headers=headers, trust_env=False, timeout=60
        )
    except httpx.HTTPError as exc:
        print(f"kernelexec: cannot reach JupyterLab at {lab}: {exc}", file=sys.stderr)
        return 2
    if response.status_code != 201:
        print(
            f"kernelexec: JupyterLab refused the session ({response.status_code}): "
            f"{response.text[:300]}",
            file=sys.stderr,
        )
        return 2
    token = f"?token={args.lab_token}" if args.lab_token else ""
    print(f"{lab}/lab/tree/{path}{token}")
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
