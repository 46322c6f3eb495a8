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
import json
import os
import subprocess
import time
import uuid
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
LIVE_SCREENSHOTS = {
    "watched": Path(__file__).parent.parent / "docs" / "jupyterlab-live.png",
    "person": Path(__file__).parent.parent / "docs" / "jupyterlab-debugger.png",
}
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
            (
                "jupyter-collaboration (the lab extra's)",
                importlib.util.find_spec("jupyter_collaboration") is not None,
            ),
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


# A transcript JupyterLab opens gets its session's kernel, not a new session.
TRANSCRIPT_SESSIONS = (
    "--ServerApp.session_manager_class=kernelexec.integrations.jupyterlab.TranscriptSessions",
)


@pytest.fixture(scope="module")
def lab(agent: ServerProcess) -> Iterator[LabProcess]:
    proc = LabProcess(agent.work_root, agent, TRANSCRIPT_SESSIONS)
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


# What an agent runs while a person watches its transcript: five cells, one a chart.
LIVE_CELLS = [
    "rows = [3, 1, 2]\nprint('cell 1:', rows)",
    "rows.sort()\nprint('cell 2:', rows)",
    "import matplotlib.pyplot as plt\n\nplt.figure(figsize=(6, 2.5))\nplt.plot(rows)\n"
    "plt.title('cell 3')\nplt.show()",
    "total = sum(rows)\nprint('cell 4:', total)",
    "print('cell 5:', total * 2)",
]
PERSON_CELL = "print('the person sees', total)\nchecked = True"
PERSON_NOTE = "# a note the person typed in the transcript's tab"


def _output(page: Any, text: str) -> Any:
    return page.locator(".jp-OutputArea-output").filter(has_text=text)


