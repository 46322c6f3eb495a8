"""Real gateways and a real Docker engine for the backend tests, started on loopback.

Imported by the backend test modules (``from servers import ...``). Outside CI
a missing Docker engine or Enterprise Gateway skips its tests with the reason;
with CI=true the same fixtures fail instead, so CI cannot pass by skipping.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from _serverproc import TOKEN, free_port

IN_CI = os.environ.get("CI", "").lower() == "true"
LOCKS = Path(tempfile.gettempdir()) / "kernelexec-test-locks"
# Held while a test runs a Ray cluster: one at a time in a run (tests/_raycluster.py).
RAY_CLUSTER_LOCK = "ray-cluster"
# What a Ray cluster's processes start under in a test (as root): ahead of the run's
# other work, since Ray gives a raylet a fixed 30 s to register, which its Python
# agent's imports can take on a busy 2-core machine.
FAVOURED = ("nice", "-n", "-10")


def unavailable(reason: str) -> None:
    """Skips the test, or fails it in CI, where every backend must be tested."""
    if IN_CI:
        pytest.fail(f"{reason} (CI=true: backend tests must run, not skip)")
    pytest.skip(reason)


@contextlib.contextmanager
def file_lock(name: str) -> Iterator[None]:
    """Serializes a one-time setup across pytest-xdist workers."""
    LOCKS.mkdir(exist_ok=True)
    with open(LOCKS / name, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@dataclass
class Gateway:
    """A gateway process on loopback."""

    url: str
    token: str
    process: subprocess.Popen[bytes]
    log: Path

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_gateway(
    argv: list[str],
    port: int,
    log: Path,
    *,
    token: str = TOKEN,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> Gateway:
    """Starts ``argv`` and returns once it answers /api/kernelspecs."""
    out = log.open("wb")
    process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd)
    gateway = Gateway(f"http://127.0.0.1:{port}", token, process, log)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{argv[0]} exited: {log.read_text()[-3000:]}")
        request = urllib.request.Request(
            f"{gateway.url}/api/kernelspecs", headers={"Authorization": f"token {token}"}
        )
        with contextlib.suppress(OSError):
            with urllib.request.urlopen(request, timeout=2):
                return gateway
        time.sleep(0.2)
    gateway.stop()
    raise RuntimeError(f"{argv[0]} did not answer: {log.read_text()[-3000:]}")


def kernelexec_gateway(tmp: Path, *extra: str, env: dict[str, str] | None = None) -> Gateway:
    """``kernelexec gateway`` (a tuned Jupyter Kernel Gateway) on a free port."""
    port = free_port()
    return start_gateway(
        [
            sys.executable,
            "-m",
            "kernelexec",
            "gateway",
            "--port",
            str(port),
            "--token",
            TOKEN,
            *extra,
        ],
        port,
        tmp / f"kernelexec-gateway-{port}.log",
        env=env,
        cwd=tmp,
    )


def stock_kernel_gateway(tmp: Path, *options: str) -> Gateway:
    """Stock ``jupyter kernelgateway`` on a free port (this Python's, venv or not)."""
    port = free_port()
    return start_gateway(
        [
            *(sys.executable, "-m", "jupyter"),
            "kernelgateway",
            "--KernelGatewayApp.ip=127.0.0.1",
            f"--KernelGatewayApp.port={port}",
            f"--KernelGatewayApp.auth_token={TOKEN}",
            *options,
        ],
        port,
        tmp / f"kernel-gateway-{port}.log",
        cwd=tmp,
    )


def enterprise_gateway_command() -> Path:
    """Jupyter Enterprise Gateway in its own venv (it pins jupyter_server<2 and
    jupyter_client<7, so it cannot share kernelexec's environment), which the
    suite made before the tests (tests/_testvenvs.py)."""
    import _testvenvs  # here: it imports file_lock from this module

    problem = _testvenvs.problem("enterprise-gateway")
    if problem is not None:
        unavailable(f"no Jupyter Enterprise Gateway: {problem}")
    return _testvenvs.enterprise_gateway_venv() / "bin" / "jupyter-enterprisegateway"


def enterprise_gateway(tmp: Path) -> Gateway:
    """Jupyter Enterprise Gateway (local kernels) on a free port."""
    exe = enterprise_gateway_command()
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "PYTHON"))}
    env["PATH"] = f"{exe.parent}{os.pathsep}{env.get('PATH', '')}"
    return start_gateway(
        [
            str(exe),
            "--ip=127.0.0.1",
            f"--port={port}",
            f"--EnterpriseGatewayApp.auth_token={TOKEN}",
            # EG refuses kernels for "root" by default; CI runs as root.
            "--EnterpriseGatewayApp.unauthorized_users=nobody",
        ],
        port,
        tmp / f"enterprise-gateway-{port}.log",
        env=env,
        cwd=tmp,
    )


def docker_base_image() -> str:
    """The test base image, once the Docker engine is known to answer."""
    if shutil.which("docker") is None:
        unavailable("no docker command; run ../shared/ci/docker-engine.sh")
    info = subprocess.run(["docker", "info"], capture_output=True, text=True, timeout=60)
    if info.returncode != 0:
        unavailable(f"the Docker engine is not reachable: {info.stderr.strip()[:300]}")
    base = os.environ.get("KERNELEXEC_TEST_BASE_IMAGE")
    if not base:
        local = subprocess.run(
            ["docker", "image", "inspect", "kernelexec-base:bookworm"],
            capture_output=True,
            timeout=60,
        )
        if local.returncode != 0:
            unavailable(
                "KERNELEXEC_TEST_BASE_IMAGE is not set; run "
                "../shared/ci/docker-engine.sh and export its BASE_IMAGE"
            )
        base = "kernelexec-base:bookworm"
    return base


def docker_image(*packages: str, base: str | None = None) -> str:
    """The kernel image with ``packages``, built once per machine (by tag) from
    ``base`` (default: the test base image)."""
    base = base or docker_base_image()
    with file_lock("-".join(("docker-image", *packages))):
        proc = subprocess.run(
            [sys.executable, "-m", "kernelexec", "image", "build", "--base-image", base, "--quiet"]
            + (["--packages", *packages] if packages else []),
            capture_output=True,
            text=True,
            timeout=1800,
        )
    if proc.returncode != 0:
        pytest.fail(f"kernelexec image build failed:\n{proc.stderr[-3000:]}")
    return proc.stdout.strip().splitlines()[-1]


def rest(gateway: Gateway, method: str, path: str) -> int:
    """The status of one REST call to ``gateway``."""
    request = urllib.request.Request(
        gateway.url + path, method=method, headers={"Authorization": f"token {gateway.token}"}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


# -- fixtures, imported by name into the test modules that use them


@pytest.fixture(scope="session")
def tuned_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    # Neither the secret nor the headless MPLBACKEND may reach its kernels.
    gateway = kernelexec_gateway(
        tmp_path_factory.mktemp("tuned-gateway"),
        env={**os.environ, "GATEWAY_SECRET_TOKEN": "do-not-leak", "MPLBACKEND": "Agg"},
    )
    yield gateway
    gateway.stop()


@pytest.fixture(scope="session")
def stock_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    gateway = stock_kernel_gateway(tmp_path_factory.mktemp("stock-gateway"))
    yield gateway
    gateway.stop()


@pytest.fixture(scope="session")
def eg_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    gateway = enterprise_gateway(tmp_path_factory.mktemp("enterprise-gateway"))
    yield gateway
    gateway.stop()


@pytest.fixture(scope="session")
def kernel_image() -> str:
    return docker_image()
