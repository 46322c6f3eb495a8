"""GatewayBackend against real gateways: reconnects, keepalive, culled kernels, clear errors."""

# Fixtures from servers.py are imported by name and used as parameters:
# ruff: noqa: F401, F811

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from conftest import once_it_says, until
from jupyter_server.services.kernels.connection.base import (
    deserialize_msg_from_ws_v1,
    serialize_binary_message,
    serialize_msg_to_ws_v1,
)
from servers import (
    TOKEN,
    Gateway,
    free_port,
    rest,
    stock_gateway,
    stock_kernel_gateway,
    tuned_gateway,
)

from kernelexec import AsyncSession, ConfigurationError, GatewayBackend, KernelStartError
from kernelexec._backends import _wire


class CuttableProxy:
    """A TCP proxy on loopback whose connections a test cuts, as a load
    balancer's idle timeout or a network blip would."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.writers: list[asyncio.StreamWriter] = []
        self.server: asyncio.Server | None = None
        self.swallowing = False
        self.swallowed = 0  # bytes lost while swallowing: what a test waits for

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    def cut(self) -> None:
        for writer in self.writers:
            writer.transport.abort()
        self.writers.clear()
        self.swallowing = False

    def swallow(self) -> None:
        """From now until the cut, what the client sends is lost, as on a failing link."""
        self.swallowing = True

    async def close(self) -> None:
        self.cut()
        if self.server is not None:
            self.server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        self.writers += [writer, up_writer]

        async def pipe(
            src: asyncio.StreamReader, dst: asyncio.StreamWriter, upstream: bool
        ) -> None:
            try:
                while data := await src.read(65536):
                    if upstream and self.swallowing:
                        self.swallowed += len(data)
                        continue
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                dst.transport.abort()

        with contextlib.suppress(asyncio.CancelledError):  # the test's loop is ending
            await asyncio.gather(pipe(reader, up_writer, True), pipe(up_reader, writer, False))


async def until_dead(backend: GatewayBackend) -> None:
    """Waits as a culled kernel's idle session would, until the backend sees it gone."""
    for _ in range(100):
        if not await backend.is_alive():
            return
        await asyncio.sleep(0.1)
    pytest.fail("the backend never noticed that its kernel was deleted")


@pytest.fixture
async def proxy(tuned_gateway: Gateway) -> AsyncIterator[CuttableProxy]:
    port = int(tuned_gateway.url.rsplit(":", 1)[1])
    p = CuttableProxy(port)
    yield p
    await p.close()


async def test_a_websocket_cut_by_the_network_is_reopened_with_state_intact(
    proxy: CuttableProxy, tmp_path: Path
) -> None:
    backend = GatewayBackend(await proxy.start(), token=TOKEN)
    async with AsyncSession(tmp_path, backend=backend, timeout=30) as s:
        await s.execute("x = 41")
        proxy.cut()
        result = await s.execute("x + 1")
        assert result.ok and result.text == "42\n" and not result.restarted, result.text
        assert backend.channels is not None and backend.channels.reconnects >= 1


async def test_a_request_lost_with_the_connection_is_sent_again(
    proxy: CuttableProxy, tmp_path: Path
) -> None:
    backend = GatewayBackend(await proxy.start(), token=TOKEN)
    async with AsyncSession(tmp_path, backend=backend, timeout=30) as s:
        await s.execute("x = 41")
        proxy.swallow()
        task = asyncio.create_task(s.execute("x += 1\nx"))
        # Cut once the request went into the failing link, however long a loaded
        # machine takes to send it: the first bytes lost are its own (a keepalive
        # ping comes only after 20 s of silence).
        assert await until(lambda: proxy.swallowed)
        proxy.cut()
        result = await task
        assert result.ok and result.text == "42\n" and not result.restarted, result.text
        assert (await s.execute("x")).text == "42\n"  # it ran once


