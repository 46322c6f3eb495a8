"""``kernelexec attach --lab``: a notebook in a running JupyterLab, on an agent's kernel.

JupyterLab must use the kernelexec server as its gateway
(``--GatewayClient.url``); its gateway client lists only the kernels it has
a session for, so the agent's kernel is handed to it as the kernel of a
notebook session. Everything goes through JupyterLab's own REST API:

1. ``GET /api/kernelspecs``: the specs must be the server's (their metadata
   says ``kernelexec``). A JupyterLab with kernels of its own would start a
   new local kernel under the agent's kernel id, which is worse than useless.
2. ``GET /api/sessions``: a notebook already open there on another kernel is
   left alone (the person's work), and the command says so.
3. ``GET``/``PUT /api/contents/{path}``: the notebook is created if it is not
   there (an existing one is kept as it is), so the URL opens a file.
4. ``POST /api/sessions`` with the agent's kernel id: the notebook's session,
   whose kernel JupyterLab then connects the browser to.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlencode

import httpx

from .._exceptions import ConfigurationError, ServerError

__all__ = ["open_notebook"]


def _intro(session: str) -> str:
    return (
        f"This notebook runs on the kernel of the agent's kernelexec session `{session}`. "
        "You see the agent's variables, and the agent sees what you define here. This "
        "notebook is yours: what you run here is also recorded in the agent's transcript, "
        "in the order the kernel ran it, marked as yours (its metadata says "
        '`"by": "attached"`). Shutting the kernel down here only lets go of it: the '
        "agent's session keeps it."
    )


class _Lab:
    """JupyterLab's REST API, each failure a ServerError naming what to do."""

    def __init__(self, url: str, token: str) -> None:
        self.url = url
        headers = {"Authorization": f"token {token}"} if token else {}
        self.http = httpx.Client(base_url=url, headers=headers, trust_env=False, timeout=60)

    def request(
        self, method: str, path: str, what: str, *, missing_ok: bool = False, **kwargs: Any
    ) -> tuple[int, Any]:
        """The answer's status and JSON body; a 404 is an answer only if ``missing_ok``."""
        try:
            response = self.http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise ServerError(
                f"cannot reach JupyterLab at {self.url} ({exc}); start it, or give its URL "
                "with --lab",
                code="unreachable",
            ) from None
        status = response.status_code
        if status in (401, 403):
            raise ServerError(
                f"JupyterLab at {self.url} refused the token ({status}); give the token it "
                "printed with --lab-token",
                status=status,
            )
        try:
            body = response.json()
        except ValueError:
            body = None
        if status >= 400 and not (status == 404 and missing_ok):
            raise ServerError(
                f"JupyterLab could not {what} ({status}): {_message(response, body)}",
                status=status,
            )
        if status < 400 and not isinstance(body, (dict, list)):
            raise ServerError(
                f"{self.url} does not answer as JupyterLab does ({method} {path} gave no JSON); "
                "give JupyterLab's URL with --lab",
                status=status,
            )
        return status, body

    def close(self) -> None:
        self.http.close()


def _message(response: httpx.Response, body: Any) -> str:
    message = body.get("message") or body.get("reason") if isinstance(body, dict) else None
    return str(message or response.text)[:300]


