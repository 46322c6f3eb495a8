"""The Jupyter kernels API over the server's sessions, so JupyterLab can attach to them.

    jupyter lab --GatewayClient.url=http://127.0.0.1:8765 --GatewayClient.auth_token=TOKEN

JupyterLab then lists every session's kernel (a kernel's id is its session's
id) and opens notebooks and consoles on them. The channels WebSocket speaks
the Jupyter protocol's JSON frames, which is what jupyter_server's gateway
client uses, and bridges them to the kernel through a ZMQ client of its own:
a person sees the agent's variables and runs cells in the same kernel. What
they run is recorded in the agent's transcript as cells of their own, marked
``"by": "attached"`` (``_attached``); the agent's results never take their
outputs, its reducer only takes replies to the agent's own requests.

Nothing on the channels ends or replaces a kernel: a ``shutdown_request``
(a console's ``exit``, or its restart) is answered with an error instead of
being sent on. Kernels are shut down and restarted through the REST routes,
which go through the session (a restart is recorded in its transcript), and
an agent's kernel cannot be shut down from here at all: a DELETE of it only
lets go of it (200, ``"shut_down": false``), so that a JupyterLab that exits,
and so asks to shut down every kernel it used, exits. The kernels JupyterLab
started itself (POST /api/kernels, a new notebook's) are its to shut down, and
it does as it exits; one left behind by a JupyterLab that was killed is culled
when idle like any session.

The bridge's sockets take the session's cap on one kernel message
(``Limits.max_message_bytes``): libzmq drops a bigger one unread and breaks
that socket's connection, and the bridge then closes the WebSocket (1009,
"message too big"), which the client opens again on fresh sockets.
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
from jupyter_client.connect import KernelConnectionInfo
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from .._backends._wire import json_frame, new_message
from ._access import path_session_id, sees
from ._attached import AttachedCells
from ._auth import caller
from ._bodies import CreateRequest, parse_start_kernel
from ._errors import ApiError, JSONResponse
from ._openapi_parts import JSON, KERNEL_ID, errors, json_answer, op, ref
from ._registry import Entry
from ._routing import route, websocket_route

__all__ = ["JUPYTER_ROUTES", "jupyter_paths", "jupyter_schemas"]

_CHANNELS = ("shell", "iopub", "stdin", "control")
_REQUEST_CHANNELS = frozenset({"shell", "stdin", "control"})  # iopub only goes to clients
_NUDGE_SECONDS = 10.0  # then bridge anyway: a kernel that silent has bigger problems
_MESSAGE_TOO_BIG = 1009  # the WebSocket close code
_CONTEXT: zmq.asyncio.Context | None = None  # the bridges' own: its default sockopts are theirs


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
    found = path_session_id(request)
    assert found is not None
    return found


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
                # kernelexec: how `kernelexec attach --lab` tells a JupyterLab that uses
                # this server as its gateway from one with kernels of its own. debugger:
                # JupyterLab offers its debugger only for a spec that says so (ipykernel's
                # own does; its debugpy comes with it).
                "metadata": {"kernelexec": True, "debugger": True},
            },
            "resources": {},
        }
        for name in names
    }
    return JSONResponse({"default": "python3", "kernelspecs": specs})


async def list_kernels(request: Request) -> Response:
    identity = caller(request)
    entries = [e for e in _registry(request).entries() if sees(identity, e.tenant)]
    return JSONResponse([_model(e) for e in entries if not (e.culled or e.session.closed)])


async def start_kernel(request: Request) -> Response:
    # JupyterLab starts a kernel for every new notebook; it is a session like any other.
    names = request.app.state.kexec.kernel_names
    config = request.app.state.kexec.config
    kernel_name = await parse_start_kernel(request, config, names)
    entry = await _registry(request).create(
        CreateRequest(kernel_name=kernel_name, env={}, timeout=config.max_timeout),
        caller(request).tenant,
    )
    _started_here(request).add(entry.id)
    return JSONResponse(_model(entry), status_code=201)


async def get_kernel(request: Request) -> Response:
    return JSONResponse(_model(_registry(request).get_live(_session_id(request))))


async def shutdown_kernel(request: Request) -> Response:
    session_id = _session_id(request)
    registry = _registry(request)
    if session_id not in _started_here(request):
        # A person debugging an agent must not end the agent's kernel by closing a
        # tab, nor can JupyterLab, which asks to shut down every kernel it knows of
        # as it exits. The client only lets go of the kernel; that is a success:
        # jupyter_server's gateway client takes any other answer but 404 as a
        # failure of its whole exit, and then never exits.
        entry = registry.get(session_id)  # 404 for an unknown id, as for any kernel
        return JSONResponse(
            {
                "id": kernel_id(entry.id),
                "shut_down": False,
                "message": "this kernel belongs to an agent's kernelexec session and keeps "
                "running; shut it down with DELETE /sessions/{id}",
            }
        )
    _started_here(request).discard(session_id)
    await registry.delete(session_id, purge=False)
    return Response(status_code=204)


async def interrupt_kernel(request: Request) -> Response:
    # JupyterLab's interrupt: the cell that runs, a person's perhaps, not the agent's next one.
    await _registry(request).interrupt(_session_id(request), kernel_wide=True)
    return Response(status_code=204)


async def restart_kernel(request: Request) -> Response:
    # Through the session, which records the restart in the agent's transcript.
    return JSONResponse(_model(await _registry(request).restart(_session_id(request))))


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
    client = _client(info, entry.session.limits.max_message_bytes)
    try:
        await _bridge(websocket, client, entry, await _nudge(client))
    finally:
        client.stop_channels()


def _client(info: KernelConnectionInfo, cap: int) -> AsyncKernelClient:
    """A client of the kernel whose sockets drop a message over ``cap`` unread."""
    global _CONTEXT
    if _CONTEXT is None:
        _CONTEXT = zmq.asyncio.Context()
    # Read by context.socket(), which start_channels calls below, before any await.
    _CONTEXT.setsockopt(zmq.MAXMSGSIZE, cap)
    client = AsyncKernelClient(context=_CONTEXT)
    client.load_connection_info(info)
    client.start_channels(shell=True, iopub=True, stdin=True, control=True, hb=False)
    return client


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


def _request(frame: str) -> tuple[dict[str, Any] | None, str]:
    """A client's frame as a message to send on, and its channel; None if it is none."""
    try:
        msg = json.loads(frame)
    except (ValueError, RecursionError):
        return None, ""
    if not isinstance(msg, dict):
        return None, ""
    channel, header = msg.pop("channel", None), msg.get("header")
    if not (isinstance(header, dict) and isinstance(header.get("msg_type"), str)):
        return None, ""
    msg.pop("buffers", None)
    return msg, str(channel)


