"""The transcript: a valid notebook, one cell per execution, that nbclient replays."""

from __future__ import annotations

import asyncio
import json
import stat
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from kernelexec import AsyncSession, Session


async def test_transcript_validates_and_replays_with_the_same_stdout(tmp_path: Path) -> None:
    async with AsyncSession(tmp_path / "w") as s:
        results = [
            await s.execute("x = 20\nprint('x is', x)"),
            await s.execute("import matplotlib.pyplot as plt\nplt.plot([1, 2]); plt.show()"),
            await s.execute("print('before'); 1/0"),
            await s.execute("echo from bash", language="bash"),
            await s.execute("print(x * 2)"),
            await s.execute("nope", language="ruby"),
        ]
        path = s.notebook_path
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert len(code) == 5
    assert [c.source for c in code][3] == "%%bash\necho from bash"
    assert code[1].outputs[0]["output_type"] == "display_data"
    assert "image/png" in code[1].outputs[0]["data"]  # inline, as any notebook
    assert code[2].metadata["tags"] == ["raises-exception"]
    assert code[2].metadata["kernelexec"]["status"] == "error"
    assert "iopub.execute_input" in code[0].metadata["execution"]
    assert [c.execution_count for c in code] == [r.execution_count for r in results[:5]]
    assert nb.cells[-1].cell_type == "raw"  # the refused ruby block, kept out of replay

    NotebookClient(
        nb, timeout=60, kernel_name="python3", resources={"metadata": {"path": str(tmp_path / "w")}}
    ).execute()
    replayed = [c for c in nb.cells if c.cell_type == "code"]
    for cell, result in zip(replayed, results[:5], strict=True):
        stdout = "".join(o.get("text", "") for o in cell.outputs if o.get("name") == "stdout")
        assert stdout == result.stdout


async def test_transcript_is_rewritten_after_every_execution(tmp_path: Path) -> None:
    async with AsyncSession(tmp_path) as s:
        for i in range(3):
            await s.execute(f"print({i})")
            await s.flush()
            nb = nbformat.read(s.notebook_path, as_version=4)
            nbformat.validate(nb)
            assert len(nb.cells) == i + 1
        assert not list(tmp_path.glob(".*.tmp"))


async def test_a_new_session_continues_an_existing_transcript(tmp_path: Path) -> None:
    async with AsyncSession(tmp_path) as s:
        first = await s.execute(
            "from IPython.display import SVG; SVG('<svg xmlns=\"http://www.w3.org/2000/svg\"/>')"
        )
    async with AsyncSession(tmp_path) as s:
        second = await s.execute(
            "from IPython.display import SVG; SVG('<svg xmlns=\"http://www.w3.org/2000/svg\"/>')"
        )
    nb = nbformat.read(tmp_path / "transcript.ipynb", as_version=4)
    assert [c.cell_type for c in nb.cells] == ["code", "markdown", "code"]  # a note between
    assert first.files != second.files  # numbering continues, nothing overwritten


async def test_each_new_session_in_a_work_dir_is_announced_in_the_transcript(
    tmp_path: Path,
) -> None:
    # Three runs of the same script into one work dir: In [1], [2], [1], [2], [1], [2].
    for _ in range(3):
        async with AsyncSession(tmp_path) as s:
            await s.execute("x = 1")
            await s.execute("x + 1")
    async with AsyncSession(tmp_path):
        pass  # a session that runs nothing leaves no note
    nb = nbformat.read(tmp_path / "transcript.ipynb", as_version=4)
    nbformat.validate(nb)
    shown = [c.execution_count if c.cell_type == "code" else c.source for c in nb.cells]
    assert shown[:2] == [1, 2] and shown[3:5] == [1, 2] and shown[6:] == [1, 2]
    for note, number in ((shown[2], 2), (shown[5], 3)):
        assert isinstance(note, str)
        assert note.startswith(f"*kernelexec: session {number} started 20")
        assert "with a new kernel: execution counts start again at 1" in note
    assert nb.cells[5].metadata["kernelexec"]["session"] == 3


