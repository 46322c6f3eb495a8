"""One measurement in a process of its own: ``python worker.py IMPL SCENARIO N``.

Runs under kernelexec's interpreter or a peer's venv, so it imports only the
standard library at the top and each implementation's package inside its
adapter. Prints one JSON object: the samples (seconds) and memory figures.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import resource
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

PRELOAD = "import numpy, matplotlib.pyplot"
# Issue #19's data-stack kernel: its preload, the probe a new session answers,
# and the DataFrame each live session holds.
DATASTACK = "import numpy, pandas, matplotlib"
PROBE = "pandas.DataFrame({'a': [1]}).shape"
BUILD = "df = pandas.DataFrame({'a': range(1000), 'b': [str(i) for i in range(1000)]})"
MEMORY_FLOOR = 3 << 30  # bytes of MemAvailable: density stops before the machine runs short
# kernelexec-shared's density fill waits at the floor for pages to merge, at
# most this long in all (seconds): each wait gives back less, and a full run
# must end (at 45 minutes of waits it still gained some 50 sessions a wait).
MERGE_WAIT = 20 * 60
ZYGOTE_WAIT = 180.0  # seconds for a configuration's zygote to import the data stack
FLOOD_LINES = 100_000
FLOOD_LINE = "x" * 99 + "\n"
FLOOD = f"import sys\nfor _ in range({FLOOD_LINES}): sys.stdout.write({FLOOD_LINE!r})"
FIGURE = "plt.figure(); plt.plot(range(100), [i * i for i in range(100)]); plt.show()"


class Impl:
    """An execution engine as an agent would use it: open, run code, close."""

    def __init__(self, work_dir: Path, preload: str | None = None) -> None:
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

    async def tree_root(self) -> int:
        """The process whose tree is this session's kernel (its memory is the tree's)."""
        return await self.kernel_pid()

    def forked(self) -> bool:
        """Whether the kernel was forked from a zygote."""
        return False

    def delivered(self, out: str) -> str:
        """All the output the last run delivered to its caller, where the caller can read it."""
        return out


class Kernelexec(Impl):
    pool: Any = None
    last: Any = None

    async def open(self) -> None:
        import kernelexec

        self.s = kernelexec.AsyncSession(self.work_dir, pool=self.pool, preload=self.preload)
        await self.s.start()

    async def tree_root(self) -> int:
        # The backend's process is the kernel's supervisor; the kernel is its child.
        process = getattr(self.s._backend, "_process", None)
        return int(process.pid) if process is not None else await self.kernel_pid()

    def forked(self) -> bool:
        return bool(getattr(self.s._backend, "forked", False))

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
    log: Any = None  # the server's stderr, for the cause when it fails

    @classmethod
    def ensure(cls, *command: str) -> str:
        if cls.proc is not None:
            return cls.url
        import subprocess

        argv = [sys.executable, "-m", "kernelexec", *command, "--token", cls.token]
        cls.log = tempfile.TemporaryFile()
        if command[0] == "serve":
            # It binds a free port itself and prints its URL once it listens: no
            # port chosen here that another process could take first.
            cls.proc = subprocess.Popen(
                [*argv, "--port", "0"], stdout=subprocess.PIPE, stderr=cls.log, text=True
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
            [*argv, "--port", str(port)], stdout=subprocess.DEVNULL, stderr=cls.log
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
    def said(cls) -> str:
        """The last line the server wrote to stderr, if any."""
        if cls.log is None:
            return ""
        cls.log.seek(0)
        lines = cls.log.read().decode("utf-8", "replace").strip().splitlines()
        return lines[-1][:300] if lines else ""

    @classmethod
    def stop(cls, wait: float = 60) -> None:
        import subprocess

        if cls.proc is not None:
            cls.proc.terminate()  # it shuts every kernel down first
            try:
                cls.proc.wait(wait)
            except subprocess.TimeoutExpired:
                cls.proc.kill()  # its kernels' supervisors see their owner gone
                cls.proc.wait(60)
            if cls.proc.stdout is not None:
                cls.proc.stdout.close()
            cls.proc = None
        if cls.log is not None:
            cls.log.close()
            cls.log = None


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
            await self.run(self.preload)

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
            await self.run(self.preload)

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
            await self.run(self.preload)

    async def run(self, code: str) -> str:
        def run() -> str:
            from autogen.coding import CodeBlock

            return str(
                self.ex.execute_code_blocks([CodeBlock(code=code, language="python")]).output
            )

        return await asyncio.to_thread(run)

    async def close(self) -> None:
        def stop() -> None:
            import signal
            import subprocess

            self.ex.stop()
            # LocalJupyterServer.stop() sends its Kernel Gateway SIGINT and waits
            # with no limit; here the gateway often never exits on it (whole bench
            # runs hung there). The same signal, then SIGTERM, which it obeys.
            process = self.server._subprocess
            if process.poll() is None:
                process.send_signal(signal.SIGINT)
                try:
                    process.wait(5)
                except subprocess.TimeoutExpired:
                    process.terminate()
                    process.wait(30)

        await asyncio.to_thread(stop)


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


IMPLS: dict[str, type[Impl]] = {
    "kernelexec": Kernelexec,
    "kernelexec-spawn": Kernelexec,
    "kernelexec-shared": Kernelexec,
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


def process_children() -> dict[int, list[int]]:
    """Every living process's children, from one scan of /proc (zombies left out)."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            fields = Path(f"/proc/{name}/stat").read_bytes().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone since the listing
        if fields[0] not in (b"Z", b"X"):
            children.setdefault(int(fields[1]), []).append(int(name))
    return children