async def test_output_sent_while_the_socket_was_down_is_replayed(
    proxy: CuttableProxy, tmp_path: Path
) -> None:
    backend = GatewayBackend(await proxy.start(), token=TOKEN)
    async with AsyncSession(tmp_path, backend=backend, timeout=30) as s:
        # Cut once the cell has printed 'before', so within its 1.5 s sleep: a
        # fixed wait could end before the cell began, or after it ended.
        task = await once_it_says(
            s, "import time\nprint('before', flush=True)\ntime.sleep(1.5)\nprint('after')"
        )
        proxy.cut()
        result = await task
        assert result.ok and "after" in result.stdout, result.text


async def test_a_client_side_drop_reconnects_on_a_stock_gateway(
    stock_gateway: Gateway, tmp_path: Path
) -> None:
    backend = GatewayBackend(stock_gateway.url, token=TOKEN)
    async with AsyncSession(tmp_path, backend=backend, timeout=30) as s:
        await s.execute("x = 1")
        assert backend.channels is not None and backend.channels.v1
        backend.channels.drop()
        assert (await s.execute("x + 1")).text == "2\n"


async def test_keepalive_pings_an_idle_socket(tuned_gateway: Gateway, tmp_path: Path) -> None:
    backend = GatewayBackend(tuned_gateway.url, token=TOKEN, ping_interval=0.3)
    async with AsyncSession(tmp_path, backend=backend, timeout=30) as s:
        await s.execute("x = 1")
        assert backend.channels is not None
        before = backend.channels.last_heard
        await asyncio.sleep(1.5)  # idle: only pongs can arrive
        assert backend.channels.last_heard > before
        assert (await s.execute("x")).text == "1\n"


async def test_a_culled_kernel_is_replaced_and_state_loss_reported(
    tuned_gateway: Gateway, tmp_path: Path
) -> None:
    backend = GatewayBackend(tuned_gateway.url, token=TOKEN)
    async with AsyncSession(tmp_path, backend=backend, timeout=30) as s:
        await s.execute("x = 1")
        assert rest(tuned_gateway, "DELETE", f"/api/kernels/{backend.kernel_id}") == 204
        await until_dead(backend)
        result = await s.execute("print('ran'); 'x' in globals()")
        assert result.ok and result.restarted, result.text
        assert result.text.startswith("ran\nFalse\n")
        assert "gone from the gateway" in result.text


async def test_a_culled_kernel_without_auto_restart_says_so(
    tuned_gateway: Gateway, tmp_path: Path
) -> None:
    backend = GatewayBackend(tuned_gateway.url, token=TOKEN)
    async with AsyncSession(tmp_path, backend=backend, auto_restart=False) as s:
        await s.execute("x = 1")
        rest(tuned_gateway, "DELETE", f"/api/kernels/{backend.kernel_id}")
        await until_dead(backend)
        result = await s.execute("x")
        assert result.status == "kernel_died" and "restart()" in result.text
        assert "gone from the gateway" in result.text


async def test_the_tuned_gateway_keeps_its_secrets_and_honours_the_work_dir(
    tuned_gateway: Gateway, tmp_path: Path
) -> None:
    backend = GatewayBackend(tuned_gateway.url, token=TOKEN)
    async with AsyncSession(tmp_path, backend=backend, env={"MPLBACKEND": "Agg"}) as s:
        code = "import os\nprint(sorted(k for k in os.environ if 'SECRET' in k or 'TOKEN' in k))"
        assert (await s.execute(code)).text == "[]\n"
        assert (await s.execute("os.environ['MPLBACKEND']")).text == "'Agg'\n"
        assert (await s.execute("print(os.getcwd())")).text == f"{tmp_path.resolve()}\n"


async def test_a_bad_token_is_a_clear_error(tuned_gateway: Gateway, tmp_path: Path) -> None:
    backend = GatewayBackend(tuned_gateway.url, token="wrong")
    with pytest.raises(KernelStartError, match="token"):
        async with AsyncSession(tmp_path, backend=backend):
            pass


async def test_nothing_listening_is_a_clear_error(tmp_path: Path) -> None:
    backend = GatewayBackend(f"http://127.0.0.1:{free_port()}", token=TOKEN)
    with pytest.raises(KernelStartError, match="cannot reach the gateway"):
        await backend.start(cwd=tmp_path, env={})