def open_notebook(
    lab_url: str,
    lab_token: str,
    *,
    session: str,
    kernel_name: str,
    path: str,
    server_url: str,
) -> str:
    """Opens a notebook in JupyterLab on a session's kernel; the URL that shows it.

    Args:
        lab_url: the JupyterLab, which uses the kernelexec server as its gateway.
        lab_token: that JupyterLab's token ("" for none).
        session: the session's id (32 hex digits).
        kernel_name: the session's kernel's name, for the notebook's metadata.
        path: the notebook's path under JupyterLab's root dir; created if absent.
        server_url: the kernelexec server's URL, for the messages.

    Raises:
        ConfigurationError: JupyterLab does not use a kernelexec server as its
            gateway, the notebook is open on another kernel, or the path is no
            notebook's.
        ServerError: JupyterLab cannot be reached or refuses a request.
    """
    path = path.strip("/")
    if not path.endswith(".ipynb"):
        raise ConfigurationError(f"--notebook {path!r}: give a path ending in .ipynb")
    kernel_id = f"{session[:8]}-{session[8:12]}-{session[12:16]}-{session[16:20]}-{session[20:]}"
    lab = _Lab(lab_url.rstrip("/"), lab_token)
    try:
        _check_gateway(lab, server_url)
        _check_not_taken(lab, path, kernel_id)
        _ensure_notebook(lab, path, session, kernel_name)
        _, created = lab.request(
            "POST",
            "/api/sessions",
            "open the notebook's session on the agent's kernel",
            json={"path": path, "name": path, "type": "notebook", "kernel": {"id": kernel_id}},
        )
        if _get(_get(created, "kernel"), "id") != kernel_id:
            # a session for the path appeared meanwhile
            raise ConfigurationError(f"JupyterLab opened {path} on another kernel; try again")
    finally:
        lab.close()
    query = f"?{urlencode({'token': lab_token})}" if lab_token else ""
    return f"{lab.url}/lab/tree/{quote(path)}{query}"


def _get(model: Any, key: str) -> Any:
    """``model[key]`` if ``model`` is a JSON object that has it, else None."""
    return model.get(key) if isinstance(model, dict) else None


def _check_gateway(lab: _Lab, server_url: str) -> None:
    _, specs = lab.request("GET", "/api/kernelspecs", "list its kernel specs")
    found = _get(specs, "kernelspecs")
    ours = isinstance(found, dict) and any(
        _get(_get(_get(spec, "spec"), "metadata"), "kernelexec") for spec in found.values()
    )
    if not ours:
        raise ConfigurationError(
            f"JupyterLab at {lab.url} runs kernels of its own, so it cannot open the agent's; "
            f"start it with --GatewayClient.url={server_url} "
            "--GatewayClient.auth_token=$KERNELEXEC_TOKEN"
        )


def _check_not_taken(lab: _Lab, path: str, kernel_id: str) -> None:
    _, sessions = lab.request("GET", "/api/sessions", "list its sessions")
    for model in sessions if isinstance(sessions, list) else []:
        if _get(model, "path") == path and _get(_get(model, "kernel"), "id") != kernel_id:
            raise ConfigurationError(
                f"JupyterLab has {path} open on another kernel; give another --notebook, "
                "or shut that notebook's kernel down in JupyterLab first"
            )


def _ensure_notebook(lab: _Lab, path: str, session: str, kernel_name: str) -> None:
    where = f"/api/contents/{quote(path)}"
    status, there = lab.request(
        "GET", where, f"look for {path}", missing_ok=True, params={"content": "0"}
    )
    if status != 404:
        if _get(there, "type") != "notebook":
            raise ConfigurationError(f"{path} in JupyterLab is not a notebook; give --notebook")
        return  # kept as it is: it may hold the person's own cells
    display = "Python 3 (kernelexec)" if kernel_name == "python3" else kernel_name
    content = {
        "nbformat": 4,
        "nbformat_minor": 5,
        "metadata": {
            # With a kernelspec JupyterLab never asks which kernel to start.
            "kernelspec": {"name": kernel_name, "display_name": display, "language": "python"},
            "language_info": {"name": "python"},
        },
        "cells": [
            {"cell_type": "markdown", "id": "about", "metadata": {}, "source": _intro(session)},
            {
                "cell_type": "code",
                "id": "yours",
                "metadata": {},
                "source": "",
                "outputs": [],
                "execution_count": None,
            },
        ],
    }
    lab.request(
        "PUT",
        where,
        f"create {path} (is its folder there, under JupyterLab's root dir?)",
        json={"type": "notebook", "format": "json", "content": content},
    )
