"""Matplotlib figures in every backend: local, gateway and Docker sessions show them.

A figure from ``plt.show()`` and one left open at the end of a cell each come
back as one PNG saved in the work dir and listed in ``files``, as in a notebook.
Every test runs where ``MPLBACKEND=Agg`` is set around the kernel (this
process, the gateway's process, the Docker base image), as it is on many
headless machines: that must not stop the figures, but a session's own
``env={"MPLBACKEND": ...}`` must still win.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from PIL import Image
from servers import (
    TOKEN,
    Gateway,
    docker_base_image,
    docker_image,
    file_lock,
    tuned_gateway,  # noqa: F401  (a fixture, looked up by name)
)

from kernelexec import AsyncSession, DockerBackend, GatewayBackend, KernelBackend

SHOW = "import matplotlib.pyplot as plt\nplt.plot([1, 2]); plt.show()"
LEFT_OPEN = "import matplotlib.pyplot as plt\n_ = plt.plot([2, 1])"
WHICH_BACKEND = "import os\nprint(os.environ.get('MPLBACKEND'))"
INLINE = "module://matplotlib_inline.backend_inline"
# A Docker build of the matplotlib image the first time: far more than a test's 300 s.
FIRST_BUILD = pytest.mark.timeout(1800)

BackendFactory = Callable[[], KernelBackend | None]


@pytest.fixture(scope="session")
def plot_image() -> str:
    """``kernelexec image build --packages matplotlib`` on a base that sets MPLBACKEND=Agg."""
    base = docker_base_image()
    with file_lock("docker-headless-base"):
        proc = subprocess.run(
            ["docker", "build", "-q", "-"],
            input=f"FROM {base}\nENV MPLBACKEND=Agg\n",
            capture_output=True,
            text=True,
            timeout=600,
        )
        if proc.returncode != 0:
            pytest.fail(f"cannot build the headless base image:\n{proc.stderr[-3000:]}")
        # Tagged by its id: the kernel image's tag follows its base's name, so a
        # changed base must get a new name.
        image_id = proc.stdout.strip()
        headless = f"kernelexec-test-headless:{image_id.partition(':')[2][:16]}"
        subprocess.run(["docker", "tag", image_id, headless], check=True, timeout=60)
    return docker_image("matplotlib", base=headless)


@pytest.fixture(
    params=["local", "gateway", pytest.param("docker", marks=FIRST_BUILD)],
)
def backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> BackendFactory:
    """Makes a new backend of one kind per call, with MPLBACKEND=Agg in this process."""
    monkeypatch.setenv("MPLBACKEND", "Agg")
    if request.param == "gateway":
        gateway: Gateway = request.getfixturevalue("tuned_gateway")
        return lambda: GatewayBackend(gateway.url, token=TOKEN)
    if request.param == "docker":
        image: str = request.getfixturevalue("plot_image")
        return lambda: DockerBackend(image=image)
    return lambda: None  # AsyncSession's default: a local kernel


async def test_figures_shown_or_left_open_are_saved_and_listed(
    backend: BackendFactory, tmp_path: Path
) -> None:
    made = backend()
    # The figure comes back as data too where kernelexec booted the kernel (not a gateway's).
    booted = not isinstance(made, GatewayBackend)
    async with AsyncSession(tmp_path, backend=made, timeout=120) as s:
        which = await s.execute(WHICH_BACKEND)
        assert which.stdout == f"{INLINE}\n", which.text
        pngs = []
        for code in (SHOW, LEFT_OPEN):
            result = await s.execute(code)
            assert result.ok, result.text
            assert len(result.files) == 1, (code, result.text)
            png = result.files[0]
            assert result.text == f"[image/png saved to {png}]\n"
            shapes = [(o["output_type"], sorted(o.get("data", {}))) for o in result.outputs]
            chart = ["application/vnd.kernelexec.chart+json"] if booted else []
            assert shapes == [("display_data", [*chart, "image/png", "text/plain"])]
            assert [(d.type, d.image) for d in result.data] == ([("chart", png)] if booted else [])
            # On the host, in the session's work dir, a real picture.
            with Image.open(tmp_path / png) as image:
                assert image.format == "PNG" and min(image.size) > 100, image
            pngs.append(png)
    assert pngs[0] != pngs[1]


async def test_the_sessions_own_backend_wins(backend: BackendFactory, tmp_path: Path) -> None:
    # This process has MPLBACKEND=Agg too: the session's value must still be sent.
    async with AsyncSession(
        tmp_path, backend=backend(), env={"MPLBACKEND": "Agg"}, timeout=120
    ) as s:
        which = await s.execute(WHICH_BACKEND)
        assert which.stdout == "Agg\n", which.text
        result = await s.execute(SHOW)
        assert result.ok and result.files == [], result.text
    assert not list(tmp_path.glob("outputs/*"))


@pytest.mark.parametrize("ci", ["true", ""])
def test_without_a_docker_engine_ci_fails_where_a_developer_skips(ci: str, tmp_path: Path) -> None:
    docker_tests = [
        f"{__file__}::{test.__name__}[docker]"
        for test in (
            test_figures_shown_or_left_open_are_saved_and_listed,
            test_the_sessions_own_backend_wins,
        )
    ]
    # An engine that is not there: DOCKER_HOST names a socket nobody listens on.
    env = {**os.environ, "CI": ci, "DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"}
    # Its own basetemp: the inner pytest must not prune the outer run's temp dirs.
    options = ["-q", "-p", "no:cacheprovider", "--basetemp", str(tmp_path / "inner")]
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", *options, *docker_tests],
        capture_output=True,
        text=True,
        timeout=240,  # a hang guard: a loaded machine takes long to start pytest
        env=env,
        cwd=Path(__file__).parent.parent,
    )
    assert "the Docker engine is not reachable" in proc.stdout, proc.stdout[-3000:]
    if ci:
        assert proc.returncode != 0 and "CI=true: backend tests must run" in proc.stdout
    else:
        assert proc.returncode == 0 and "2 skipped" in proc.stdout, proc.stdout[-3000:]