async def test_session_numbers_planted_in_the_transcript_are_checked(tmp_path: Path) -> None:
    # The kernel can write its work dir's transcript: only a plausible number counts.
    nb = nbformat.v4.new_notebook()
    for number in (7, 10**30, "99", True, None):
        cell = nbformat.v4.new_markdown_cell("planted")
        cell.metadata["kernelexec"] = {"session": number}
        nb.cells.append(cell)
    nb.cells.append(nbformat.v4.new_markdown_cell("no metadata of ours"))
    nb.cells[-1].metadata = {"kernelexec": "not a dict"}
    (tmp_path / "transcript.ipynb").write_text(json.dumps(nb))
    async with AsyncSession(tmp_path) as s:
        await s.execute("1")
    cells = nbformat.read(tmp_path / "transcript.ipynb", as_version=4).cells
    assert cells[-2].source.startswith("*kernelexec: session 8 started")


async def test_a_broken_transcript_is_moved_aside_not_overwritten(tmp_path: Path) -> None:
    (tmp_path / "transcript.ipynb").write_text("{ not json")
    async with AsyncSession(tmp_path) as s:
        await s.execute("1")
    assert [p.read_text() for p in tmp_path.glob("transcript.ipynb.broken-*")] == ["{ not json"]
    nbformat.validate(nbformat.read(tmp_path / "transcript.ipynb", as_version=4))


async def test_each_write_extends_the_file_with_the_new_cells(tmp_path: Path) -> None:
    async with AsyncSession(tmp_path) as s:
        for i in range(5):
            await s.execute(f"print({i})")
            await s.flush()
            nb = nbformat.read(s.notebook_path, as_version=4)
            nbformat.validate(nb)
            assert [c.outputs[0]["text"] for c in nb.cells] == [f"{n}\n" for n in range(i + 1)]


async def test_an_edit_made_by_someone_else_is_kept(tmp_path: Path) -> None:
    async with AsyncSession(tmp_path) as s:
        await s.execute("print('one')")
        await s.flush()
        # A person adds a note in JupyterLab and saves (a new file, as Jupyter writes them).
        nb = nbformat.read(s.notebook_path, as_version=4)
        nb.cells.append(nbformat.v4.new_markdown_cell("a note from a person"))
        nbformat.write(nb, s.notebook_path)
        await s.execute("print('two')")
        await s.flush()
    nb = nbformat.read(tmp_path / "transcript.ipynb", as_version=4)
    nbformat.validate(nb)
    assert [c.cell_type for c in nb.cells] == ["code", "markdown", "code"]
    assert nb.cells[1].source == "a note from a person"
    assert nb.cells[2].outputs[0]["text"] == "two\n"


async def test_a_transcript_broken_during_a_session_is_moved_aside(tmp_path: Path) -> None:
    async with AsyncSession(tmp_path) as s:
        await s.execute("print('one')")
        await s.flush()
        with s.notebook_path.open("r+", encoding="utf-8") as f:
            f.truncate(10)  # torn in place by another program
        await s.execute("print('two')")
        await s.flush()
    [aside] = tmp_path.glob("transcript.ipynb.broken-*")
    assert len(aside.read_text()) == 10
    nb = nbformat.read(tmp_path / "transcript.ipynb", as_version=4)
    nbformat.validate(nb)
    assert [c.outputs[0]["text"] for c in nb.cells] == ["two\n"]


async def test_a_giant_transcript_planted_by_the_kernel_is_never_read_into_memory(
    tmp_path: Path,
) -> None:
    from conftest import rss_mb

    from kernelexec._session._transcript import MAX_TRANSCRIPT_BYTES

    async with AsyncSession(tmp_path / "work") as s:
        await s.execute("print('one')")
        await s.flush()
        # The kernel replaces its transcript with a sparse file past the bound.
        planted = await s.execute(
            f"import os; os.truncate('transcript.ipynb', {MAX_TRANSCRIPT_BYTES * 4})"
        )
        assert planted.status == "ok"
        before = rss_mb()
        await s.execute("print('two')")
        await s.flush()
        assert rss_mb() - before < 200
    [aside] = (tmp_path / "work").glob("transcript.ipynb.broken-*")
    assert aside.stat().st_size == MAX_TRANSCRIPT_BYTES * 4
    nb = nbformat.read(tmp_path / "work" / "transcript.ipynb", as_version=4)
    assert [c.source for c in nb.cells][-1] == "print('two')"
    assert nb.cells[-1].outputs[0]["text"] == "two\n"


