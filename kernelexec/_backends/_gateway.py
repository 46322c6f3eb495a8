"""Kernels on a Jupyter gateway: Kernel Gateway, Enterprise Gateway or jupyter_server.

REST creates, interrupts and deletes the kernel; its channels WebSocket carries
the messages. The gateway restarts a kernel whose process died on its own and
says so with a "restarting" (or "dead") status on IOPub: that is how a death
is seen here. A kernel that vanished (culled for idleness, deleted by someone
else, the gateway restarted) is seen when its socket cannot be re-opened or,
while the session waits on a silent kernel, by a rate-limited
``GET /api/kernels/{id}``.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import ipaddress
import time
import urllib.parse
import uuid
from pathlib import Path
from typing import Any

from .._containment._secrecy import protect_process
from .._environment import remote_env
from .._exceptions import KernelStartError
from . import _wire
from ._base import KernelMessage
from ._caps import MAX_MESSAGE_BYTES
from ._channels import KernelChannels, OpenFailed
from ._ready import await_kernel_info
from ._rest import GatewayREST

__all__ = ["GatewayBackend"]

_CHECK_SECONDS = 1.0
_LIVE: set[GatewayBackend] = set()  # deleted from their gateway at interpreter exit


class GatewayBackend:
    """A kernel on a Jupyter gateway, spoken to over REST and a WebSocket.

    The kernel's working directory is on the gateway's machine. A gateway on
    loopback (127.0.0.1, ::1, localhost) shares this machine's files, so it is
    asked to start the kernel in the session's work dir; any other gateway
    gets ``working_dir`` if given and otherwise picks the directory itself.
    The request is made as ``KERNEL_WORKING_DIR`` in the kernel's env, which
    Enterprise Gateway and ``kernelexec gateway`` honour.

    The kernel's environment is the session's ``env=`` extras and kernelexec's
    kernel defaults (PAGER, TERM, ...), never this machine's environment;
    a gateway passes on only the names it allows (Kernel Gateway:
    ``KERNEL_*`` and ``--KernelGatewayApp.env_whitelist``).

    Args:
        url: the gateway's base URL, e.g. http://127.0.0.1:8888.
        token: the gateway's auth token.
        kernel_name: a kernelspec the gateway has (see its /api/kernelspecs).
        working_dir: the kernel's cwd on the gateway's machine.
        startup_timeout: seconds to wait for a new kernel to answer.
        request_timeout: seconds per REST request.
        ping_interval: seconds of WebSocket silence before a keepalive ping.
        reconnect_for: seconds to keep trying to re-open a dropped WebSocket
            before the kernel counts as lost.
        max_message_bytes: the host's cap on one message from the kernel
            (``Limits.max_message_bytes``; a session sets its own).
    """

    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        kernel_name: str = "python3",
        working_dir: str | None = None,
        startup_timeout: float = 60.0,
        request_timeout: float = 30.0,
        ping_interval: float = 20.0,
        reconnect_for: float = 15.0,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
    ) -> None:
        # What fresh() makes another of; taken first, before any local is added.
        self._given = {k: v for k, v in locals().items() if k not in ("self", "__class__")}
        self.rest = GatewayREST(url, token, timeout=request_timeout)
        self.url = self.rest.base
        self.kernel_name = kernel_name
        self.working_dir = working_dir
        self.startup_timeout = startup_timeout
        self.ping_interval = ping_interval
        self.reconnect_for = reconnect_for
        self.max_message_bytes = max_message_bytes
        self.kernel_id: str | None = None
        self._session = uuid.uuid4().hex
        self._channels: KernelChannels | None = None
        self._gone: str | None = None  # why the kernel is known to be dead
        self._checked = 0.0
        self._cwd = Path.cwd()
        self._env: dict[str, str] = {}

    def fresh(self) -> GatewayBackend:
        """A new, unstarted backend with the same settings (a session's fork, restored)."""
        return type(self)(**self._given)

    def __repr__(self) -> str:
        return f"<GatewayBackend {self.url} kernel={self.kernel_id}>"

    @property
    def channels(self) -> KernelChannels | None:
        """The kernel's WebSocket while it is open (tests drop it to prove reconnects)."""
        return self._channels

    async def start(self, *, cwd: Path, env: dict[str, str]) -> None:
        protect_process()  # a gateway on this machine may run kernels under this uid
        self._cwd, self._env = cwd, env
        await self._check_kernelspec()
        body = {"name": self.kernel_name, "env": self._kernel_env(cwd, env)}
        reply = await self.rest.checked(
            "POST", "/api/kernels", body, doing=f"start a {self.kernel_name!r} kernel"
        )
        if not isinstance(reply.body, dict) or not reply.body.get("id"):
            raise KernelStartError(
                f"the gateway at {self.url} answered a kernel start with "
                f"{reply.body!r}, not a kernel model"
            )
        self.kernel_id = str(reply.body["id"])
        self._gone = None
        _LIVE.add(self)
        try:
            await self._open_channels()
            await self._wait_ready()
        except BaseException:
            await self.shutdown()
            raise

    async def execute(self, code: str, *, allow_stdin: bool) -> str:
        content = {
            "code": code,
            "silent": False,
            "store_history": True,
            "user_expressions": {},
            "allow_stdin": allow_stdin,
            "stop_on_error": False,
        }
        return await self._send("shell", "execute_request", content)

    async def request_kernel_info(self) -> str:
        return await self._send("shell", "kernel_info_request", {})

    async def receive(self, timeout: float) -> KernelMessage | None:
        channels = self._channels
        if channels is None:
            await asyncio.sleep(timeout)
            return None
        item = await channels.receive(timeout)
        if item is not None and _announces_death(item):
            state = item[1]["content"]["execution_state"]
            self._gone = (
                "the kernel process ended and the gateway is restarting it"
                if state == "restarting"
                else "the kernel process ended (the gateway reports it dead)"
            )
        return item

    async def send_input(self, value: str) -> None:
        await self._send("stdin", "input_reply", {"value": value})

    async def interrupt(self) -> None:
        if self.kernel_id is None or self._gone is not None:
            return
        with contextlib.suppress(OSError):
            reply = await self.rest.call("POST", f"/api/kernels/{self.kernel_id}/interrupt")
            if reply.status == 404:
                self._gone = _VANISHED

    async def restart(self) -> None:
        # A fresh kernel rather than the gateway's restart endpoint: the same
        # path whether the old kernel is alive, dead or culled.
        await self.shutdown()
        await self.start(cwd=self._cwd, env=self._env)

    async def shutdown(self) -> None:
        channels, self._channels = self._channels, None
        kernel_id, self.kernel_id = self.kernel_id, None
        _LIVE.discard(self)
        if channels is not None:
            await asyncio.to_thread(channels.close)
        if kernel_id is not None:
            with contextlib.suppress(OSError):
                await self.rest.call("DELETE", f"/api/kernels/{kernel_id}")

    async def is_alive(self) -> bool:
        if self.kernel_id is None or self._gone is not None:
            return False
        channels = self._channels
        if (
            channels is not None
            and channels.connected
            and (time.monotonic() - channels.last_heard < _CHECK_SECONDS)
        ):
            return True
        # Silent or disconnected: ask the gateway, at most once a second. A
        # gateway keeps the WebSocket of a deleted kernel open, so silence
        # proves nothing; before each execution this costs one GET.
        if time.monotonic() - self._checked < _CHECK_SECONDS:
            return True
        self._checked = time.monotonic()
        try:
            reply = await self.rest.call("GET", f"/api/kernels/{self.kernel_id}")
        except OSError:
            return True  # the gateway itself is unreachable; the socket decides
        if reply.status == 404:
            self._gone = _VANISHED
        elif isinstance(reply.body, dict) and reply.body.get("execution_state") == "dead":
            self._gone = "the gateway reports the kernel dead"
        return self._gone is None

    def exit_reason(self) -> str | None:
        return self._gone

    # -- internals

    async def _check_kernelspec(self) -> None:
        reply = await self.rest.checked("GET", "/api/kernelspecs", doing="list its kernelspecs")
        specs = reply.body.get("kernelspecs") if isinstance(reply.body, dict) else None
        if isinstance(specs, dict) and self.kernel_name not in specs:
            raise KernelStartError(
                f"the gateway at {self.url} has no kernelspec {self.kernel_name!r}; it has: "
                f"{', '.join(sorted(specs)) or 'none'}. Pass one of them as kernel_name="
            )

    def _kernel_env(self, cwd: Path, env: dict[str, str]) -> dict[str, str]:
        sent = remote_env(env)
        working_dir = self.working_dir or (str(cwd) if _is_loopback(self.url) else None)
        if working_dir is not None:
            sent["KERNEL_WORKING_DIR"] = working_dir
        return sent

    async def _open_channels(self) -> None:
        assert self.kernel_id is not None
        url = (
            f"{self.rest.ws_base}/api/kernels/{self.kernel_id}/channels?"
            + urllib.parse.urlencode({"session_id": self._session})
        )
        channels = KernelChannels(
            url,
            self.rest.headers,
            ping_interval=self.ping_interval,
            ping_timeout=self.ping_interval,
            reconnect_for=self.reconnect_for,
            on_gone=self._on_socket_gone,
            max_message_bytes=self.max_message_bytes,
        )
        try:
            await channels.open()
        except OpenFailed as exc:
            raise KernelStartError(
                f"the gateway at {self.url} started kernel {self.kernel_id} but its WebSocket "
                f"did not open ({exc}); a proxy in between must allow WebSocket upgrades"
            ) from exc
        self._channels = channels

    def _on_socket_gone(self, why: str) -> None:
        # In the reader thread; a plain assignment is safe to race with is_alive.
        self._gone = self._gone or f"lost the connection to the kernel on {self.url} ({why})"

    async def _send(self, channel: str, msg_type: str, content: dict[str, Any]) -> str:
        if self._channels is None:
            raise KernelStartError("the gateway kernel is not running; start() first")
        msg = _wire.new_message(msg_type, content, session=self._session)
        try:
            await self._channels.send(channel, msg)
        except ConnectionError:
            # is_alive() now says no, and the session reports a dead kernel.
            self._gone = self._gone or f"lost the connection to the kernel on {self.url}"
        return str(msg["msg_id"])

    async def _wait_ready(self) -> None:
        assert self._channels is not None
        channels = self._channels

        async def check() -> None:
            if self._gone is not None:
                raise KernelStartError(f"the kernel on {self.url} did not start: {self._gone}")

        if await await_kernel_info(
            ask=self.request_kernel_info,
            receive=channels.receive,
            check=check,
            timeout=self.startup_timeout,
            retry=2.0,
            poll=0.2,
        ):
            channels.clear()
            return
        raise KernelStartError(
            f"the kernel on {self.url} did not answer within {self.startup_timeout:g} s; "
            "raise startup_timeout if the gateway starts kernels slowly (Kubernetes pods can "
            "take minutes)"
        )


_VANISHED = (
    "the kernel is gone from the gateway (culled for idleness, shut down by someone "
    "else, or the gateway restarted)"
)


def _announces_death(item: KernelMessage) -> bool:
    channel, msg = item
    return (
        channel == "iopub"
        and msg.get("msg_type") == "status"
        and not msg["parent_header"]
        and msg["content"].get("execution_state") in ("restarting", "dead")
    )


def _is_loopback(url: str) -> bool:
    host = urllib.parse.urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@atexit.register
def _delete_leftover_kernels() -> None:
    for backend in list(_LIVE):
        if backend.kernel_id is not None:
            with contextlib.suppress(Exception):
                backend.rest.timeout = 2.0
                backend.rest._call("DELETE", f"/api/kernels/{backend.kernel_id}", None)
