"""A person debugging an agent in a real JupyterLab, in a real (headless) Chromium.

Marked ``browser``; CI installs Debian's chromium, and Playwright drives that
binary (it never downloads a browser of its own). JupyterLab uses the server
as its gateway, with the server's work root as its root dir, so every
session's folder and transcript is in its file browser.

``KERNELEXEC_UPDATE_SCREENSHOT=1`` makes the transcript test write the
README's picture, ``docs/jupyterlab-transcript.png``; without it the picture
goes to the test's tmp dir and is only checked.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _labproc import LabProcess
from _serverproc import ServerProcess
from conftest import IN_CI

pytestmark = pytest.mark.browser

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = Path(__file__).parent.parent / "test-artifacts"
SCREENSHOT = Path(__file__).parent.parent / "docs" / "jupyterlab-transcript.png"
VIEWPORT = {"width": 1200, "height": 800}
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# What an agent sends: a table, then a chart of it (the README's picture).
AGENT_BLOCKS = [
    'import pandas as pd\n\nsales = pd.DataFrame({\n    "month": ["Jan", "Feb", "Mar", "Apr", '
    '"May", "Jun"],\n    "revenue": [120, 135, 128, 160, 172, 190],\n})\n'
    'growth = sales.revenue.iloc[-1] / sales.revenue.iloc[0] - 1\nprint(f"growth: {growth:.0%}")',
    "import matplotlib.pyplot as plt\n\nfig, ax = plt.subplots(figsize=(8, 3.4))\n"
    'ax.bar(sales.month, sales.revenue, color="#4c72b0")\n'
    'ax.set(title="Revenue by month", ylabel="revenue (k$)")\nplt.show()',
]


def _need_browser() -> None:
    missing = [
        what
        for what, ok in (
            ("Debian's chromium at /usr/bin/chromium", os.path.exists(CHROMIUM)),
            ("jupyterlab", importlib.util.find_spec("jupyterlab") is not None),
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
def lab(agent: ServerProcess) -> Iterator[LabProcess]:
    proc = LabProcess(agent.work_root, agent)
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def browser(agent: ServerProcess) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


def test_attach_lab_opens_the_agents_kernel(
    agent: ServerProcess, lab: LabProcess, browser: Any
) -> None:
    from playwright.sync_api import expect

    session_id = agent.create()
    agent.execute(session_id, "x = 'set by the agent: 4242'")
    # What a person types; the notebook is JupyterLab's, made by attach.
    opened = subprocess.run(
        lab.attach_args(agent, session_id), capture_output=True, text=True, timeout=120
    )
    assert opened.returncode == 0, opened.stderr

    ARTIFACTS.mkdir(exist_ok=True)
    page = browser.new_page(viewport=VIEWPORT)
    try:
        page.goto(opened.stdout.strip(), timeout=120_000)
        cell = page.locator(".jp-Notebook .jp-CodeCell").first
        expect(cell).to_be_visible(timeout=120_000)
        # connected to the agent's kernel, which is idle
        expect(page.locator("#jp-main-statusbar").get_by_text("Idle")).to_be_visible(
            timeout=120_000
        )
        cell.locator(".jp-InputArea-editor").click()
        page.keyboard.type("print(x)\nfrom_the_browser = 'set in the browser: 77'")
        page.keyboard.press("Shift+Enter")
        output = page.locator(".jp-OutputArea-output").filter(has_text="set by the agent: 4242")
        expect(output).to_be_visible(timeout=60_000)
    finally:
        page.screenshot(path=str(ARTIFACTS / "attached-notebook.png"))
        page.close()
    # One kernel: the agent sees what the person defined.
    assert agent.execute(session_id, "print(from_the_browser)")["stdout"] == (
        "set in the browser: 77\n"
    )


def test_a_transcript_with_a_chart_opens_in_jupyterlab(
    agent: ServerProcess, lab: LabProcess, browser: Any, tmp_path: Path
) -> None:
    from PIL import Image
    from playwright.sync_api import expect

    session_id = agent.create()
    for code in AGENT_BLOCKS:
        assert agent.execute(session_id, code)["status"] == "ok"
    page = browser.new_page(viewport=VIEWPORT)
    try:
        # ?reset: a workspace of its own, with no tab but the transcript's
        page.goto(f"{lab.url}/lab/tree/{session_id}/transcript.ipynb?reset&token={lab.token}")
        image = page.locator(".jp-RenderedImage img").first
        expect(image).to_be_visible(timeout=120_000)
        expect(page.locator("#jp-main-statusbar").get_by_text("Idle")).to_be_visible(
            timeout=120_000
        )
        assert image.evaluate("img => img.complete && img.naturalWidth") > 300
        # The notebook alone: the file browser folded away.
        page.keyboard.press("Control+b")
        expect(page.locator("#filebrowser")).to_be_hidden(timeout=30_000)
        box = image.bounding_box()
        assert box is not None and box["y"] + box["height"] <= VIEWPORT["height"], box
        update = os.environ.get("KERNELEXEC_UPDATE_SCREENSHOT") == "1"
        shot = tmp_path / "jupyterlab-transcript.png"
        page.screenshot(path=str(shot))
    finally:
        page.close()
    picture = Image.open(shot)
    assert picture.format == "PNG" and picture.size == (VIEWPORT["width"], VIEWPORT["height"])
    # The page, not a blank one: the chart's bars are in it.
    chart = picture.convert("RGB").crop(
        (int(box["x"]), int(box["y"]), int(box["x"] + box["width"]), int(box["y"] + box["height"]))
    )
    counted = chart.getcolors(chart.width * chart.height) or []
    colours = {colour: count for count, colour in counted}
    bars = colours.get((0x4C, 0x72, 0xB0), 0)
    assert bars > 1000, bars
    if update:
        # A palette of 256 colours keeps the flat interface exact and the file small.
        picture.convert("RGB").quantize(256, dither=Image.Dither.NONE).save(
            SCREENSHOT, optimize=True
        )
