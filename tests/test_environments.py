"""Environments made for a session: AsyncSession(packages=, python_version=, venv=).

Real environments, made with the real uv and the real venv + pip, with
packages from the package index. Where a test must know how often an
environment was built, uv is run through a wrapper script that logs each
call: instrumentation, the real uv still does the work.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import uv as uv_package
from _wheelhouse import FAILING, WHY, offline_env, wheelhouse

from kernelexec import (
    AsyncSession,
    ConfigurationError,
    DockerBackend,
    EnvironmentBuildError,
    KernelPool,
    Session,
)

REAL_UV = uv_package.find_uv_bin()
HERE = f"{sys.version_info.major}.{sys.version_info.minor}"


@pytest.fixture(scope="session")
def shared_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One environment cache for the whole run, shared by the xdist workers.

    The workers' base temp dirs share a parent; the first test to ask for an
    environment builds it under the cache's lock and the others reuse it.
    """
    return tmp_path_factory.getbasetemp().parent / "kernelexec-envs"


@pytest.fixture
def with_uv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shared_cache: Path) -> Path:
    """uv on PATH through a wrapper that logs each call; returns the log."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "uv-calls.log"
    log.touch()
    wrapper = bin_dir / "uv"
    wrapper.write_text(f'#!/bin/sh\necho "$*" >> "{log}"\nexec "{REAL_UV}" "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("KERNELEXEC_VENV_DIR", str(shared_cache))
    return log


@pytest.fixture
def without_uv(monkeypatch: pytest.MonkeyPatch, shared_cache: Path) -> None:
    """PATH without any directory that has a uv: the standard library's venv and pip."""
    kept = [d for d in os.environ["PATH"].split(os.pathsep) if not (Path(d) / "uv").exists()]
    monkeypatch.setenv("PATH", os.pathsep.join(kept))
    monkeypatch.setenv("KERNELEXEC_VENV_DIR", str(shared_cache))


def _uv_calls(log: Path, what: str) -> int:
    return sum(1 for line in log.read_text().splitlines() if line.startswith(what))


def _made_by_uv(env: Path) -> bool:
    # uv records itself in pyvenv.cfg ("uv = 0.13.9"); venv does not.
    return any(line.startswith("uv =") for line in (env / "pyvenv.cfg").read_text().splitlines())


async def _where_rich(session: AsyncSession) -> Path:
    result = await session.execute("import rich, sys; print(sys.prefix)")
    assert result.status == "ok", result.text
    return Path(result.stdout.strip())


# -- acceptance 4: made once, then reused


@pytest.mark.timeout(600)
async def test_venv_and_pip_make_the_env_once_and_a_second_start_reuses_it(
    tmp_path: Path, without_uv: None
) -> None:
    env = tmp_path / "env"
    async with AsyncSession(tmp_path / "a", packages=["rich"], venv=env) as first:
        assert await _where_rich(first) == env
    assert not _made_by_uv(env)  # the venv + pip path ran
    marker = env / ".kernelexec-env.json"
    stamp = (marker.stat().st_ino, marker.stat().st_mtime_ns)
    site = next((env / "lib").glob("python*/site-packages"))
    (site / "left_by_the_first_build.py").write_text("")  # a rebuild would keep it too ...
    cfg = (env / "pyvenv.cfg").stat().st_mtime_ns  # ... but would rewrite pyvenv.cfg

    async with AsyncSession(tmp_path / "b", packages=["rich"], venv=env) as second:
        assert await _where_rich(second) == env
    assert (marker.stat().st_ino, marker.stat().st_mtime_ns) == stamp
    assert (env / "pyvenv.cfg").stat().st_mtime_ns == cfg


@pytest.mark.timeout(600)
async def test_uv_makes_a_cached_env_that_the_next_session_finds(with_uv: Path) -> None:
    async with AsyncSession(packages=["rich"]) as first:
        env = await _where_rich(first)
    assert _made_by_uv(env)
    assert env.parent == Path(os.environ["KERNELEXEC_VENV_DIR"])
    installs = _uv_calls(with_uv, "pip install")

    async with AsyncSession(packages=["rich"]) as second:
        assert await _where_rich(second) == env
    # Nothing installed or made the second time: the marker was enough.
    assert _uv_calls(with_uv, "pip install") == installs
    assert _uv_calls(with_uv, "venv") <= 1


