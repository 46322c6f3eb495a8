"""DockerBackend(packages=, requirements=, base_image=) builds its image, once.

On a real Docker engine, with pip in the build reaching the package index. How
often the backend builds is counted by a wrapper in front of the real docker
command that logs each call's subcommand.

`DockerBackend()` finding what `kernelexec image build --base-image X` built is
tests/test_docker.py::test_docker_backend_runs_the_image_image_build_made.
"""

# Fixtures from servers.py are imported by name and used as parameters:
# ruff: noqa: F401, F811

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from servers import docker_base_image, kernel_image

from kernelexec import AsyncSession, ConfigurationError, DockerBackend, EnvironmentBuildError
from kernelexec._backends._image import image_tag, last_built_tag


@pytest.fixture
def docker_calls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The docker command through a wrapper that logs each call; returns the log."""
    real = shutil.which("docker")
    assert real is not None
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "docker-calls.log"
    log.touch()
    wrapper = bin_dir / "docker"
    wrapper.write_text(f'#!/bin/sh\necho "$1" >> "{log}"\nexec "{real}" "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return log


def _builds(log: Path) -> int:
    return log.read_text().splitlines().count("build")


def _image_id(tag: str) -> str:
    proc = subprocess.run(
        ["docker", "image", "inspect", "--format", "{{.Id}}", tag],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return proc.stdout.strip() if proc.returncode == 0 else ""


async def _rich_in(backend: DockerBackend, work: Path) -> str:
    async with AsyncSession(work, backend=backend, timeout=60) as session:
        result = await session.execute("import rich, sys; print(sys.prefix)")
    assert result.status == "ok", result.text
    return result.stdout.strip()


@pytest.mark.timeout(1800)
async def test_packages_build_the_image_once_and_a_second_backend_reuses_it(
    kernel_image: str, tmp_path: Path, docker_calls: Path
) -> None:
    base = docker_base_image()
    tag = image_tag(base_image=base, packages=["rich"])
    # Removed first, so this run builds it whatever earlier runs left.
    subprocess.run(["docker", "rmi", "-f", tag], capture_output=True, timeout=120, check=False)
    default_before = _image_id(last_built_tag())

    first = DockerBackend(packages=["rich"], base_image=base)
    assert await _rich_in(first, tmp_path / "a") == "/opt/venv"
    assert _builds(docker_calls) == 1
    assert _image_id(tag)

    second = DockerBackend(packages=["rich"], base_image=base)
    assert await _rich_in(second, tmp_path / "b") == "/opt/venv"
    assert _builds(docker_calls) == 1  # found by its tag, not built again
    # DockerBackend() still runs the image `kernelexec image build` made.
    assert _image_id(last_built_tag()) == default_before != _image_id(tag)


@pytest.mark.timeout(1800)
async def test_a_requirements_file_and_a_spec_with_spaces_reach_pip_whole(
    kernel_image: str, tmp_path: Path, docker_calls: Path
) -> None:
    # "pygments >= 2" split by a shell (as `pip install $PACKAGES` did) is three
    # arguments, and pip refuses ">=" as a requirement.
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("rich\n")
    backend = DockerBackend(
        packages=["pygments >= 2"], requirements=requirements, base_image=docker_base_image()
    )
    async with AsyncSession(tmp_path / "w", backend=backend, timeout=60) as session:
        result = await session.execute("import rich, pygments; print('both')")
    assert result.status == "ok" and result.stdout == "both\n", result.text
    assert _builds(docker_calls) <= 1


@pytest.mark.timeout(1800)
async def test_a_package_that_does_not_install_is_a_clear_error(
    kernel_image: str, tmp_path: Path
) -> None:
    # A name the index has no distribution of (paths are refused before any build).
    package = "kernelexec-test-no-such-distribution-0"
    backend = DockerBackend(packages=[package], base_image=docker_base_image())
    session = AsyncSession(tmp_path, backend=backend)
    with pytest.raises(EnvironmentBuildError, match="docker build") as caught:
        await session.start()
    await session.close()
    assert "kernelexec-test-no-such-distribution-0" in str(caught.value)  # pip's own words
    assert not _image_id(image_tag(base_image=docker_base_image(), packages=[package]))


@pytest.mark.parametrize(
    "packages",
    [
        ["--index-url=http://127.0.0.1:9/simple"],
        ["rich", "-r/etc/passwd"],
        ["rich\n--extra-index-url=http://127.0.0.1:9/"],
        "rich",
    ],
)
def test_packages_that_would_act_as_pip_options_are_refused(packages: object) -> None:
    with pytest.raises(ConfigurationError, match="packages="):
        DockerBackend(packages=packages)  # type: ignore[arg-type]


def test_bad_requirements_and_conflicting_arguments_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="no such file"):
        DockerBackend(requirements=tmp_path / "missing-requirements.txt")
    with pytest.raises(ConfigurationError, match="no such file"):
        DockerBackend(requirements=tmp_path)  # a directory is no requirements file
    with pytest.raises(ConfigurationError, match="not both"):
        DockerBackend(image="kernelexec-kernel:x", packages=["rich"])


@pytest.mark.parametrize(
    ("arguments", "said"),
    [
        (["--packages=-e/etc"], "looks like an installer option"),
        (["--packages", "rich", "--requirements", "missing.txt"], "missing.txt"),
    ],
)
def test_the_command_line_refuses_bad_packages_in_one_line(
    tmp_path: Path, arguments: list[str], said: str
) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "kernelexec", "image", "build", *arguments],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert proc.returncode == 2, proc.stderr
    assert said in proc.stderr
    assert "Traceback" not in proc.stderr