def test_the_transcript_is_live_in_jupyterlab_with_the_persons_cells_marked(
    agent: ServerProcess, lab: LabProcess, browser: Any, tmp_path: Path
) -> None:
    """An agent runs cells while a person watches its transcript (and another agent's) and
    runs a cell of their own on its kernel: each cell appears in the open transcript without
    a reload, the person's in the order the kernel ran it, marked as theirs."""
    import nbformat
    from playwright.sync_api import expect

    watched, other = agent.create(), agent.create()
    agent.execute(watched, "print('the agent starts')")
    agent.execute(other, "print('another agent')")
    sessions_before = {s["id"] for s in agent.http.get("/sessions").json()["sessions"]}
    opened = subprocess.run(
        [*lab.attach_args(agent, watched), "--notebook", "person.ipynb"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert opened.returncode == 0, opened.stderr
    pages = {name: browser.new_page(viewport=VIEWPORT) for name in ("watched", "other", "person")}
    latencies: list[float] = []
    try:
        for name, session in (("watched", watched), ("other", other)):
            page = pages[name]
            # A workspace per page: JupyterLab's pages on one workspace share their tabs.
            where = f"workspaces/{name}/tree/{session}/transcript.ipynb"
            page.goto(f"{lab.url}/lab/{where}?reset&token={lab.token}")
            first = "the agent starts" if name == "watched" else "another agent"
            expect(_output(page, first)).to_be_visible(timeout=120_000)
            page.evaluate("window.kernelexecNotReloaded = true")
        person = pages["person"]
        url = opened.stdout.strip()
        assert url.startswith(f"{lab.url}/lab/tree/person.ipynb"), url
        person.goto(url.replace("/lab/tree/", "/lab/workspaces/person/tree/"), timeout=120_000)
        cell = person.locator(".jp-Notebook .jp-CodeCell").first
        expect(cell).to_be_visible(timeout=120_000)
        expect(person.locator("#jp-main-statusbar").get_by_text("Idle")).to_be_visible(
            timeout=120_000
        )
        page = pages["watched"]
        for number, code in enumerate(LIVE_CELLS, start=1):
            assert agent.execute(watched, code)["status"] == "ok"
            # The result comes once its cell is in the file: from here to the page.
            began = time.monotonic()
            if number == 3:
                expect(page.locator(".jp-RenderedImage img").first).to_be_visible(timeout=60_000)
            else:
                expect(_output(page, f"cell {number}:")).to_be_visible(timeout=60_000)
            latencies.append(round(time.monotonic() - began, 2))
            if number == 4:  # the person runs a cell on the agent's kernel meanwhile
                cell.locator(".jp-InputArea-editor").click()
                person.keyboard.type(PERSON_CELL)
                person.keyboard.press("Shift+Enter")
                expect(_output(person, "the person sees 6")).to_be_visible(timeout=60_000)
                began = time.monotonic()
                expect(_output(page, "the person sees 6")).to_be_visible(timeout=60_000)
                latencies.append(round(time.monotonic() - began, 2))
                # Marked as the person's, for a reader of the transcript.
                mark = page.locator(".jp-MarkdownOutput").filter(has_text="by 'default', attached")
                expect(mark).to_be_visible(timeout=30_000)
                # JupyterLab's debugger on the agent's kernel: its variables panel lists
                # the agent's variables.
                person.locator(".jp-DebuggerBugButton").click()
                sidebar = person.locator("#jp-debugger-sidebar")
                if not sidebar.is_visible():
                    person.locator('.jp-SideBar [data-id="jp-debugger-sidebar"]').click()
                variables = sidebar.locator(".jp-DebuggerVariables")
                expect(variables.get_by_text("total", exact=True)).to_be_visible(timeout=60_000)
                expect(variables.get_by_text("rows", exact=True)).to_be_visible()
        # The person types in the transcript's own tab: JupyterLab saves it, and the agent's
        # next cell is written after it, the person's edit kept (a file someone else saved
        # is read back, not overwritten).
        transcript = agent.work_root / watched / "transcript.ipynb"
        page.locator(".jp-Cell").last.locator(".jp-InputPrompt").click()
        page.keyboard.press("Escape")
        page.keyboard.press("b")
        page.keyboard.press("Enter")
        page.keyboard.type(PERSON_NOTE)
        page.keyboard.press("Escape")
        deadline = time.monotonic() + 60
        while PERSON_NOTE not in transcript.read_text() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert agent.execute(watched, "print('cell 6:', checked)")["status"] == "ok"
        expect(_output(page, "cell 6: True")).to_be_visible(timeout=60_000)
        expect(page.locator(".jp-Cell").filter(has_text=PERSON_NOTE)).to_have_count(1)
        # Watching cost no session: each transcript's tab is on its own agent's kernel.
        sessions_now = {s["id"] for s in agent.http.get("/sessions").json()["sessions"]}
        assert sessions_now == sessions_before, sessions_now - sessions_before
        tabs = {t["path"].split("/")[0]: t["kernel"]["id"] for t in lab.sessions()}
        assert {tabs[watched], tabs[other]} == {str(uuid.UUID(hex=i)) for i in (watched, other)}
        # No reload: the page is the one the cells came into.
        assert page.evaluate("window.kernelexecNotReloaded") is True
        assert pages["other"].evaluate("window.kernelexecNotReloaded") is True
        # One JupyterLab, two agents: each transcript shows its own agent's cells alone.
        expect(_output(pages["other"], "another agent")).to_be_visible()
        assert _output(pages["other"], "cell 1:").count() == 0
        assert _output(page, "another agent").count() == 0
        image = page.locator(".jp-RenderedImage img").first
        assert image.evaluate("img => img.complete && img.naturalWidth") > 300
        page.keyboard.press("Control+b")  # the notebook alone: the file browser folded
        expect(page.locator("#filebrowser")).to_be_hidden(timeout=30_000)
        page.locator(".jp-Cell").last.scroll_into_view_if_needed()
        for name, picture in LIVE_SCREENSHOTS.items():
            shot = tmp_path / picture.name
            pages[name].screenshot(path=str(shot))
            if os.environ.get("KERNELEXEC_UPDATE_SCREENSHOT") == "1":
                from PIL import Image

                Image.open(shot).convert("RGB").quantize(256, dither=Image.Dither.NONE).save(
                    picture, optimize=True
                )
    finally:
        ARTIFACTS.mkdir(exist_ok=True)
        for name, page in pages.items():
            page.screenshot(path=str(ARTIFACTS / f"live-{name}.png"))
            page.close()
    (ARTIFACTS / "live-transcript.json").write_text(json.dumps({"seconds": latencies}))
    print("seconds from a result to its cell in the open transcript:", latencies)
    # The file stays the agent's record: valid, every agent cell in order, the person's
    # where the kernel ran it, marked as theirs; the agent's results never took its output.
    notebook = nbformat.read(agent.work_root / watched / "transcript.ipynb", as_version=4)
    nbformat.validate(notebook)
    code = [c for c in notebook.cells if c.cell_type == "code"]
    expected = ["print('the agent starts')", *LIVE_CELLS[:4], PERSON_CELL, LIVE_CELLS[4]]
    assert [c.source for c in code] == [*expected, PERSON_NOTE, "print('cell 6:', checked)"]
    marks = [c.metadata.get("kernelexec", {}).get("by") for c in code]
    assert marks == [None] * 5 + ["attached", None, None, None]
    assert code[-2].outputs == [] and "kernelexec" not in code[-2].metadata  # typed, not run
    assert code[5].metadata["kernelexec"]["who"] == "default"
    assert agent.execute(watched, "print(checked)")["stdout"] == "True\n"