def process_tree(root: int, children: dict[int, list[int]] | None = None) -> list[int]:
    """``root`` and every process below it (any depth, not only the first thread's children)."""
    children = process_children() if children is None else children
    found = [root]
    for pid in found:
        found.extend(children.get(pid, ()))
    return found


def parent_of(pid: int) -> int:
    """``pid``'s parent, or 0 if it is gone."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[1])
    except (OSError, IndexError):
        return 0


KSM = Path("/sys/kernel/mm/ksm")
KSM_SETTINGS = {"pages_to_scan": "2000", "sleep_millisecs": "20", "run": "1"}  # "run" last


@contextlib.contextmanager
def merging(wanted: bool) -> Iterator[dict[str, Any]]:
    """KSM on for the block, where ``wanted`` and this process may (root); put back after.

    Yields a dict that gets "ksm" ("on" or "off") and, at the end, ksmd's CPU
    seconds over the block ("ksmd_cpu_s").
    """
    said: dict[str, Any] = {}
    if not wanted:
        yield said
        return
    try:
        saved = {name: (KSM / name).read_text().strip() for name in KSM_SETTINGS}
    except OSError:
        yield {"ksm": "off"}
        return
    mine = os.geteuid() == 0
    if mine:
        for name, value in KSM_SETTINGS.items():
            (KSM / name).write_text(value)
    said["ksm"] = "on" if (KSM / "run").read_text().strip() == "1" else "off"
    before = ksmd_cpu_s()
    try:
        yield said
    finally:
        said["ksmd_cpu_s"] = ksmd_cpu_s() - before
        if mine:
            for name in KSM_SETTINGS:
                (KSM / name).write_text(saved[name])


def ksmd_cpu_s() -> float:
    """The CPU seconds Linux's KSM thread has used since boot (0 where there is none)."""
    for name in os.listdir("/proc"):
        if name.isdigit():
            with contextlib.suppress(OSError):
                if Path(f"/proc/{name}/comm").read_text().strip() == "ksmd":
                    fields = Path(f"/proc/{name}/stat").read_bytes().rsplit(b")", 1)[1].split()
                    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return 0.0


async def settle_merging(pids: list[int], within: float = 300.0) -> dict[str, float]:
    """Waits until ksmd has read every offered page twice more (two full scans); the merges.

    A page merges once two scans have found it unchanged and alike another:
    two full scans after a kernel started, what of it can merge has. The
    scan under way when this is called is not one (it began before the call,
    and may have passed a kernel's pages before they settled): the count of
    full scans must grow by three.
    """
    started = time.monotonic()
    first = _full_scans()
    while time.monotonic() - started < within and _full_scans() < first + 3:
        await asyncio.sleep(1.0)
    count = 0
    for pid in pids:
        with contextlib.suppress(OSError, ValueError):
            count += int(Path(f"/proc/{pid}/ksm_merging_pages").read_text())
    return {"merged_mb": count * 4096 / 2**20, "merge_s": time.monotonic() - started}


def _full_scans() -> int:
    try:
        return int((KSM / "full_scans").read_text())
    except (OSError, ValueError):
        return 0


def rollup(pids: list[int]) -> dict[str, float]:
    """USS and PSS of these processes together, in MB, from /proc/PID/smaps_rollup."""
    uss = pss = 0
    for p in pids:
        try:
            text = Path(f"/proc/{p}/smaps_rollup").read_text()
        except OSError:
            continue
        fields = {line.split(":")[0]: int(line.split()[1]) for line in text.splitlines()[1:]}
        uss += fields.get("Private_Clean", 0) + fields.get("Private_Dirty", 0)
        pss += fields.get("Pss", 0)
    return {"uss_mb": uss / 1024, "pss_mb": pss / 1024}