def _refuse_shutdown(msg: dict[str, Any], session: str) -> dict[str, Any]:
    """The reply to a shutdown or restart request, which never reaches an agent's kernel.

    JupyterLab restarts and shuts kernels down through the REST API; a
    ``shutdown_request`` on the channels comes from a console (``exit``, or
    its own restart), and would end an agent's kernel behind its session's
    back. The reply is an error the client shows, so it does not wait.
    """
    content = msg.get("content")
    restart = bool(content.get("restart")) if isinstance(content, dict) else False
    action = "restarted" if restart else "shut down"
    how = "POST /sessions/{id}/restart" if restart else "DELETE /sessions/{id}"
    evalue = (
        f"kernelexec: this kernel belongs to a kernelexec session and is not {action} "
        f"from a console; use {how} on the server (JupyterLab's own menu does the same)"
    )
    error = {"status": "error", "restart": restart, "ename": "ShutdownRefused"}
    error |= {"evalue": evalue, "traceback": [evalue]}
    return new_message("shutdown_reply", error, session=session, parent=msg["header"])


async def _bridge(
    websocket: WebSocket, client: AsyncKernelClient, entry: Entry, ours: set[str]
) -> None:
    sockets = {name: getattr(client, f"{name}_channel").socket for name in _CHANNELS}
    record = AttachedCells(entry, caller(websocket).tenant.name)

    async def to_kernel() -> None:
        while True:
            try:
                frame = await websocket.receive_text()
            except (WebSocketDisconnect, KeyError):
                return
            msg, channel = _request(frame)
            if msg is None or channel not in _REQUEST_CHANNELS:
                continue  # not a Jupyter request: nothing to forward
            entry.touch()
            if msg["header"]["msg_type"] == "shutdown_request":
                refusal = _refuse_shutdown(msg, client.session.session)
                await websocket.send_text(json_frame(channel, refusal))
                continue
            refused = record.refusal(channel, msg)
            if refused is not None:
                reply = new_message(
                    "execute_reply", refused, session=client.session.session, parent=msg["header"]
                )
                await websocket.send_text(json_frame(channel, reply))
                continue
            try:
                client.session.send(sockets[channel], msg)
            except (KeyError, TypeError, ValueError, zmq.ZMQError):
                continue  # a message the session cannot sign and send: dropped
            record.sent(channel, msg)

    async def to_browser() -> None:
        poller = zmq.asyncio.Poller()
        for socket in [*sockets.values(), *monitors]:
            poller.register(socket, zmq.POLLIN)
        while True:
            ready = dict(await poller.poll())
            if any(monitor in ready for monitor in monitors):
                # A message over the cap was dropped, and libzmq never reconnects after it.
                why = f"a kernel message over {entry.session.limits.max_message_bytes:,} bytes"
                with contextlib.suppress(RuntimeError):
                    await websocket.close(code=_MESSAGE_TOO_BIG, reason=why)
                return
            for channel, socket in sockets.items():
                if socket not in ready:
                    continue
                parts = await socket.recv_multipart()
                try:
                    _, parts = client.session.feed_identities(parts)
                    msg = client.session.deserialize(parts)
                except Exception:
                    continue  # unsigned or malformed: the kernel's to send, not ours to pass on
                if msg["parent_header"].get("msg_id") in ours:
                    continue
                record.heard(msg)
                await websocket.send_text(json_frame(channel, msg))

    # After its handshake, a socket's disconnection is the kernel breaking it.
    monitors = [s.get_monitor_socket(zmq.EVENT_DISCONNECTED) for s in sockets.values()]

    tasks = [asyncio.ensure_future(to_kernel()), asyncio.ensure_future(to_browser())]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task
        record.close()
        for socket in sockets.values():
            socket.disable_monitor()
        for monitor in monitors:
            monitor.close(linger=0)


