"""``kernelexec attach``: a terminal on the very kernel an agent's session is using."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import sys
import uuid
from pathlib import Path
from typing import Any

import httpx
from jupyter_core.paths import jupyter_runtime_dir

from ._environment import server_token

__all__ = ["add_command"]


def add_command(commands: Any) -> None:
    attach = commands.add_parser(
        "attach",
        help="open jupyter console on a session's kernel",
        description="Opens `jupyter console` on the kernel of a session of a running "
        "`kernelexec serve`, to inspect and debug what the agent is doing. What you run "
        "there is not recorded in the agent's transcript.",
    )
    attach.add_argument("session", help="the session id (GET /sessions lists them)")
    attach.add_argument("--url", default="http://127.0.0.1:8765", help="the server's URL")
    attach.add_argument("--token", help="the server's token (default: $KERNELEXEC_TOKEN)")
    attach.add_argument(
        "--print", action="store_true", help="print the jupyter console command, don't run it"
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
    url = f"{args.url.rstrip('/')}/sessions/{args.session}/connection"
    try:
        response = httpx.get(url, headers={"Authorization": f"Bearer {token}"}, trust_env=False)
    except httpx.HTTPError as exc:
        print(f"kernelexec: cannot reach {args.url}: {exc}", file=sys.stderr)
        return 2
    if response.status_code != 200:
        try:
            message = response.json().get("message", response.text)
        except ValueError:
            message = response.text
        print(f"kernelexec: {message}", file=sys.stderr)
        return 2
    path = _write_connection_file(args.session, response.json())
    command = ["jupyter", "console", "--existing", str(path)]
    if args.print:
        print(shlex.join(command))
        return 0
    if shutil.which("jupyter-console") is None:
        print(
            f"kernelexec: jupyter console is not installed (pip install jupyter-console); "
            f"then run: {shlex.join(command)}",
            file=sys.stderr,
        )
        return 2
    os.execvp(command[0], command)


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
    # The file holds the kernel's signing key: readable by its owner only.
    runtime = Path(jupyter_runtime_dir())
    runtime.mkdir(parents=True, exist_ok=True)
    path = runtime / f"kernelexec-{session[:32]}.json"
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as file:
        json.dump(info, file)
    os.chmod(path, 0o600)
    return path