def smaps(pid: int) -> dict[str, float]:
    """USS and PSS of a process and all its descendants, in MB."""
    return rollup(process_tree(pid))


def mem_available() -> int:
    """The kernel's estimate of memory available without swapping, in bytes."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    raise SystemExit("no MemAvailable in /proc/meminfo")


async def scenario(name: str, impl_name: str, n: int, root: Path) -> dict[str, Any]:
    cls = IMPLS[impl_name]
    counter = iter(range(1_000_000))

    def new(preload: str | None = None) -> Impl:
        work = root / f"w{next(counter)}"
        work.mkdir()
        return cls(work, preload)

    if impl_name == "kernelexec-pooled":
        import kernelexec

        # Contained kernels (the default) wait in a folder of the pool's own and
        # are moved into a session's work dir below its work_root; a session whose
        # work dir is elsewhere starts its own kernel, and would not measure the pool.
        Kernelexec.pool = kernelexec.KernelPool(
            2, preload=PRELOAD if name == "idle_preload" else None, work_root=root
        )
        Kernelexec.pool.start()
        await Kernelexec.pool.wait_ready(120)

    if name == "ready":
        samples, taken = [], []
        pool = Kernelexec.pool
        for _ in range(n):
            if pool is not None:
                await pool.wait_ready(120)  # refilled between samples, untimed
            waiting = pool.ready if pool is not None else 0
            started = time.perf_counter()
            impl = new()
            await impl.open()
            out = await impl.run("1+1")
            samples.append(time.perf_counter() - started)
            assert "2" in out, out
            # A session that could not use the pool starts its own kernel (a warning only).
            taken.append(pool is not None and pool.ready < waiting)
            await impl.close()
        return {"samples": samples, "pooled": taken}

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

        started, cpu = time.perf_counter(), cpu_seconds()
        await asyncio.gather(*(drive(i) for i in impls))
        elapsed, cpu = time.perf_counter() - started, cpu_seconds() - cpu
        await asyncio.gather(*(i.close() for i in impls))
        return {
            "samples": [elapsed],
            "executions": sessions * per,
            "cpu_ms_per_execution": cpu * 1000 / (sessions * per),
        }

    if name in ("idle", "idle_preload"):
        impl = new(PRELOAD if name == "idle_preload" else None)
        await impl.open()
        # The tree's root, not the pid the kernel sees: a contained kernel is in
        # a PID namespace of its own, where its pid names another process here.
        pid = await impl.tree_root()
        await asyncio.sleep(1.0)
        memory = smaps(pid)
        await impl.close()
        return {"samples": [0.0], **memory}

    if name == "cold-datastack":
        return await cold_datastack(impl_name, n, new)
    if name == "idle-memory":
        return await idle_memory(impl_name, n, new)
    if name == "density":
        return await density(impl_name, n, root)
    raise SystemExit(f"unknown scenario {name}")


def cpu_seconds() -> float:
    """This process's CPU time so far, every thread's, user and system."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def warm_zygote(new: Callable[[str | None], Impl]) -> None:
    """Opens data-stack sessions (untimed) until one's kernel is forked from a zygote.

    A configuration's first kernel starts the usual way while its zygote
    imports the preload in the background; the measurement is of the kernels
    after that.
    """
    deadline = time.monotonic() + ZYGOTE_WAIT
    while True:
        impl = new(DATASTACK)
        await impl.open()
        await impl.run("1")
        forked = impl.forked()
        await impl.close()
        if forked:
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"no data-stack kernel was forked within {ZYGOTE_WAIT:.0f} s")
        await asyncio.sleep(0.5)


async def cold_datastack(
    impl_name: str, n: int, new: Callable[[str | None], Impl]
) -> dict[str, Any]:
    """Create -> the probe's result, the data stack preloaded, no pool."""
    if impl_name in ("kernelexec", "kernelexec-shared"):
        await warm_zygote(new)
    samples: list[float] = []
    forked: list[int] = []
    for _ in range(n):
        started = time.perf_counter()
        impl = new(DATASTACK)
        await impl.open()
        out = await impl.run(PROBE)
        samples.append(time.perf_counter() - started)
        assert "(1, 1)" in out, out
        forked.append(int(impl.forked()))
        await impl.close()
    return {"samples": samples, "forked": forked}


