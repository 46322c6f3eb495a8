"""The documentation site (mkdocs.yml, docs/) builds, and the README is its front door.

``test_the_site_builds_strict`` runs ``mkdocs build --strict``, as .ci/run does
and as a writer does before pushing: a page missing from the nav, a link to a
page or file that is not there, a docstring mkdocstrings cannot read, or a
snippet that is not there fails it, and so does a link to a heading that is
not there (the test looks for that too). The site's code blocks run in
tests/test_readme.py, as the README's do.

Without mkdocs (the ``docs`` extra, also in ``test``) the build is skipped,
saying so; with CI=true that is a failure.
"""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from servers import unavailable

import kernelexec

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
README = ROOT / "README.md"
# The two lines tests/test_readme.py and .ci/run depend on, exactly.
COMMANDS = (
    "python -m pip install -e '.[examples]' && kernelexec run notebooks/agent-message.md "
    "--work-dir demo",
    "python -m pip install -e '.[test]' && python -m pytest -n 4",
)
INTEGRATIONS = (
    "autogen",
    "ag2_code",
    "ag2",
    "ag2_tools",
    "ag2_beta",
    "agent_framework",
    "jupyterlab",
)
_LINK = re.compile(r"\]\(([^)\s]+)\)")


def _reference() -> str:
    return "\n".join(p.read_text() for p in sorted((DOCS / "reference").glob("*.md")))


def test_the_readme_is_a_front_door() -> None:
    text = README.read_text()
    lines = text.splitlines()
    assert len(lines) < 250, f"README.md has {len(lines)} lines: move the detail to docs/"
    for command in COMMANDS:
        assert command in lines, f"the Quick start's command changed: {command}"
    assert "![" in text and "docs/jupyterlab-transcript.png" in text
    assert "pip install -e '.[docs]'" in text and "mkdocs" in text


@pytest.mark.parametrize(
    "page",
    [README, *sorted(DOCS.rglob("*.md"))],
    ids=lambda p: p.relative_to(ROOT).as_posix(),
)
def test_relative_links_lead_to_files(page: Path) -> None:
    # mkdocs checks the site's links; this checks the README's too, as GitHub shows it.
    missing = []
    for target in _LINK.findall(page.read_text()):
        path = target.split("#")[0]
        if not path or re.match(r"[a-z]+:", path):
            continue
        if not (page.parent / path).exists():
            missing.append(target)
    assert missing == []


def test_the_pages_name_no_private_module() -> None:
    # The package's private layout changes; the pages describe behaviour, the design
    # notes (design.md, and design-*.md for what is proposed) name modules.
    private = re.compile(r"kernelexec[/.]_\w|\b_[a-z]\w*\.py\b")
    found = [
        f"{page.relative_to(ROOT)}: {m[0]}"
        for page in [README, *DOCS.rglob("*.md")]
        if not page.name.startswith("design")
        for m in private.finditer(page.read_text())
    ]
    assert found == []


def test_the_reference_has_every_public_name() -> None:
    documented = set(re.findall(r"^::: (\S+)$", _reference(), re.M))
    public = {f"kernelexec.{name}" for name in kernelexec.__all__ if name != "__version__"}
    public |= {f"kernelexec.integrations.{module}" for module in INTEGRATIONS}
    public |= {"kernelexec.integrations.Approval"}
    assert public - documented == set(), "add them to a page of docs/reference/"
    assert documented - public == set(), "the reference documents public names only"


@pytest.mark.timeout(600)
def test_the_site_builds_strict(tmp_path: Path) -> None:
    try:
        import material  # noqa: F401
        import mkdocs  # noqa: F401
        import mkdocstrings  # noqa: F401
    except ModuleNotFoundError as exc:
        unavailable(f"{exc.name} is not installed: python -m pip install -e '.[docs]'")
    site = tmp_path / "site"
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=540,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    log = built.stdout + built.stderr
    assert built.returncode == 0, log
    anchors = [line for line in log.splitlines() if "but there is no such anchor" in line]
    assert anchors == [], "\n".join(anchors)

    # The API reference is generated from the docstrings: every public name has its
    # heading, and AsyncSession.execute its own, with its docstring's Args.
    reference = "\n".join(p.read_text() for p in (site / "reference").rglob("index.html"))
    ids = set(re.findall(r'id="(kernelexec[\w.]*)"', reference))
    public = {f"kernelexec.{name}" for name in kernelexec.__all__ if name != "__version__"}
    assert public - ids == set()
    # ... and so has every public member of those classes, with a docstring or not
    # (Session.interrupt, restart and close once had none, and no entry).
    members = {
        f"kernelexec.{name}.{member}"
        for name in kernelexec.__all__
        if isinstance(getattr(kernelexec, name), type)
        for member in vars(getattr(kernelexec, name))
        if not member.startswith("_")
    }
    assert "kernelexec.Session.interrupt" in members
    assert members - ids == set()
    assert "kernelexec.AsyncSession.execute" in ids
    assert "kernelexec.integrations.autogen.KernelexecCodeExecutor" in ids
    # The benchmark page is bench/RESULTS.md as `python -m bench` last wrote it.
    results = (ROOT / "bench" / "RESULTS.md").read_text().splitlines()
    first_row = next(line for line in results if line.startswith("| session ready"))
    first_cell = first_row.split("|")[1].strip()
    assert first_cell in html.unescape((site / "benchmarks" / "index.html").read_text())
    # The design notes are there as they are.
    assert (site / "design" / "index.html").is_file()
