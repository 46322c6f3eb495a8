"""The Jupyter kernels API over the server's sessions, so JupyterLab can attach to them.

    jupyter lab --GatewayClient.url=http://127.0.0.1:8765 --GatewayClient.auth_token=TOKEN

JupyterLab then lists every session's kernel (a kernel's id is its session's
id) and opens notebooks and consoles on them. The channels WebSocket speaks
the Jupyter protocol's JSON frames, which is what jupyter_server's gateway
client uses, and bridges them to the kernel through a ZMQ client of its own:
a person sees the agent's variables and runs cells in the same kernel, but
nothing they run enters the agent's transcript, whose reducer only takes
replies to the agent's own requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from typing import Any

import zmq
import zmq.asyncio
from jupyter_client.asynchronous.client import AsyncKernelClient
from jupyter_client.jsonutil import json_default
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from ._bodies import CreateRequest
from ._errors import ApiError, JSONResponse
from ._registry import Entry

__all__ = ["JUPYTER_ROUTES"]

_CHANNELS = ("shell", "iopub", "stdin", "control")
_NUDGE_SECONDS = 10.0  # then bridge anyway: a kernel that silent has bigger problems


def _registry(request: Request | WebSocket) -> Any:
    return request.app.state.kexec.registry


def _started_here(request: Request) -> set[str]:
    """Ids of the kernels JupyterLab started, which it may also shut down."""
    state = request.app.state
    if not hasattr(state, "jupyter_kernels"):
        state.jupyter_kernels = set()
    started: set[str] = state.jupyter_kernels
    return started


def kernel_id(session_id: str) -> str:
    """A session's id as a kernel id: jupyter_server's routes only take the UUID form."""
    try:
        return str(uuid.UUID(hex=session_id))
    except ValueError:
        return session_id


def _session_id(request: Request | WebSocket) -> str:
    # Either form: the 32 hex digits of the kernelexec API, or the UUID of Jupyter's.
    return str(request.path_params["kernel_id"]).replace("-", "")


def _model(entry: Entry) -> dict[str, Any]:
    state = {"busy": "busy", "idle": "idle", "starting": "starting"}.get(entry.state, "dead")
    return {
        "id": kernel_id(entry.id),
        "name": entry.kernel_name,
        "last_activity": time.strftime(
            "%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime(entry.last_activity)
        ),
        "execution_state": state,
        "connections": 0,
    }


async def kernelspecs(request: Request) -> Response:
    names = request.app.state.kexec.kernel_names
    specs = {
        name: {
            "name": name,
            "spec": {
                "argv": [],
                "display_name": "Python 3 (kernelexec)" if name == "python3" else name,
                "language": "python",
                "interrupt_mode": "signal",
                "env": {},
                "metadata": {},
            },
            "resources": {},
        }
        for name in names
    }
    return JSONResponse({"default": "python3", "kernelspecs": specs})


async def list_kernels(request: Request) -> Response:
    entries = _registry(request).entries()
    return JSONResponse([_model(e) for e in entries if not (e.culled or e.session.closed)])


async def start_kernel(request: Request) -> Response:
    # JupyterLab starts a kernel for every new notebook; it is a session like any other.
    try:
        body = json.loads(await request.body() or b"{}")
    except ValueError:
        body = {}
    name = body.get("name") if isinstance(body, dict) else None
    names = request.app.state.kexec.kernel_names
    config = request.app.state.kexec.config
    kernel_name = name if isinstance(name, str) and name in names else "python3"
    entry = await _registry(request).create(
        CreateRequest(kernel_name=kernel_name, env={}, timeout=config.max_timeout)
    )
    _started_here(request).add(entry.id)
    return JSONResponse(_model(entry), status_code=201)


async def get_kernel(request: Request) -> Response:
    return JSONResponse(_model(_registry(request).get_live(_session_id(request))))


async def shutdown_kernel(request: Request) -> Response:
    session_id = _session_id(request)
    if session_id not in _started_here(request):
        # A person debugging an agent must not end the agent's kernel by closing a tab.
        raise ApiError(
            403,
            "agent_kernel",
            "this kernel belongs to an agent's kernelexec session; shut it down with "
            "DELETE /sessions/{id}",
        )
    _started_here(request).discard(session_id)
    await _registry(request).delete(session_id, purge=False)
    return Response(status_code=204)


async def interrupt_kernel(request: Request) -> Response:
    entry = _registry(request).get_live(_session_id(request))
    await entry.session.interrupt()
    return Response(status_code=204)


async def restart_kernel(request: Request) -> Response:
    async with _registry(request).using(_session_id(request)) as entry:
        await entry.session.restart()
        return JSONResponse(_model(entry))


async def connection(request: Request) -> Response:
    """The kernel's connection file contents, for ``kernelexec attach``/``jupyter console``."""
    entry = _registry(request).get_live(_session_id(request))
    info = entry.session.connection_info
    if info is None:
        raise ApiError(
            409,
            "no_connection_file",
            "this session's kernel runs on a backend "
            "without a local connection file; attach through /api/kernels instead",
        )
    return JSONResponse(info)


