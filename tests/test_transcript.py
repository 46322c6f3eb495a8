"""The transcript: a valid notebook, one cell per execution, that nbclient replays."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import stat
import threading
from pathlib import Path

import nbformat
import pytest
from conftest import until
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


async def test_only_small_appends_are_written_on_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A write on the loop's own thread holds every session's loop for as long
    # as it takes, so only an append to the file this process left, bounded in
    # bytes, is done there. A notebook the kernel rewrote is read back whole
    # (up to a gigabyte): always on a worker thread.
    from kernelexec._session import _transcript

    seen: dict[str, list[int]] = {"append": [], "read": []}
    append, read = _transcript.Transcript._append, _transcript.Transcript._read_cells

    def spied_append(self: _transcript.Transcript, *args: object) -> bool:
        seen["append"].append(threading.get_ident())
        return append(self, *args)  # type: ignore[arg-type]

    def spied_read(self: _transcript.Transcript, folder: int) -> list[dict[str, object]]:
        seen["read"].append(threading.get_ident())
        return read(self, folder)

    monkeypatch.setattr(_transcript.Transcript, "_append", spied_append)
    monkeypatch.setattr(_transcript.Transcript, "_read_cells", spied_read)
    loop = threading.get_ident()
    async with AsyncSession(tmp_path / "work") as s:
        for n in range(3):
            await s.execute(f"print({n})")
        await s.flush()
        assert loop in seen["append"]  # the second and third cells: appended here
        seen["read"].clear()  # opening the session read its (missing) notebook here
        rewrite = (
            "import json\nnb = json.load(open('transcript.ipynb'))\n"
            "nb['cells'][0]['source'] = 'planted'\n"
            "json.dump(nb, open('transcript.ipynb', 'w'))"
        )
        assert (await s.execute(rewrite)).status == "ok"
        await s.flush()
        assert (await s.execute("print('after')")).stdout == "after\n"
        await s.flush()
    assert seen["read"] and loop not in seen["read"], seen
    nb = nbformat.read(tmp_path / "work" / "transcript.ipynb", as_version=4)
    assert nb.cells[0].source == "planted"  # the kernel's edit, read back and kept
    assert [c.source for c in nb.cells][-1] == "print('after')"

    # Over the bound, an append goes to the thread too.
    monkeypatch.setattr(_transcript, "INLINE_BYTES", 0)
    seen["append"].clear()
    async with AsyncSession(tmp_path / "work") as s:
        for n in range(3):
            await s.execute(f"print({n})")
    assert seen["append"] and loop not in seen["append"], seen


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
        transcript = tmp_path / "parent" / "transcript.ipynb"

        def planted() -> bool:  # the thread's remove, then mkfifo: none for a moment
            with contextlib.suppress(FileNotFoundError):
                return stat.S_ISFIFO(transcript.lstat().st_mode)
            return False

        assert await until(planted)
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


async def test_a_write_swaps_two_files_instead_of_copying_the_notebook(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Issue #33: each write made a new file and copied the whole notebook into
    # it, so a session that had drawn big images paid for them on every
    # execution. Now the file the last write displaced (its previous version)
    # takes the new cells, and the two swap places: they take turns. It took
    # them only once a reader's grace had passed since the swap, so cells run
    # back to back (under 10 ms apart) still copied the notebook each time: at
    # 4,000 cells, 0.8 ms of this process's CPU an execution. Where nobody has
    # the version open, and the OS says so (a lease), no grace is waited for:
    # here the grace never passes, and the cells come back to back.
    from kernelexec._session import _transcript

    monkeypatch.setattr(_transcript, "_READ_GRACE", 3600.0)
    made: list[int] = []
    temp_file = _transcript._workdir.temp_file

    def counted(folder: int) -> tuple[str, int]:
        made.append(folder)
        return temp_file(folder)

    monkeypatch.setattr(_transcript._workdir, "temp_file", counted)
    previous = tmp_path / ".transcript.ipynb.previous"
    inodes = []
    async with AsyncSession(tmp_path) as s:
        for i in range(6):
            await s.execute(f"print({i})")
            inodes.append((tmp_path / "transcript.ipynb").stat().st_ino)
            if i:
                # One write behind: a notebook a person can open, should they want it.
                nb = nbformat.read(previous, as_version=4)
                texts = [c.outputs[0]["text"] for c in nb.cells]
                assert texts == [f"{n}\n" for n in range(i)]
    assert len(made) == 2, made  # the first two writes' (no version is displaced before)
    assert len(set(inodes)) == 2 and inodes[1::2] == [inodes[1]] * 3, inodes
    nb = nbformat.read(tmp_path / "transcript.ipynb", as_version=4)
    nbformat.validate(nb)
    assert [c.outputs[0]["text"] for c in nb.cells] == [f"{n}\n" for n in range(6)]
    assert not list(tmp_path.glob(".*.tmp"))


def test_the_os_says_who_has_a_file_open_here(tmp_path: Path) -> None:
    # The transcript relies on it (above): Linux counts a file's readers for a
    # lease only where it is built with IMA. A kernel without would make every
    # write within a reader's grace copy the notebook again: said here, loudly.
    import subprocess
    import time

    from kernelexec._workdir import _lease

    assert _lease._sees_readers(), "this Linux does not count readers: leases cannot tell"
    path = tmp_path / "file"
    path.write_text("x" * 100)
    fd = os.open(path, os.O_WRONLY)
    try:
        with _lease.alone(fd) as alone:
            assert alone is True
        with path.open("rb"):  # a reader in this process
            with _lease.alone(fd) as alone:
                assert alone is False
        with path.open("rb") as held:  # and in another
            reader = subprocess.Popen(["sleep", "60"], stdin=held)
        try:
            with _lease.alone(fd) as alone:
                assert alone is False
        finally:
            reader.kill()
            reader.wait()
        # Held, an open by anyone else waits until the holder is done.
        opened: list[float] = []
        with _lease.alone(fd) as alone:
            assert alone is True
            opener = threading.Thread(target=lambda: opened.append(len(path.read_bytes())))
            opener.start()
            time.sleep(0.3)
            assert opened == []
        opener.join(10)
        assert opened == [100]
    finally:
        os.close(fd)


@pytest.mark.parametrize("grace", [3600.0, 0.0])
async def test_a_version_someone_may_still_be_reading_is_not_written_into(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, grace: float
) -> None:
    # A reader that opened the notebook reads that version whole, however
    # many writes follow: nobody writes into a version someone has open (the
    # OS says so), nor, where it cannot tell, for the grace after it is
    # swapped out (here made longer than the test, or none at all).
    from kernelexec._session import _transcript

    monkeypatch.setattr(_transcript, "_READ_GRACE", grace)
    monkeypatch.setattr(_transcript, "_READ_RATE", 1e18)
    with contextlib.ExitStack() as held:
        async with AsyncSession(tmp_path) as s:
            opened = []
            for i in range(5):
                await s.execute(f"print({i})")
                reader = held.enter_context((tmp_path / "transcript.ipynb").open("rb"))
                opened.append((reader, (tmp_path / "transcript.ipynb").read_bytes()))
        for reader, as_opened in opened:
            assert reader.read() == as_opened
    assert [len(json.loads(data)["cells"]) for _, data in opened] == [1, 2, 3, 4, 5]


# A process of the kernel's own (no GIL shared with the kernel) opening the
# previous version over and over, blocking and not, until the file "stop" appears.
KEEP_OPENING = """\
import json, os
counts = {"read": 0, "torn": 0, "refused": 0}
nonblocking = False
while not os.path.exists("stop"):
    nonblocking = not nonblocking
    flags = os.O_RDONLY | (os.O_NONBLOCK if nonblocking else 0)
    try:
        fd = os.open(".transcript.ipynb.previous", flags)
    except FileNotFoundError:
        continue
    except BlockingIOError:  # a lease held: a non-blocking open is refused
        counts["refused"] += 1
        continue
    try:
        data = b""
        while chunk := os.read(fd, 1 << 16):
            data += chunk
    finally:
        os.close(fd)
    try:
        json.loads(data)
        counts["read"] += 1
    except ValueError:
        counts["torn"] += 1
