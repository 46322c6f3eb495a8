"""One behaviour, every backend: local, Kernel Gateway, Enterprise Gateway, Docker.

Each test runs against real kernels: a local process, a real ``kernelexec
gateway`` (Jupyter Kernel Gateway), a real Jupyter Enterprise Gateway with
local kernels, and a real container on a real Docker engine.
"""

# Fixtures from servers.py are imported by name and used as parameters:
# ruff: noqa: F401

from __future__ import annotations

import base64
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from _pids import default_fork_method
from servers import eg_gateway, kernel_image, tuned_gateway

from kernelexec import AsyncSession, CheckpointError, DockerBackend, GatewayBackend, KernelBackend

# A 1x1 PNG.
PNG = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJ"
    "RU5ErkJggg=="
)
# Enterprise Gateway starts local kernels in its own cwd (it honours
# KERNEL_WORKING_DIR only for container kernels), so files the kernel writes
# land there, not in the session's work dir.
SHARES_WORK_DIR = {"local": True, "gateway": True, "enterprise_gateway": False, "docker": True}

BackendFactory = Callable[[], "KernelBackend | None"]


@pytest.fixture(
    params=[
        pytest.param(kind, marks=pytest.mark.test_venv("enterprise-gateway"))
        if kind == "enterprise_gateway"
        else kind
        for kind in SHARES_WORK_DIR
    ]
)
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def new_backend(request: pytest.FixtureRequest, kind: str) -> BackendFactory:
    if kind == "gateway":
        gateway = request.getfixturevalue("tuned_gateway")
        return lambda: GatewayBackend(gateway.url, token=gateway.token)
    if kind == "enterprise_gateway":
        eg = request.getfixturevalue("eg_gateway")
        return lambda: GatewayBackend(eg.url, token=eg.token)
    if kind == "docker":
        image = request.getfixturevalue("kernel_image")
        return lambda: DockerBackend(image=image)
    return lambda: None


@pytest.fixture
async def ksession(tmp_path: Path, new_backend: BackendFactory) -> AsyncIterator[AsyncSession]:
    async with AsyncSession(tmp_path / "work", backend=new_backend(), timeout=60) as s:
        yield s


async def test_state_is_kept_and_outputs_come_back(ksession: AsyncSession) -> None:
    await ksession.execute("x = 41")
    code = "import sys\nprint('out')\nprint('err', file=sys.stderr)\nx + 1"
    result = await ksession.execute(code)
    assert result.ok, result.text
    assert result.stdout == "out\n" and result.stderr == "err\n"
    assert "42" in result.text
    shell = await ksession.execute("echo from-bash", language="bash")
    assert shell.ok and shell.stdout == "from-bash\n"


async def test_an_image_lands_in_the_host_work_dir(ksession: AsyncSession, kind: str) -> None:
    code = (
        "import base64\nfrom IPython.display import Image, display\n"
        f"data = base64.b64decode('{PNG}')\nopen('written.png', 'wb').write(data)\n"
        "display(Image(data=data))"
    )
    result = await ksession.execute(code)
    assert result.ok, result.text
    shown = [f for f in result.files if f.endswith(".png")]
    assert shown and (ksession.work_dir / shown[0]).read_bytes() == base64.b64decode(PNG)
    if SHARES_WORK_DIR[kind]:
        assert (ksession.work_dir / "written.png").read_bytes() == base64.b64decode(PNG)


async def test_an_error_is_data(ksession: AsyncSession) -> None:
    result = await ksession.execute("1 / 0")
    assert result.status == "error" and result.error is not None
    assert result.error.ename == "ZeroDivisionError"
    assert (await ksession.execute("'still here'")).ok


async def test_a_timeout_interrupts_and_keeps_state(ksession: AsyncSession) -> None:
    await ksession.execute("x = 1")
    result = await ksession.execute("print('partial', flush=True)\nwhile True: pass", timeout=2)
    assert result.status == "timeout" and not result.restarted, result.text
    assert "partial" in result.stdout
    assert "state is kept" in result.text
    assert (await ksession.execute("x")).text == "1\n"


async def test_restart_clears_state(ksession: AsyncSession) -> None:
    await ksession.execute("x = 1")
    await ksession.restart()
    assert (await ksession.execute("'x' in globals()")).text == "False\n"


async def test_kernel_death_is_reported_and_the_next_execute_works(ksession: AsyncSession) -> None:
    await ksession.execute("x = 1")
    result = await ksession.execute("import os; os._exit(1)")
    assert result.status == "kernel_died" and result.restarted, result.text
    assert "gone" in result.text
    after = await ksession.execute("print('alive'); 'x' in globals()")
    assert after.ok and after.text.startswith("alive\nFalse\n"), after.text


async def test_a_fork_carries_the_state_on_every_backend(
    ksession: AsyncSession, kind: str, tmp_path: Path
) -> None:
    # A local kernel forks as a process; a gateway's or a container's is
    # checkpointed and restored into a new kernel of the same kind.
    await ksession.execute("import math\nsaved = {'pi': round(math.pi, 3)}")
    if not SHARES_WORK_DIR[kind]:
        # Enterprise Gateway's kernel runs elsewhere (its cwd is not the work
        # dir) in a Python of its own (without cloudpickle in the test's): a
        # checkpoint cannot be made there, and the error says why.
        with pytest.raises(CheckpointError, match=r"cloudpickle|work dir"):
            await ksession.fork(tmp_path / "fork")
        return
    async with await ksession.fork(tmp_path / "fork") as fork:
        report = fork.fork_report
        assert report is not None
        assert report.method == (default_fork_method() if kind == "local" else "checkpoint")
        assert type(fork._backend) is type(ksession._backend)
        answer = await fork.execute("print(saved['pi'], math.sqrt(4))")
        assert answer.stdout == "3.142 2.0\n", answer.text
        await fork.execute("saved['pi'] = 0")
    assert (await ksession.execute("print(saved['pi'])")).stdout == "3.142\n"


@pytest.mark.parametrize("zygote", [False, True])
def test_a_kernel_started_from_a_thread_blocking_sigint_can_be_interrupted(
    zygote: bool, tmp_path: Path
) -> None:
    # Ray's worker threads block SIGINT, and a signal mask survives fork and exec: the
    # kernel unblocks it itself, so a timeout interrupts it and its state is kept.
    script = (
        "import signal, threading, kernelexec\n"
        "found = []\n"
        "def run():\n"
        "    signal.pthread_sigmask(signal.SIG_BLOCK, {{signal.SIGINT}})\n"
        "    with kernelexec.Session({!r}, zygote={!r}, sandbox=False) as s:\n"
        "        s.execute('x = 41')\n"
        "        found.append(s.execute('while True:\\n    pass', timeout=2).status)\n"
        "        found.append(s.execute('print(x + 1)').stdout.strip())\n"
        "thread = threading.Thread(target=run)\n"
        "thread.start(); thread.join()\n"
        "print(found)\n"
    ).format(str(tmp_path / "work"), zygote)
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "['timeout', '42']", done.stdout
