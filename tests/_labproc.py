"""A real JupyterLab on a free loopback port, using a ``kernelexec serve`` as its gateway."""

from __future__ import annotations

import json
import os
import pty
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
from _serverproc import ServerProcess, free_port

__all__ = ["LAB_TOKEN", "LabProcess"]

LAB_TOKEN = "lab-token-0123"


class LabProcess:
    """``python -m jupyterlab`` with ``--GatewayClient.url`` at ``gateway``, until ``stop()``.

    Args:
        root: JupyterLab's root dir (its contents API serves files from there).
        gateway: the kernelexec server JupyterLab uses for its kernels, or None
            for a JupyterLab with kernels of its own.
        argv: more of the command line, as a person adds it (a file to open).
    """

    def __init__(
        self, root: Path, gateway: ServerProcess | None, argv: tuple[str, ...] = ()
    ) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.root = root
        self.token = LAB_TOKEN
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = root.parent / f"jupyterlab-{root.name}.log"
        self._log_file = self.log.open("w")
        through = (
            [f"--GatewayClient.url={gateway.url}", f"--GatewayClient.auth_token={gateway.token}"]
            if gateway is not None
            else []
        )
        # Settings and workspaces of its own, not the user's: news never asked about
        # (its toast would cover the README's picture), no tabs from another run.
        settings = root.parent / f"lab-settings-{root.name}"
        notification = settings / "@jupyterlab" / "apputils-extension"
        notification.mkdir(parents=True, exist_ok=True)
        (notification / "notification.jupyterlab-settings").write_text(
            json.dumps({"fetchNews": "false", "checkForUpdates": False})
        )
        env = {
            **os.environ,
            "JUPYTERLAB_SETTINGS_DIR": str(settings),
            "JUPYTERLAB_WORKSPACES_DIR": str(root.parent / f"lab-workspaces-{root.name}"),
        }
        # On a terminal, as a person runs it: Ctrl-C then asks before it stops.
        self._terminal, tty = pty.openpty()
        self.proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root"),
                *(f"--port={self.port}", "--ip=127.0.0.1", f"--IdentityProvider.token={LAB_TOKEN}"),
                f"--ServerApp.root_dir={root}",
                *through,
                "--LabApp.news_url=",
                "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
                *argv,
            ],
            stdin=tty,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            cwd=root,
            env=env,
        )
        os.close(tty)
        self.http = httpx.Client(
            base_url=self.url,
            headers={"Authorization": f"token {LAB_TOKEN}"},
            trust_env=False,
            timeout=httpx.Timeout(30.0, read=120.0),
        )
        self._wait_ready()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"JupyterLab exited: {self.log.read_text()}")
            try:
                if self.http.get("/api/status").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.3)
        self.proc.kill()
        raise RuntimeError(f"JupyterLab did not start: {self.log.read_text()}")

    def attach_args(self, server: ServerProcess, session_id: str) -> list[str]:
        """``kernelexec attach --lab`` on this JupyterLab, as a person types it."""
        return [
            *(sys.executable, "-m", "kernelexec", "attach", session_id),
            *("--url", server.url, "--token", server.token),
            *("--lab", self.url, "--lab-token", self.token),
        ]

    def sessions(self) -> list[dict[str, Any]]:
        """JupyterLab's sessions (each a notebook or console and its kernel)."""
        found: list[dict[str, Any]] = self.http.get("/api/sessions").json()
        return found

    def wait_log(self, text: str, timeout: float = 60) -> None:
        """Returns once JupyterLab's log holds ``text``."""
        deadline = time.monotonic() + timeout
        while text not in self.log.read_text():
            if time.monotonic() > deadline:
                raise AssertionError(f"JupyterLab never logged {text!r}: {self.log.read_text()}")
            time.sleep(0.1)

    def exit_code_after(self, sig: int, within: float) -> int | None:
        """Sends ``sig``; JupyterLab's exit code, or None if it still ran after ``within`` s.

        SIGINT is sent twice, as a person presses Ctrl-C twice ("twice to skip
        confirmation", JupyterLab says): the first only asks "Shut down this
        Jupyter server (y/[n])?".
        """
        self.proc.send_signal(sig)
        if sig == signal.SIGINT:
            self.wait_log("interrupted")
            self.proc.send_signal(signal.SIGINT)
        try:
            return self.proc.wait(within)
        except subprocess.TimeoutExpired:
            return None

    def stop(self) -> None:
        """Ends JupyterLab however it takes (a test may have left it hanging)."""
        self.http.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)
        self._log_file.close()
        os.close(self._terminal)