_KERNEL = "/api/kernels/{kernel_id}"


# Attaching is its own scope: a person (or a JupyterLab) gets a live console on
# the kernel; what they run is in the agent's transcript, marked, never in its results.
JUPYTER_ROUTES: list[BaseRoute] = [
    route("/api/kernelspecs", GET=(kernelspecs, "attach")),
    route("/api/kernels", GET=(list_kernels, "attach"), POST=(start_kernel, "attach")),
    route(_KERNEL, GET=(get_kernel, "attach"), DELETE=(shutdown_kernel, "attach")),
    route(f"{_KERNEL}/interrupt", POST=(interrupt_kernel, "attach")),
    route(f"{_KERNEL}/restart", POST=(restart_kernel, "attach")),
    websocket_route(f"{_KERNEL}/channels", channels, "attach"),
]


# -- the routes above, described for /openapi.json


def jupyter_schemas(kernel_names: list[str]) -> dict[str, Any]:
    """The Jupyter kernels API's bodies, for /openapi.json."""
    text = {"type": "string"}
    return {
        "Kernel": {
            "type": "object",
            "required": ["id", "name", "last_activity", "execution_state", "connections"],
            "properties": {
                "id": KERNEL_ID["schema"],
                "name": text,
                "last_activity": text,
                "execution_state": {"enum": ["starting", "idle", "busy", "dead"]},
                "connections": {"type": "integer"},
            },
        },
        "KernelList": {"type": "array", "items": ref("Kernel")},
        "KernelSpecs": {
            "type": "object",
            "required": ["default", "kernelspecs"],
            "properties": {
                "default": text,
                "kernelspecs": {
                    "type": "object",
                    "additionalProperties": {
                        "type": "object",
                        "required": ["name", "spec"],
                        "properties": {"name": text, "spec": {"type": "object"}},
                    },
                },
            },
        },
        "StartKernel": {
            "type": "object",
            "description": "Other fields of a Jupyter client's body are ignored",
            "properties": {
                "name": {"enum": [*kernel_names, None], "description": "null: python3"},
                "env": {
                    "type": "object",
                    "additionalProperties": text,
                    "description": "ignored: a kernel JupyterLab starts gets the server's",
                },
                "path": text,
            },
        },
    }


def jupyter_paths() -> dict[str, Any]:
    """The Jupyter kernels API, for JupyterLab (its WebSocket channels are not HTTP)."""
    kernel = [KERNEL_ID]
    tags = {"tags": ["jupyter"]}
    return {
        "/api/kernelspecs": {
            "get": op(
                "The kernelspecs sessions may use",
                {"200": json_answer(ref("KernelSpecs"), "Kernelspecs"), **errors()},
                **tags,
            )
        },
        "/api/kernels": {
            "get": op(
                "Every session's kernel",
                {"200": json_answer(ref("KernelList"), "Kernels"), **errors()},
                **tags,
            ),
            "post": op(
                "Start a kernel: a new session, which JupyterLab may also shut down",
                {"201": json_answer(ref("Kernel"), "Started"), **errors(400, 429, 503)},
                requestBody={"content": {JSON: {"schema": ref("StartKernel")}}},
                **tags,
            ),
        },
        "/api/kernels/{kernel_id}": {
            "parameters": kernel,
            "get": op(
                "A kernel",
                {"200": json_answer(ref("Kernel"), "The kernel"), **errors(404, 409)},
                **tags,
            ),
            "delete": op(
                "Shut down a kernel JupyterLab started; an agent's is only let go of (200)",
                {
                    "204": {"description": "Shut down"},
                    "200": json_answer(
                        {
                            "type": "object",
                            "required": ["id", "shut_down", "message"],
                            "properties": {
                                "id": {"type": "string"},
                                "shut_down": {"const": False},
                                "message": {"type": "string"},
                            },
                        },
                        "An agent's kernel: not shut down, it keeps running",
                    ),
                    **errors(404),
                },
                **tags,
            ),
        },
        "/api/kernels/{kernel_id}/interrupt": {
            "parameters": kernel,
            "post": op(
                "Interrupt a kernel",
                {"204": {"description": "Interrupted"}, **errors(404, 409, 410)},
                **tags,
            ),
        },
        "/api/kernels/{kernel_id}/restart": {
            "parameters": kernel,
            "post": op(
                "Restart a kernel (recorded in its session's transcript)",
                {
                    "200": json_answer(ref("Kernel"), "Restarted"),
                    **errors(404, 409, 410, 429, 503, 507),
                },
                **tags,
            ),
        },
    }
