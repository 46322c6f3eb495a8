"""DockerBackend on a real Docker engine: limits, isolation, files, clean-up."""

# Fixtures from servers.py are imported by name and used as parameters:
# ruff: noqa: F401, F811

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from servers import kernel_image

from kernelexec import AsyncSession, DockerBackend, KernelStartError
from kernelexec._backends._image import image_tag


def container_exists(name: str) -> bool:
    proc = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"name=^{name}$"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return bool(proc.stdout.strip())


async def test_a_file_written_by_the_kernel_is_the_users_on_the_host(
    kernel_image: str, tmp_path: Path
) -> None:
    backend = DockerBackend(image=kernel_image, env={"GREETING": "hi"})
    async with AsyncSession(tmp_path, backend=backend) as s:
        result = await s.execute(
            "import os\nopen('made-in-container.txt', 'w').write(os.environ['GREETING'])\n"
            "print(os.getcwd())"
        )
        assert result.ok and result.text == "/workspace\n", result.text
    made = tmp_path / "made-in-container.txt"
    assert made.read_text() == "hi"
    assert (made.stat().st_uid, made.stat().st_gid) == (os.getuid(), os.getgid())


async def test_memory_limit_ends_in_an_out_of_memory_death(
    kernel_image: str, tmp_path: Path
) -> None:
    backend = DockerBackend(image=kernel_image, memory="256m", pids_limit=64, cpus=1)
    async with AsyncSession(tmp_path, backend=backend) as s:
        await s.execute("x = 1")
        assert backend.container is not None
        inspect = subprocess.run(
            ["docker", "inspect", "--format", "{{json .HostConfig}}", backend.container],
            capture_output=True,
            text=True,
            timeout=60,
        )
        host = json.loads(inspect.stdout)
        assert (host["Memory"], host["PidsLimit"], host["NanoCpus"]) == (256 << 20, 64, 10**9)
        result = await s.execute("b = bytearray(1 << 30)")
        assert result.status == "kernel_died" and result.restarted, result.text
        assert "out of memory" in (result.message or "")
        after = await s.execute("print('alive'); 'x' in globals()")
        assert after.ok and after.text.startswith("alive\nFalse\n")


async def test_network_none_leaves_only_loopback(kernel_image: str, tmp_path: Path) -> None:
    # Only the interfaces are listed; no connection is ever attempted.
    async with AsyncSession(tmp_path, backend=DockerBackend(image=kernel_image)) as s:
        result = await s.execute("import os\nsorted(os.listdir('/sys/class/net'))")
        assert result.ok and result.text == "['lo']\n", result.text


async def test_the_container_is_gone_after_close(kernel_image: str, tmp_path: Path) -> None:
    backend = DockerBackend(image=kernel_image)
    async with AsyncSession(tmp_path, backend=backend) as s:
        await s.execute("1")
        name = backend.container
        assert name is not None and container_exists(name)
    assert not container_exists(name)


OWNER = textwrap.dedent("""
    import asyncio, sys
    from kernelexec import AsyncSession, DockerBackend

    async def main():
        backend = DockerBackend(image=sys.argv[1])
        await AsyncSession(sys.argv[2], backend=backend).start()
        print(backend.container, flush=True)
        await asyncio.sleep(600)

    asyncio.run(main())
""")


def test_cleanup_removes_the_container_of_a_killed_process(
    kernel_image: str, tmp_path: Path
) -> None:
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER, kernel_image, str(tmp_path)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert owner.stdout is not None
        name = owner.stdout.readline().strip()
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.wait(30)
    assert name.startswith("kernelexec-") and container_exists(name)  # no atexit after SIGKILL
    proc = subprocess.run(
        [sys.executable, "-m", "kernelexec", "cleanup"], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert f"removed {name}" in proc.stdout
    assert not container_exists(name)


async def test_a_missing_image_names_the_build_command(tmp_path: Path) -> None:
    if subprocess.run(["docker", "info"], capture_output=True, timeout=60).returncode != 0:
        pytest.skip("no Docker engine")  # the kernel_image tests report that in CI
    backend = DockerBackend(image="kernelexec-kernel:no-such-tag")
    with pytest.raises(KernelStartError, match="kernelexec image build"):
        await backend.start(cwd=tmp_path, env={})


async def test_docker_backend_runs_the_image_image_build_made(
    kernel_image: str, tmp_path: Path
) -> None:
    # kernel_image was built by `kernelexec image build --base-image <test base>`,
    # whose tag hashes that base in; DockerBackend() looked only for the tag of
    # python:3.12-slim, which is not on this engine, and failed to start.
    backend = DockerBackend()
    async with AsyncSession(tmp_path, backend=backend) as s:
        assert (await s.execute("print('in the container')")).ok
        assert backend.container is not None
        inspect = subprocess.run(
            ["docker", "inspect", "--format", "{{.Config.Image}}", backend.container],
            capture_output=True,
            text=True,
            timeout=60,
        )
    from kernelexec._backends._image import last_built_tag  # here: the old code has none

    assert inspect.stdout.strip() == last_built_tag()


def test_the_image_tag_follows_its_inputs() -> None:
    assert image_tag() == image_tag()
    assert image_tag(packages=["numpy"]) != image_tag()
    assert image_tag(packages=["a", "b"]) == image_tag(packages=["b", "a"])
    assert image_tag(base_image="other:1") != image_tag()
    assert image_tag(requirements="numpy\n") != image_tag()


@pytest.mark.parametrize("gpus", ["all", "2", "device=0,1"])
def test_gpus_reach_docker_run_as_given(tmp_path: Path, gpus: str) -> None:
    # No test machine has a GPU: this checks what kernelexec controls, the
    # `docker run` options, not that a GPU is then usable in the container.
    backend = DockerBackend(image="kernelexec-kernel:any", gpus=gpus)
    backend._ipc_dir = tmp_path
    options = backend._run_options(tmp_path, {})
    assert options[options.index("--gpus") + 1] == gpus
    plain = DockerBackend(image="kernelexec-kernel:any")
    plain._ipc_dir = tmp_path
    assert "--gpus" not in plain._run_options(tmp_path, {})
