"""One measurement in a process of its own: ``python worker.py IMPL SCENARIO N``.

Runs under kernelexec's interpreter or a peer's venv, so it imports only the
standard library at the top and each implementation's package inside its
adapter. Prints one JSON object: the samples (seconds) and memory figures.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

PRELOAD = "import numpy, matplotlib.pyplot"
FLOOD_LINES = 100_000
FLOOD_LINE = "x" * 99 + "\n"
FLOOD = f"import sys\nfor _ in range({FLOOD_LINES}): sys.stdout.write({FLOOD_LINE!r})"
FIGURE = "plt.figure(); plt.plot(range(100), [i * i for i in range(100)]); plt.show()"


class Impl:
    """An execution engine as an agent would use it: open, run code, close."""

    def __init__(self, work_dir: Path, preload: bool = False) -> None:
        self.work_dir = work_dir
        self.preload = preload

    async def open(self) -> None:
        raise NotImplementedError

    async def run(self, code: str) -> str:
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError

    async def kernel_pid(self) -> int:
        out = await self.run("import os; print(os.getpid())")
        return int(out.strip().splitlines()[-1])

    def delivered(self, out: str) -> str:
        """All the output the last run delivered to its caller, where the caller can read it."""
        return out


class Kernelexec(Impl):
    pool: Any = None
    last: Any = None

    async def open(self) -> None:
        import kernelexec

        self.s = kernelexec.AsyncSession(
            self.work_dir, pool=self.pool, preload=PRELOAD if self.preload else None
        )
        await self.s.start()

    async def run(self, code: str) -> str:
        self.last = await self.s.execute(code)
        return str(self.last.text)

    def delivered(self, out: str) -> str:
        # text is capped for an LLM; the complete output is in the work dir
        if self.last is not None and self.last.full_output:
            return str((self.s.work_dir / self.last.full_output).read_text())
        return out

    async def close(self) -> None:
        await self.s.close()


class _Service:
    """A server process of our own on a free loopback port, shared by a worker's sessions."""

    proc: Any = None
    url = ""
    token = "bench-token-0123456789"

    @classmethod
    def ensure(cls, *command: str) -> str:
        if cls.proc is not None:
            return cls.url
        import subprocess

        argv = [sys.executable, "-m", "kernelexec", *command, "--token", cls.token]
        if command[0] == "serve":
            # It binds a free port itself and prints its URL once it listens: no
            # port chosen here that another process could take first.
            cls.proc = subprocess.Popen(
                [*argv, "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
            )
            line = cls.proc.stdout.readline()  # "kernelexec: serving http://127.0.0.1:PORT (...)"
            if "serving" not in line:
                raise SystemExit(f"kernelexec serve did not start (exit status {cls.proc.wait()})")
            cls.url = line.split()[2]
            return cls.url
        # The gateway does not say which port 0 gave it: a free port is chosen
        # here, and the gateway is asked until it answers.
        import socket
        import urllib.request

        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        cls.proc = subprocess.Popen(
            [*argv, "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        cls.url = f"http://127.0.0.1:{port}"
        for _ in range(600):
            try:
                urllib.request.urlopen(cls.url + "/api", timeout=1)
                break
            except OSError:
                time.sleep(0.1)
        return cls.url

    @classmethod
    def stop(cls) -> None:
        if cls.proc is not None:
            cls.proc.terminate()
            cls.proc.wait(60)
            if cls.proc.stdout is not None:
                cls.proc.stdout.close()
            cls.proc = None


class KernelexecHTTP(Impl):
    """kernelexec serve, reached with AsyncClient."""

    async def open(self) -> None:
        import kernelexec

        url = _Service.ensure("serve", "--work-root", str(self.work_dir))
        self.client = kernelexec.AsyncClient(url, token=_Service.token, timeout=120)
        self.s = await self.client.session()

    async def run(self, code: str) -> str:
        return str((await self.s.execute(code)).text)

    async def close(self) -> None:
        await self.s.close()
        await self.client.close()


class KernelexecGateway(Kernelexec):
    """kernelexec gateway (a tuned Kernel Gateway), reached with GatewayBackend."""

    async def open(self) -> None:
        import kernelexec

        url = _Service.ensure("gateway")
        backend = kernelexec.GatewayBackend(url, token=_Service.token)
        self.s = kernelexec.AsyncSession(self.work_dir, backend=backend)
        await self.s.start()


class KernelexecDocker(Kernelexec):
    """A container per session, built by ``kernelexec image build``."""

    async def open(self) -> None:
        import kernelexec
        from kernelexec._backends._image import image_tag

        # The image `kernelexec image build --base-image B` made (CI: the registry-free base).
        image = image_tag(base_image=os.environ.get("KERNELEXEC_TEST_BASE_IMAGE"))
        backend = kernelexec.DockerBackend(image=image)
        self.s = kernelexec.AsyncSession(self.work_dir, backend=backend)
        await self.s.start()


class Raw(Impl):
    async def open(self) -> None:
        from jupyter_client.manager import AsyncKernelManager

        self.km = AsyncKernelManager(kernel_name="python3")
        await self.km.start_kernel(cwd=str(self.work_dir))
        self.kc = self.km.client()
        self.kc.start_channels()
        await self.kc.wait_for_ready(timeout=60)
        if self.preload:
            await self.run(PRELOAD)

    async def run(self, code: str) -> str:
        msg_id = self.kc.execute(code)
        parts: list[str] = []
        while True:
            msg = await self.kc.get_iopub_msg(timeout=120)
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                parts.append(content["text"])
            elif kind == "execute_result":
                parts.append(content["data"].get("text/plain", "") + "\n")
            elif kind == "status" and content["execution_state"] == "idle":
                return "".join(parts)

    async def close(self) -> None:
        self.kc.stop_channels()
        await self.km.shutdown_kernel(now=True)


class AutoGen(Impl):
    async def open(self) -> None:
        from autogen_ext.code_executors.jupyter import JupyterCodeExecutor

        self.ex = JupyterCodeExecutor(kernel_name="python3", timeout=120, output_dir=self.work_dir)
        await self.ex.start()
        if self.preload:
            await self.run(PRELOAD)

    async def run(self, code: str) -> str:
        from autogen_core import CancellationToken
        from autogen_core.code_executor import CodeBlock

        result = await self.ex.execute_code_blocks(
            [CodeBlock(code=code, language="python")], CancellationToken()
        )
        return str(result.output)

    async def close(self) -> None:
        await self.ex.stop()


class AG2(Impl):
    """AG2's executor is synchronous; its calls run in a thread, as an async agent would."""

    async def open(self) -> None:
        def start() -> None:
            from autogen.coding.jupyter import JupyterCodeExecutor, LocalJupyterServer

            # A free port of its own: its default, 8888, may be a JupyterLab's,
            # and then its client talks to the wrong server and hangs.
            self.server = LocalJupyterServer(port=_free_port())
            self.ex = JupyterCodeExecutor(self.server, output_dir=self.work_dir, timeout=120)

        await asyncio.to_thread(start)
        if self.preload:
            await self.run(PRELOAD)

    async def run(self, code: str) -> str:
        def run() -> str:
            from autogen.coding import CodeBlock

            return str(
                self.ex.execute_code_blocks([CodeBlock(code=code, language="python")]).output
            )

        return await asyncio.to_thread(run)

    async def close(self) -> None:
        def stop() -> None:
            self.ex.stop()
            self.server.stop()

        await asyncio.to_thread(stop)


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


IMPLS: dict[str, type[Impl]] = {
    "kernelexec": Kernelexec,
    "kernelexec-pooled": Kernelexec,
    "kernelexec-http": KernelexecHTTP,
    "kernelexec-gateway": KernelexecGateway,
    "kernelexec-docker": KernelexecDocker,
    "raw": Raw,
    "autogen": AutoGen,
    "ag2": AG2,
}


def rss_mb() -> float:
    status = Path("/proc/self/status").read_text()
    return int(status.split("VmRSS:")[1].split()[0]) / 1024


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def smaps(pid: int) -> dict[str, float]:
    """USS and PSS of a process and all its descendants, in MB."""
    pids = [pid]
    for p in pids:
        try:
            children = Path(f"/proc/{p}/task/{p}/children").read_text().split()
        except OSError:
            children = []
        pids.extend(int(c) for c in children)
    uss = pss = 0
    for p in pids:
        try:
            rollup = Path(f"/proc/{p}/smaps_rollup").read_text()
        except OSError:
            continue
        fields = {line.split(":")[0]: int(line.split()[1]) for line in rollup.splitlines()[1:]}
        uss += fields.get("Private_Clean", 0) + fields.get("Private_Dirty", 0)
        pss += fields.get("Pss", 0)
    return {"uss_mb": uss / 1024, "pss_mb": pss / 1024}


async def scenario(name: str, impl_name: str, n: int, root: Path) -> dict[str, Any]:
    cls = IMPLS[impl_name]
    counter = iter(range(1_000_000))

    def new(preload: bool = False) -> Impl:
        work = root / f"w{next(counter)}"
        work.mkdir()
        return cls(work, preload)

    if impl_name == "kernelexec-pooled":
        import kernelexec

        Kernelexec.pool = kernelexec.KernelPool(
            2, preload=PRELOAD if name == "idle_preload" else None
        )
        Kernelexec.pool.start()
        await Kernelexec.pool.wait_ready(120)

    if name == "ready":
        samples = []
        for _ in range(n):
            if Kernelexec.pool is not None:
                await Kernelexec.pool.wait_ready(120)  # refilled between samples, untimed
            started = time.perf_counter()
            impl = new()
            await impl.open()
            out = await impl.run("1+1")
            samples.append(time.perf_counter() - started)
            assert "2" in out, out
            await impl.close()
        return {"samples": samples}

    if name == "roundtrip":
        impl = new()
        await impl.open()
        await impl.run("x = 1")
        samples = []
        for _ in range(n):
            started = time.perf_counter()
            out = await impl.run("x + 1")
            samples.append(time.perf_counter() - started)
        assert "2" in out, out
        await impl.close()
        return {"samples": samples}

    if name in ("flood", "figure"):
        impl = new()
        await impl.open()
        if name == "figure":
            await impl.run("import matplotlib.pyplot as plt\n%matplotlib inline")
        await impl.run("1")
        base = rss_mb()
        samples = []
        for _ in range(n):
            started = time.perf_counter()
            out = await impl.run(FLOOD if name == "flood" else FIGURE)
            samples.append(time.perf_counter() - started)
        growth = peak_rss_mb() - base  # before reading the output back, which takes memory
        lines = impl.delivered(out).count(FLOOD_LINE) if name == "flood" else 0
        await impl.close()
        return {
            "samples": samples,
            "peak_growth_mb": growth,
            "text_chars": len(out),
            "delivered_lines": lines,
        }

    if name == "concurrent":
        sessions, per = 16, max(n, 1)
        impls = [new() for _ in range(sessions)]
        await asyncio.gather(*(i.open() for i in impls))

        async def drive(impl: Impl) -> None:
            for k in range(per):
                await impl.run(f"v = {k}")

        started = time.perf_counter()
        await asyncio.gather(*(drive(i) for i in impls))
        elapsed = time.perf_counter() - started
        await asyncio.gather(*(i.close() for i in impls))
        return {"samples": [elapsed], "executions": sessions * per}

    if name in ("idle", "idle_preload"):
        impl = new(preload=name == "idle_preload")
        await impl.open()
        pid = await impl.kernel_pid()
        await asyncio.sleep(1.0)
        memory = smaps(pid)
        await impl.close()
        return {"samples": [0.0], **memory}

    raise SystemExit(f"unknown scenario {name}")


async def measured(name: str, impl_name: str, n: int, root: Path) -> dict[str, Any]:
    try:
        return await scenario(name, impl_name, n, root)
    finally:
        if Kernelexec.pool is not None:
            await Kernelexec.pool.close()
        _Service.stop()


def main() -> None:
    impl_name, name, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    threading.excepthook = lambda args: None  # peers' stray thread errors are not results
    with tempfile.TemporaryDirectory(prefix="kernelexec-bench-") as root:
        os.chdir(root)  # what a peer writes in its cwd (AG2: jupyter_gateway.log) goes too
        result = asyncio.run(measured(name, impl_name, n, Path(root)))
    print("BENCH-RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