async def idle_memory(impl_name: str, n: int, new: Callable[[str | None], Impl]) -> dict[str, Any]:
    """USS and PSS per idle data-stack session, with ``n`` of them live, each holding a DataFrame.

    A session's memory is its kernel's process tree (kernelexec: the
    supervisor and the kernel below it). PSS shares each shared page out over
    the processes mapping it, so it depends on how many sessions are live.
    """
    if impl_name in ("kernelexec", "kernelexec-shared"):
        await warm_zygote(new)
    impls: list[Impl] = []
    roots: list[int] = []
    try:
        for _ in range(n):
            impl = new(DATASTACK)
            await impl.open()
            impls.append(impl)
            out = await impl.run(BUILD + "\ndf.shape")
            assert "(1000, 2)" in out, out
            roots.append(await impl.tree_root())
        await asyncio.sleep(2.0)  # idle: whatever a start or an execution left running is done
        children = process_children()
        merged: dict[str, float] = {}
        if impl_name == "kernelexec-shared":
            merged = await settle_merging([p for r in roots for p in process_tree(r, children)])
            children = process_children()
        figures = [rollup(process_tree(root, children)) for root in roots]
        result: dict[str, Any] = {
            "samples": [0.0],
            "uss_mb": statistics.mean(f["uss_mb"] for f in figures),
            "pss_mb": statistics.mean(f["pss_mb"] for f in figures),
            "forked": [int(i.forked()) for i in impls],
            **merged,
        }
        zygotes = {parent_of(root) for root, i in zip(roots, impls, strict=True) if i.forked()}
        if zygotes:
            # The zygote alone: its children are the sessions measured above.
            result.update({f"zygote_{k}": v for k, v in rollup(sorted(zygotes)).items()})
        return result
    finally:
        for impl in impls:
            await impl.close()


def raise_open_files() -> int:
    """This process's (and its children's) soft limit on open files, raised to the hard one."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


async def density(impl_name: str, n: int, root: Path) -> dict[str, Any]:
    """Up to ``n`` live data-stack sessions, each holding a DataFrame; then each answers.

    kernelexec: one ``kernelexec serve`` process (the data stack preloaded with
    ``--preload``) and sessions over HTTP; raw: jupyter_client kernels held by
    this process. Stops at the first failure, or before MemAvailable falls
    under ``MEMORY_FLOOR`` (the machine is shared: never into swap or the OOM
    killer). Memory is the owner's whole process tree (server, zygote,
    supervisors, kernels) and the drop in MemAvailable.
    """
    open_files = raise_open_files()  # the server inherits it
    before = mem_available()
    sessions: list[Callable[[str], Awaitable[str]]] = []
    closers: list[Callable[[], Awaitable[None]]] = []
    created: list[float] = []
    stop = ""
    waited = 0.0  # seconds the fill waited for pages to merge (kernelexec-shared)
    client: Any = None
    if impl_name == "raw":
        owner = os.getpid()
    else:
        import kernelexec

        url = _Service.ensure(
            "serve",
            "--work-root",
            str(root / "server"),
            "--max-sessions",
            str(n),
            "--preload",
            DATASTACK,
            "--idle-timeout",
            "0",
        )
        owner = _Service.proc.pid
        client = kernelexec.AsyncClient(url, token=_Service.token, timeout=300)
    try:
        for i in range(n):
            if (
                mem_available() < MEMORY_FLOOR
                and impl_name == "kernelexec-shared"
                and waited < MERGE_WAIT
            ):
                # Pages merge some minutes after a kernel starts, as ksmd reads them:
                # a server's sessions come over hours, not in a few minutes.
                print(f"[density] {i} sessions: waiting for merges", file=sys.stderr, flush=True)
                within = min(900.0, MERGE_WAIT - waited)
                settled = await settle_merging(process_tree(owner), within=within)
                waited += settled["merge_s"]
            if mem_available() < MEMORY_FLOOR:
                stop = f"stopped: MemAvailable under {MEMORY_FLOOR >> 30} GB"
                break
            started = time.perf_counter()
            try:
                run, close = await _open_datastack(impl_name, client, root / f"d{i}")
                closers.append(close)
                out = await run(BUILD + "\ndf.shape")
                if "(1000, 2)" not in out:
                    raise RuntimeError(f"the DataFrame was not built: {out[-200:]!r}")
            except Exception as exc:
                said = _Service.said()
                stop = f"session {i + 1} failed: {type(exc).__name__}: {exc}"[:300]
                stop += f" (server: {said})" if said else ""
                break
            created.append(time.perf_counter() - started)
            sessions.append(run)
            if (i + 1) % 100 == 0:
                print(f"[density] {i + 1} sessions", file=sys.stderr, flush=True)
        held = len(sessions)
        await asyncio.sleep(2.0)
        merged: dict[str, float] = {}
        if impl_name == "kernelexec-shared":
            merged = await settle_merging(process_tree(owner), within=600.0)
        children = process_children()
        tree = process_tree(owner, children)
        memory = rollup(tree)
        drop = before - mem_available()
        # A forked kernel's cmdline is its zygote's: the zygote is the one whose parent's is not.
        zygotes = [
            p
            for p in tree
            if b"zygote.py" in _cmdline(p) and b"zygote.py" not in _cmdline(parent_of(p))
        ]
        forked = sum(len(children.get(z, ())) for z in zygotes)
        zygote_memory = rollup(zygotes) if zygotes else {}
        answers: list[float] = []
        failed = within = 0
        why_failed: list[str] = []  # what each failed answer said, so a failure has a cause
        for i, run in enumerate(sessions):
            started = time.perf_counter()
            try:
                said = await run("df.shape")
                ok = "(1000, 2)" in said
            except Exception as exc:
                said, ok = f"{type(exc).__name__}: {exc}", False
            answers.append(time.perf_counter() - started)
            failed += not ok
            within += ok and answers[-1] <= 1.0
            if not ok and len(why_failed) < 10:
                why_failed.append(f"session {i + 1}: {said[-300:]!r}")
        return {
            "samples": answers,
            "asked": n,
            "held": held,
            "stop": stop or f"all {n} held",
            "waited_for_merges_s": waited,
            **merged,
            "created": created,
            "failed_answers": failed,
            "why_failed": why_failed,
            "within_1s": within,
            "mem_drop_mb": drop / 2**20,
            "tree_uss_mb": memory["uss_mb"],
            "tree_pss_mb": memory["pss_mb"],
            "forked": forked,
            "zygote_pss_mb": zygote_memory.get("pss_mb", 0.0),
            "open_files_limit": open_files,
        }
    finally:
        if client is not None:
            await client.close()
            _Service.stop(wait=900)  # ends every session's kernel
        else:
            for k in range(0, len(closers), 20):
                await asyncio.gather(*(c() for c in closers[k : k + 20]), return_exceptions=True)


async def _open_datastack(
    impl_name: str, client: Any, work: Path
) -> tuple[Callable[[str], Awaitable[str]], Callable[[], Awaitable[None]]]:
    """A new data-stack session's ``run`` and ``close``, over HTTP or raw jupyter_client."""
    if client is None:
        work.mkdir()
        impl = Raw(work, DATASTACK)
        await impl.open()
        return impl.run, impl.close
    session = await client.session()

    async def run(code: str) -> str:
        result = await session.execute(code)
        return str(result.text)

    return run, session.close


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