async def channels(websocket: WebSocket) -> None:
    registry = _registry(websocket)
    try:
        entry = registry.get_live(_session_id(websocket))
    except ApiError:
        await websocket.close(code=1008)
        return
    info = entry.session.connection_info
    if info is None:
        await websocket.close(code=1011, reason="this session's kernel has no local connection")
        return
    await websocket.accept()
    client = AsyncKernelClient(context=zmq.asyncio.Context.instance())
    client.load_connection_info(info)
    client.start_channels(shell=True, iopub=True, stdin=True, control=True, hb=False)
    try:
        await _bridge(websocket, client, entry, await _nudge(client))
    finally:
        client.stop_channels()


async def _nudge(client: AsyncKernelClient) -> set[str]:
    """Waits until IOPub is subscribed, as jupyter_server does, so no output is missed.

    A new SUB socket hears nothing until its subscription reaches the kernel;
    a person's first execution could otherwise lose its output and its idle
    status. kernel_info requests go on the control channel, which a kernel
    busy with the agent's code still answers (with a status on IOPub).
    Returns their msg_ids: their replies are not the browser's.
    """
    asked: set[str] = set()
    iopub = client.iopub_channel.socket
    deadline = time.monotonic() + _NUDGE_SECONDS
    while time.monotonic() < deadline:
        msg = client.session.msg("kernel_info_request", {})
        client.session.send(client.control_channel.socket, msg)
        asked.add(msg["header"]["msg_id"])
        if await iopub.poll(500):
            break  # anything on IOPub: the subscription is live
    return asked


async def _bridge(
    websocket: WebSocket, client: AsyncKernelClient, entry: Entry, ours: set[str]
) -> None:
    sockets = {name: getattr(client, f"{name}_channel").socket for name in _CHANNELS}

    async def to_kernel() -> None:
        while True:
            try:
                frame = await websocket.receive_text()
            except (WebSocketDisconnect, KeyError):
                return
            try:
                msg = json.loads(frame)
                channel = msg.pop("channel")
                socket = sockets[channel]
            except (ValueError, KeyError, TypeError, AttributeError):
                continue  # not a Jupyter message: nothing to forward
            msg.pop("buffers", None)
            entry.touch()
            client.session.send(socket, msg)

    async def to_browser() -> None:
        poller = zmq.asyncio.Poller()
        for socket in sockets.values():
            poller.register(socket, zmq.POLLIN)
        while True:
            ready = dict(await poller.poll())
            for channel, socket in sockets.items():
                if socket not in ready:
                    continue
                parts = await socket.recv_multipart()
                _, parts = client.session.feed_identities(parts)
                msg = client.session.deserialize(parts)
                if msg["parent_header"].get("msg_id") in ours:
                    continue
                frame = {
                    "channel": channel,
                    "header": msg["header"],
                    "parent_header": msg["parent_header"],
                    "metadata": msg["metadata"],
                    "content": msg["content"],
                    "msg_id": msg["header"].get("msg_id"),
                    "msg_type": msg["header"].get("msg_type"),
                    "buffers": [],
                }
                await websocket.send_text(json.dumps(frame, default=json_default))

    tasks = [asyncio.ensure_future(to_kernel()), asyncio.ensure_future(to_browser())]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task


JUPYTER_ROUTES: list[BaseRoute] = [
    Route("/api/kernelspecs", kernelspecs, methods=["GET"]),
    Route("/api/kernels", list_kernels, methods=["GET"]),
    Route("/api/kernels", start_kernel, methods=["POST"]),
    Route("/api/kernels/{kernel_id}", get_kernel, methods=["GET"]),
    Route("/api/kernels/{kernel_id}", shutdown_kernel, methods=["DELETE"]),
    Route("/api/kernels/{kernel_id}/interrupt", interrupt_kernel, methods=["POST"]),
    Route("/api/kernels/{kernel_id}/restart", restart_kernel, methods=["POST"]),
    WebSocketRoute("/api/kernels/{kernel_id}/channels", channels),
    Route("/sessions/{kernel_id}/connection", connection, methods=["GET"]),
]