async def test_a_fork_of_a_kernel_that_made_its_transcript_a_pipe_does_not_hang(
    tmp_path: Path,
) -> None:
    async with AsyncSession(tmp_path / "parent") as parent:
        await parent.execute("x = 1")
        # Planted after the session's last write, by a thread of the kernel's.
        plant = (
            "import os, threading, time\n"
            "def plant():\n"
            "    time.sleep(1)\n"
            "    os.remove('transcript.ipynb'); os.mkfifo('transcript.ipynb')\n"
            "threading.Thread(target=plant).start()\n"
        )
        await parent.execute(plant)
        await parent.flush()
        await asyncio.sleep(3)
        assert stat.S_ISFIFO((tmp_path / "parent" / "transcript.ipynb").lstat().st_mode)
        async with await parent.fork(tmp_path / "child") as child:
            assert (await child.execute("print(x)")).stdout == "1\n"


def test_the_docs_open_a_transcript_in_jupyterlab_as_they_say(tmp_path: Path) -> None:
    """The JupyterLab guide's command for reading a transcript: JupyterLab, started as it
    says from where `kernelexec run ... --work-dir demo` ran, serves the transcript whole."""
    from _labproc import LabProcess
    from test_readme import BLOCKS, ROOT, pip_installs

    guide = BLOCKS[ROOT / "docs" / "guides" / "jupyterlab.md"]
    (block,) = [b for b in guide if b.section == "Open a transcript" and "jupyter lab" in b.code]
    assert "jupyterlab" in [r for line in block.code.splitlines() for r in pip_installs(line)]
    lines = block.code.splitlines()
    (command,) = [line.split("#")[0].split() for line in lines if line.startswith("jupyter lab ")]
    assert command[:2] == ["jupyter", "lab"], command
    with Session(tmp_path / "demo") as session:  # the guide's --work-dir demo
        session.execute("import pandas as pd\npd.DataFrame({'city': ['Oslo'], 'temp': [4.5]})")
        session.execute("print('total: 77')")
    lab = LabProcess(tmp_path, None, tuple(command[2:]))
    try:
        served = lab.http.get(f"/api/contents/{command[2]}", params={"content": "1"})
        assert served.status_code == 200, served.text
        model = served.json()
        assert model["type"] == "notebook" and model["path"] == "demo/transcript.ipynb"
        on_disk = nbformat.read(tmp_path / "demo" / "transcript.ipynb", as_version=4)
        assert [c["source"] for c in model["content"]["cells"]] == [
            c["source"] for c in on_disk.cells
        ]
        assert "text/html" in model["content"]["cells"][0]["outputs"][0]["data"]  # the table
        assert lab.http.get(f"/lab/tree/{command[2]}").status_code == 200  # the page it opens
    finally:
        lab.stop()


async def test_a_kernel_that_removes_or_links_away_its_work_dir_gets_no_byte_outside(
    tmp_path: Path,
) -> None:
    # The transcript's folder is asked for only when it is missing: removed,
    # it is made again; a link put in its place (dangling, so a mkdir through
    # it would make the folder it names) is refused, and nothing is written there.
    work, outside = tmp_path / "work", tmp_path / "outside"
    async with AsyncSession(work, sandbox=False) as s:
        removed = await s.execute(f"import shutil; shutil.rmtree({str(work)!r}); 'gone'")
        assert removed.ok, removed.text
        await s.flush()
        nb = nbformat.read(work / "transcript.ipynb", as_version=4)
        assert [c.source for c in nb.cells if c.cell_type == "code"][-1].endswith("'gone'")
        linked = await s.execute(
            f"import os, shutil; shutil.rmtree({str(work)!r}); "
            f"os.symlink({str(outside)!r}, {str(work)!r}); 'linked'"
        )
        assert linked.ok and "linked" in linked.text, linked.text
        await s.flush()
        assert s._transcript.write_error is not None
        assert not outside.exists()
        after = await s.execute("1 + 1")
        assert after.text.strip() == "2" and not outside.exists()