async def measured(name: str, impl_name: str, n: int, root: Path) -> dict[str, Any]:
    try:
        return await scenario(name, impl_name, n, root)
    finally:
        if Kernelexec.pool is not None:
            await Kernelexec.pool.close()
        _Service.stop()


def run_script(
    measure: Callable[[str, str, int, Path], Awaitable[dict[str, Any]]], prefix: str
) -> None:
    """``python SCRIPT IMPL SCENARIO N`` for state.py and agent.py: one JSON result line out."""
    impl, scenario, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with tempfile.TemporaryDirectory(prefix=prefix, ignore_cleanup_errors=True) as root:
        result = asyncio.run(measure(impl, scenario, n, Path(root)))
    result["p50"] = statistics.median(result["samples"])
    print("BENCH-RESULT " + json.dumps(result), flush=True)


def main() -> None:
    impl_name, name, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    # Read when a kernel starts: "kernelexec" is the default, zygote on (also
    # where a caller's environment turned it off), "kernelexec-spawn" is without.
    if impl_name == "kernelexec-spawn":
        os.environ["KERNELEXEC_ZYGOTE"] = "0"
    elif impl_name in ("kernelexec", "kernelexec-shared"):
        os.environ.pop("KERNELEXEC_ZYGOTE", None)
    if impl_name == "kernelexec-shared":
        os.environ["KERNELEXEC_SHARE_PAGES"] = "1"
    threading.excepthook = lambda args: None  # peers' stray thread errors are not results
    with (
        tempfile.TemporaryDirectory(prefix="kernelexec-bench-") as root,
        merging(impl_name == "kernelexec-shared") as ksm,
    ):
        os.chdir(root)  # what a peer writes in its cwd (AG2: jupyter_gateway.log) goes too
        result = asyncio.run(measured(name, impl_name, n, Path(root)))
    result.update(ksm)
    print("BENCH-RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