def test_a_url_that_is_not_http_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="http://host:port"):
        GatewayBackend("127.0.0.1:8888")


async def test_a_missing_kernelspec_is_a_clear_error(
    tuned_gateway: Gateway, tmp_path: Path
) -> None:
    backend = GatewayBackend(tuned_gateway.url, token=TOKEN, kernel_name="no-such-kernel")
    with pytest.raises(KernelStartError, match=r"no kernelspec 'no-such-kernel'.*python3"):
        await backend.start(cwd=tmp_path, env={})


@pytest.fixture
def full_legacy_gateway(tmp_path: Path) -> Iterator[Gateway]:
    gateway = stock_kernel_gateway(
        tmp_path,
        "--KernelGatewayApp.max_kernels=1",
        "--ZMQChannelsWebsocketConnection.kernel_ws_protocol=",
    )
    yield gateway
    gateway.stop()


async def test_a_full_gateway_and_the_legacy_protocol(
    full_legacy_gateway: Gateway, tmp_path: Path
) -> None:
    first = GatewayBackend(full_legacy_gateway.url, token=TOKEN)
    async with AsyncSession(tmp_path / "a", backend=first) as s:
        assert first.channels is not None and not first.channels.v1  # JSON frames
        assert (await s.execute("print('legacy')")).text == "legacy\n"
        second = GatewayBackend(full_legacy_gateway.url, token=TOKEN)
        with pytest.raises(KernelStartError, match="as many kernels as it allows"):
            await second.start(cwd=tmp_path, env={})


async def test_a_legacy_gateway_gets_one_websocket_handshake(
    full_legacy_gateway: Gateway, tmp_path: Path
) -> None:
    # Offered the v1 subprotocol, a legacy gateway answers without one. The
    # client took that for a failed handshake and opened a second socket under
    # the same session id, which the gateway handles as a reconnect: it hands
    # the first socket's ZMQ streams to the second while the first's readiness
    # check still runs on them, and that check's end can unsubscribe the
    # second's IOPub (in CI a kernel "did not answer within 60 s").
    backend = GatewayBackend(full_legacy_gateway.url, token=TOKEN)
    async with AsyncSession(tmp_path, backend=backend) as s:
        assert (await s.execute("6 * 7")).text == "42\n"
        assert backend.channels is not None and not backend.channels.v1
        kernel = backend.kernel_id
    log = full_legacy_gateway.log.read_text()
    assert log.count(f"101 GET /api/kernels/{kernel}/channels") == 1, log[-3000:]
    assert "Replacing stale connection" not in log, log[-3000:]


def test_kernelexec_gateway_generates_and_prints_a_token(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "kernelexec", "gateway", "--port", str(free_port())],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=tmp_path,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline() and proc.stdout.readline()  # the URL, then the token
    finally:
        proc.terminate()
        proc.wait(10)
    assert line.startswith("kernelexec gateway: token ")
    assert len(line.split()[-1]) >= 24


def test_v1_frames_match_jupyter_server() -> None:
    msg = _wire.new_message("execute_request", {"code": "1"}, session="s")
    msg["buffers"] = [b"\x00\x01"]
    frame = _wire.encode("shell", msg, v1=True)
    assert isinstance(frame, bytes)
    channel, parts = deserialize_msg_from_ws_v1(frame)
    assert channel == "shell" and len(parts) == 5 and parts[4] == b"\x00\x01"
    theirs = serialize_msg_to_ws_v1(msg, "iopub", _wire._pack)
    channel, decoded = _wire.decode(theirs, v1=True)
    assert channel == "iopub" and decoded["content"] == {"code": "1"}
    assert decoded["msg_type"] == "execute_request"


def test_legacy_frames_with_buffers_decode() -> None:
    msg = _wire.new_message("comm_msg", {"data": {}}, session="s")
    msg["buffers"] = [b"abc"]
    channel, decoded = _wire.decode(serialize_binary_message({**msg, "channel": "iopub"}), v1=False)
    assert channel == "iopub" and decoded["buffers"] == [b"abc"]
    assert _wire.decode(_wire.encode("shell", msg, v1=False), v1=False)[0] == "shell"