print(json.dumps(counts))
"""


async def test_a_kernel_that_keeps_opening_the_previous_version_reads_no_torn_one(
    tmp_path: Path,
) -> None:
    # Each open of the version being written into breaks the host's lease on
    # it: the open waits until the write is done (or, non-blocking, fails),
    # and the host is signalled (SIGURG, ignored; SIGIO would end it).
    async with AsyncSession(tmp_path) as s:
        started = await s.execute(
            "import subprocess, sys\n"
            f"opener = subprocess.Popen([sys.executable, '-c', {KEEP_OPENING!r}], "
            "stdout=subprocess.PIPE, text=True)"
        )
        assert started.ok, started.text
        for i in range(100):
            result = await s.execute(f"x = {i}")
            assert result.ok, result.text
            await asyncio.sleep(0.02)  # past a reader's grace: the version is written into
        counts = await s.execute("open('stop', 'w').close()\nprint(opener.communicate()[0])")
        assert counts.ok, counts.text
        seen = json.loads(counts.stdout)
    assert seen["torn"] == 0 and seen["read"] > 0, seen
    nb = nbformat.read(tmp_path / "transcript.ipynb", as_version=4)
    assert [c.source for c in nb.cells][-2] == "x = 99"


async def test_a_kernel_holding_leases_on_the_transcript_neither_stalls_nor_loses_it(
    tmp_path: Path,
) -> None:
    # The kernel's code can take a lease of its own on both files and ignore
    # the signal that asks for it back: an open of ours would then wait until
    # the OS takes it (lease-break-time, 45 s by default), with the event loop
    # stopped. Ours are non-blocking, so the write goes another way at once.
    import time

    take = (
        "import fcntl, os, signal\n"
        "signal.signal(signal.SIGIO, signal.SIG_IGN)\n"
        "held = []\n"
        "for name in ('transcript.ipynb', '.transcript.ipynb.previous'):\n"
        "    fd = os.open(name, os.O_RDONLY)\n"
        "    fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_WRLCK)\n"
        "    held.append(fd)"
    )
    sources = [f"a = {i}" for i in range(3)] + [take] + [f"b = {i}" for i in range(5)]
    started = time.monotonic()
    async with AsyncSession(tmp_path) as s:
        for source in sources:
            result = await s.execute(source)
            assert result.ok, result.text
    assert time.monotonic() - started < 40  # under lease-break-time: nothing waited for it
    nb = nbformat.read(tmp_path / "transcript.ipynb", as_version=4)
    nbformat.validate(nb)
    kept = [c.source for c in nb.cells if c.cell_type == "code"]
    for aside in tmp_path.glob("transcript.ipynb.broken-*"):  # a file it could not read back
        kept += [c["source"] for c in json.loads(aside.read_text())["cells"]]
    assert sorted(kept) == sorted(sources)


async def test_a_reader_never_sees_a_torn_transcript(tmp_path: Path) -> None:
    path, stop = tmp_path / "transcript.ipynb", threading.Event()
    seen: list[int] = []
    torn: list[bytes] = []

    def read() -> None:
        while not stop.is_set():
            try:
                data = path.read_bytes()
            except FileNotFoundError:
                continue
            try:
                seen.append(len(json.loads(data)["cells"]))
            except ValueError:
                torn.append(data[-200:])

    async with AsyncSession(tmp_path) as s:
        await s.execute("print('first')")
        reader = threading.Thread(target=read)
        reader.start()
        try:
            for i in range(30):
                await s.execute(f"print({i} * 'x' * {i * 1000})")
        finally:
            stop.set()
            reader.join()
    assert not torn
    assert seen and seen == sorted(seen) and seen[-1] <= 31


async def test_the_kernel_cannot_turn_the_previous_version_against_the_host(
    tmp_path: Path,
) -> None:
    work, outside = tmp_path / "work", tmp_path / "outside.txt"
    outside.write_text("the host's")
    name = ".transcript.ipynb.previous"
    attacks = [
        # a link to a host file, where kernelexec writes the next version
        f"import os; os.remove({name!r}); os.symlink({str(outside)!r}, {name!r})",
        # a folder, with a file of the session's in it
        f"import os; os.remove({name!r}); os.mkdir({name!r}); "
        f"open({name!r} + '/kept', 'w').write('kept')",
        # bytes written into it in place
        f"open({name!r}, 'r+b').write(b'garbage')",
        # a hard link to the notebook itself
        f"import os; os.remove({name!r}); os.link('transcript.ipynb', {name!r})",
        # a pipe nobody reads: opened for writing, it would block for ever
        f"import os; os.remove({name!r}); os.mkfifo({name!r})",
    ]
    async with AsyncSession(work) as s:
        for i in range(3):
            await s.execute(f"print({i})")
        for attack in attacks:
            planted = await s.execute(attack)
            assert planted.ok, planted.text
            for i in range(2):
                after = await asyncio.wait_for(s.execute(f"print('after', {i})"), 60)
                assert after.stdout == f"after {i}\n"
                await asyncio.sleep(0.1)  # past the grace: the next write takes the swap
    assert outside.read_text() == "the host's"
    [aside] = work.glob(f"{name}.moved-*")
    assert (aside / "kept").read_text() == "kept"
    nb = nbformat.read(work / "transcript.ipynb", as_version=4)
    nbformat.validate(nb)
    printed = [o["text"] for c in nb.cells for o in c.outputs if o.get("name") == "stdout"]
    assert printed == ["0\n", "1\n", "2\n"] + ["after 0\n", "after 1\n"] * len(attacks)


async def test_where_files_cannot_be_swapped_each_version_is_renamed_into_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A file system without RENAME_EXCHANGE (NFS, FUSE, not Linux) cannot be
    # had on this machine: the swap is made to fail as it fails there.
    from kernelexec import _workdir

    monkeypatch.setattr(_workdir, "exchange", lambda folder, one, other: False)
    with contextlib.ExitStack() as held:
        async with AsyncSession(tmp_path) as s:
            versions = []
            for i in range(4):
                await s.execute(f"print({i})")
                versions.append(held.enter_context((tmp_path / "transcript.ipynb").open("rb")))
                await asyncio.sleep(0.1)
        assert len({os.fstat(f.fileno()).st_ino for f in versions}) == 4
    assert not (tmp_path / ".transcript.ipynb.previous").exists()
    nb = nbformat.read(tmp_path / "transcript.ipynb", as_version=4)
    assert [c.outputs[0]["text"] for c in nb.cells] == [f"{n}\n" for n in range(4)]


async def test_a_fork_and_a_checkpoint_leave_the_previous_version_out(tmp_path: Path) -> None:
    from kernelexec._state._fork import copy_files

    async with AsyncSession(tmp_path / "work") as s:
        for i in range(3):
            await s.execute(f"open('out{i}.txt', 'w').write('{i}')")
        assert (tmp_path / "work" / ".transcript.ipynb.previous").is_file()
        (tmp_path / "copy").mkdir()
        copied = copy_files(s.work_dir, s.notebook_path, tmp_path / "copy")
        checkpoint = await s.checkpoint(tmp_path / "checkpoint")
    assert copied == 3
    assert sorted(p.name for p in (tmp_path / "copy").iterdir()) == [
        "out0.txt",
        "out1.txt",
        "out2.txt",
    ]
    kept = sorted(p.name for p in (checkpoint.path / "files").iterdir())
    assert kept == ["out0.txt", "out1.txt", "out2.txt"]
