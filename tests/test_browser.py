"""A person debugging an agent in a real JupyterLab, in a real (headless) Chromium.

Marked ``browser``; CI installs Debian's chromium, and Playwright drives that
binary (it never downloads a browser of its own).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import nbformat
import pytest
from _serverproc import ServerProcess, free_port
from conftest import IN_CI

pytestmark = pytest.mark.browser

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = Path(__file__).parent.parent / "test-artifacts"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _need_browser() -> None:
    missing = [
        what
        for what, ok in (
            ("Debian's chromium at /usr/bin/chromium", os.path.exists(CHROMIUM)),
            ("jupyterlab", shutil.which("jupyter-lab") is not None),
        )
        if not ok
    ]
    try:
        import playwright  # noqa: F401
    except ImportError:
        missing.append("playwright")
    if missing:
        message = f"missing {', '.join(missing)} (.ci/run installs them)"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    _need_browser()
    server = ServerProcess(tmp_path_factory.mktemp("browser") / "root")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def lab(agent: ServerProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("lab")
    port, token = free_port(), "lab-token-0123"
    log = (root.parent / "jupyterlab.log").open("w")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyterlab",
            "--no-browser",
            f"--port={port}",
            "--ip=127.0.0.1",
            f"--IdentityProvider.token={token}",
            f"--ServerApp.root_dir={root}",
            "--allow-root",
            f"--GatewayClient.url={agent.url}",
            f"--GatewayClient.auth_token={agent.token}",
            "--LabApp.news_url=",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=root,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/api/status?token={token}", trust_env=False).status_code == 200:
                break
        except httpx.TransportError:
            time.sleep(0.3)
    else:
        proc.kill()
        raise RuntimeError("JupyterLab did not start")
    yield f"{url}|{token}|{root}"
    proc.terminate()
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        # Its gateway client keeps asking to shut the agent's kernels down (refused: 403).
        proc.kill()
        proc.wait(15)


def test_a_person_sees_the_agents_variable_and_its_plot(agent: ServerProcess, lab: str) -> None:
    from playwright.sync_api import expect, sync_playwright

    url, token, root = lab.split("|")
    session_id = agent.create()
    agent.execute(session_id, "x = 'set by the agent: 4242'")
    agent.execute(session_id, "import matplotlib.pyplot as plt\nplt.plot([3, 1, 2]); plt.show()")
    # A notebook holding the person's cell, opened on the agent's kernel.
    # With a kernelspec in its metadata JupyterLab never asks which kernel to start.
    spec = {"name": "python3", "display_name": "Python 3 (kernelexec)", "language": "python"}
    nbformat.write(
        nbformat.v4.new_notebook(
            cells=[nbformat.v4.new_code_cell("print(x)")], metadata={"kernelspec": spec}
        ),
        Path(root) / "debug.ipynb",
    )
    # `kernelexec attach --lab` gives JupyterLab a notebook session on the agent's kernel ...
    opened = subprocess.run(
        [
            sys.executable,
            "-m",
            "kernelexec",
            "attach",
            session_id,
            "--url",
            agent.url,
            "--token",
            agent.token,
            "--lab",
            url,
            "--lab-token",
            token,
            "--notebook",
            "debug.ipynb",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert opened.returncode == 0, opened.stderr
    assert opened.stdout.strip() == f"{url}/lab/tree/debug.ipynb?token={token}"
    # ... after which JupyterLab lists the kernel, refreshed through the gateway route.
    listed = httpx.get(f"{url}/api/kernels?token={token}", trust_env=False, timeout=60).json()
    assert str(uuid.UUID(hex=session_id)) in [k["id"] for k in listed]
    transcript = agent.http.get(f"/sessions/{session_id}/notebook").text
    (Path(root) / "transcript.ipynb").write_text(transcript)

    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(opened.stdout.strip(), timeout=120_000)
        cell = page.locator(".jp-Notebook .jp-Cell").first
        expect(cell).to_be_visible(timeout=120_000)
        # connected to the agent's kernel, which is idle
        expect(page.locator("#jp-main-statusbar").get_by_text("Idle")).to_be_visible(
            timeout=120_000
        )
        cell.click()
        page.keyboard.press("Shift+Enter")
        output = page.locator(".jp-OutputArea-output").filter(has_text="set by the agent: 4242")
        try:
            expect(output).to_be_visible(timeout=60_000)
        finally:
            page.screenshot(path=str(ARTIFACTS / "attached-notebook.png"))
        page.screenshot(path=str(ARTIFACTS / "attached-notebook.png"))

        page.goto(f"{url}/lab/tree/transcript.ipynb?token={token}", timeout=120_000)
        image = page.locator(".jp-RenderedImage img").first
        expect(image).to_be_visible(timeout=60_000)
        assert image.evaluate("img => img.naturalWidth") > 100
        page.screenshot(path=str(ARTIFACTS / "transcript-plot.png"))
        browser.close()