def test_the_sync_session_takes_the_same_arguments(with_uv: Path) -> None:
    with Session(packages=["rich"], python_version=HERE) as session:
        result = session.execute("import rich, sys; print(sys.version_info[:2])")
    assert result.status == "ok", result.text
    assert result.stdout.strip() == str(sys.version_info[:2])


@pytest.mark.timeout(600)
async def test_two_sessions_asking_at_once_share_one_build(
    tmp_path: Path, with_uv: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A cache of its own, so the build happens here, under both sessions at once.
    monkeypatch.setenv("KERNELEXEC_VENV_DIR", str(tmp_path / "cache"))
    sessions = [AsyncSession(tmp_path / f"s{i}", packages=["rich"]) for i in range(3)]
    try:
        await asyncio.gather(*(s.start() for s in sessions))
        envs = {await _where_rich(s) for s in sessions}
    finally:
        await asyncio.gather(*(s.close() for s in sessions))
    assert len(envs) == 1
    assert _uv_calls(with_uv, "venv") == 1
    assert _uv_calls(with_uv, "pip install") == 1


@pytest.mark.timeout(600)
async def test_the_event_loop_runs_while_an_env_is_made(
    tmp_path: Path, with_uv: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    monkeypatch.setenv("KERNELEXEC_VENV_DIR", str(cache))
    ticks_during_build = 0
    done = False

    async def tick() -> None:
        # The "building" file exists only inside the build: a build that held
        # the event loop would let no tick see it.
        nonlocal ticks_during_build
        while not done:
            ticks_during_build += any(cache.glob("*/.kernelexec-building"))
            await asyncio.sleep(0.005)

    ticker = asyncio.create_task(tick())
    try:
        async with AsyncSession(tmp_path / "w", packages=["rich"]) as session:
            assert await _where_rich(session)
    finally:
        done = True
        await ticker
    assert _uv_calls(with_uv, "venv") == 1  # it was made here
    assert ticks_during_build > 0


@pytest.mark.timeout(600)
def test_an_interrupted_build_is_not_reused(
    tmp_path: Path, with_uv: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    monkeypatch.setenv("KERNELEXEC_VENV_DIR", str(cache))
    env = tmp_path / "env"
    # The build's process and its installer are killed as soon as the build begins.
    builder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from kernelexec._venvs._venv import EnvRequest, make_env\n"
            f"make_env(EnvRequest.of(packages=['rich'], python=None, python_version=None, "
            f"venv={str(env)!r}))",
        ],
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not (env / "pyvenv.cfg").exists() and builder.poll() is None:
            assert time.monotonic() < deadline, "the build never began"
            time.sleep(0.005)
    finally:
        os.killpg(builder.pid, signal.SIGKILL)
        builder.wait()
    assert (env / ".kernelexec-building").exists()
    assert not (env / ".kernelexec-env.json").exists()

    with Session(tmp_path / "w", packages=["rich"], venv=env) as session:
        result = session.execute("import rich, sys; print(sys.prefix)")
    assert result.status == "ok", result.text
    assert not (env / ".kernelexec-building").exists()
    assert json.loads((env / ".kernelexec-env.json").read_text())["packages"] == ["rich"]


async def test_an_existing_venv_gets_the_packages_installed_into_it(
    tmp_path: Path, with_uv: Path
) -> None:
    env = tmp_path / "mine"
    subprocess.run([REAL_UV, "venv", "-q", "--python", sys.executable, str(env)], check=True)
    (env / "my_file.txt").write_text("kept")
    async with AsyncSession(tmp_path / "w", packages=["rich"], venv=env) as session:
        assert await _where_rich(session) == env
    assert (env / "my_file.txt").read_text() == "kept"


@pytest.mark.timeout(600)
async def test_a_pool_makes_the_env_for_its_kernels(tmp_path: Path, with_uv: Path) -> None:
    async with KernelPool(2, packages=["rich"], refill_delay=0) as pool:
        await pool.wait_ready(timeout=300)
        async with AsyncSession(tmp_path / "a", pool=pool) as session:
            env = await _where_rich(session)
        with pytest.warns(UserWarning, match=r"packages=\['rich', 'pygments'\]"):
            other = AsyncSession(tmp_path / "b", pool=pool, packages=["rich", "pygments"])
        async with other:
            assert await _where_rich(other) != env


# -- clear errors


async def test_a_package_that_fails_to_install_says_why_and_leaves_no_env(
    tmp_path: Path, without_uv: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # From a local folder: the package's build fails, and no index is reached.
    for name, value in offline_env(wheelhouse(tmp_path / "house")).items():
        monkeypatch.setenv(name, value)
    env = tmp_path / "env"
    session = AsyncSession(tmp_path / "w", packages=[FAILING], venv=env)
    with pytest.raises(EnvironmentBuildError) as caught:
        await session.start()
    await session.close()
    message = str(caught.value)
    assert message.startswith(f"`pip install` could not install {FAILING} ")
    assert WHY in message  # pip's own words, as the build said them
    assert not env.exists()  # no half environment for the next session to find


@pytest.mark.parametrize("with_fake", [False, True])
async def test_a_python_version_that_is_not_there_is_a_clear_error(
    tmp_path: Path, with_uv: Path, monkeypatch: pytest.MonkeyPatch, with_fake: bool
) -> None:
    version = "3.98" if with_fake else "3.99"
    if with_fake:
        # Like a pyenv shim for a version that is not selected: on PATH, but fails.
        fake = tmp_path / "bin" / f"python{version}"
        fake.write_text("#!/bin/sh\necho 'pyenv: command not found' >&2\nexit 127\n")
        fake.chmod(0o755)
    session = AsyncSession(tmp_path / "w", packages=["rich"], python_version=version)
    with pytest.raises(ConfigurationError, match=rf"no Python {version} found") as caught:
        await session.start()
    await session.close()
    assert "pass python=" in str(caught.value)
    if with_fake:
        assert "does not run" in str(caught.value)


@pytest.mark.parametrize(
    "packages",
    [
        ["--index-url=http://127.0.0.1:9/simple", "rich"],
        ["-e", "."],
        [" --extra-index-url http://127.0.0.1:9/"],
        ["rich\n--index-url http://127.0.0.1:9/"],
        ["rich \\"],
        [""],
        "rich",
        [42],
    ],
)
def test_packages_that_would_act_as_installer_options_are_refused(
    tmp_path: Path, packages: object
) -> None:
    with pytest.raises(ConfigurationError, match="packages="):
        AsyncSession(tmp_path, packages=packages)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="packages="):
        KernelPool(1, packages=packages)  # type: ignore[arg-type]


def test_conflicting_or_malformed_environment_arguments_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="not both"):
        AsyncSession(tmp_path, python=sys.executable, python_version=HERE)
    with pytest.raises(ConfigurationError, match="python_version"):
        AsyncSession(tmp_path, python_version="3.12; rm -rf /")
    with pytest.raises(ConfigurationError, match="venv="):
        AsyncSession(tmp_path, venv=42)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="DockerBackend"):
        AsyncSession(tmp_path, packages=["rich"], backend=DockerBackend())
    with pytest.raises(ConfigurationError, match="kernel_name"):
        AsyncSession(tmp_path, packages=["rich"], kernel_name="python3-other")


async def test_a_venv_path_that_is_not_a_venv_is_refused_and_left_alone(
    tmp_path: Path, with_uv: Path
) -> None:
    not_a_venv = tmp_path / "project"
    not_a_venv.mkdir()
    (not_a_venv / "notes.txt").write_text("mine")
    session = AsyncSession(tmp_path / "w", packages=["rich"], venv=not_a_venv)
    with pytest.raises(ConfigurationError, match="not a virtual environment"):
        await session.start()
    await session.close()
    assert (not_a_venv / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in not_a_venv.iterdir()) == ["notes.txt"]


@pytest.fixture(autouse=True)
def _no_stray_env_var(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # Tests that make nothing must not touch the user's real cache either.
    if "KERNELEXEC_VENV_DIR" not in os.environ:
        monkeypatch.setenv("KERNELEXEC_VENV_DIR", "/nonexistent/kernelexec-test-cache")
    yield
