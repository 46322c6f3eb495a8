"""A hostile kernel against the files kernelexec writes and serves in its work dir.

The kernel owns its work dir: it can put a symlink (to any host path, even one
a container cannot see) where kernelexec is about to write a spill file, a
saved output, ``outputs/`` itself, the transcript or its temp file, and it can
swap a folder for a link while a request is being served. kernelexec must
never follow such a link: no byte lands outside the work dir, nothing outside
is served, and the output still lands in the work dir, where the result says.
"""

# Fixtures from servers.py are imported by name and used as parameters:
# ruff: noqa: F401

from __future__ import annotations

import asyncio
import http.client
import json
import os
import stat
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import nbformat
import pytest
from _mcpclient import stdio_mcp, texts
from _serverproc import ServerProcess, raw_request, wait_for
from conftest import until
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.types import CallToolResult, TextContent
from servers import kernel_image

from kernelexec import AsyncSession, DockerBackend, ExecutionResult, Limits
from kernelexec._backends import KernelBackend
from kernelexec._workdir import remove_tree

# Every test here holds for kernels forked from a zygote and for spawned ones.
pytestmark = pytest.mark.usefixtures("kernel_start")

SECRET = "HOST SECRET 7f3a"
# A 1x1 PNG, as a kernel's display bundle carries it.
PNG = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9aw"
    "AAAABJRU5ErkJggg=="
)
SHOW_PNG = f"from IPython.display import display\ndisplay({{'image/png': {PNG!r}}}, raw=True)"
LIMITS = Limits(max_text_chars=2_000, max_stream_chars=10_000)


def snapshot(root: Path) -> dict[str, object]:
    """Everything under ``root`` as it is on disk, links not followed."""
    found: dict[str, object] = {}
    for path in sorted(root.rglob("*")):
        info = path.lstat()
        if stat.S_ISLNK(info.st_mode):
            found[str(path)] = ("link", os.readlink(path))
        elif stat.S_ISREG(info.st_mode):
            found[str(path)] = path.read_bytes()
        else:
            found[str(path)] = stat.S_IFMT(info.st_mode)
    return found


def outside_dir(tmp_path: Path) -> Path:
    """A host folder beside the work dir, holding a notebook and a file worth stealing."""
    outside = tmp_path / "outside"
    (outside / "outdir").mkdir(parents=True)
    (outside / "keep.txt").write_text(f"{SECRET}: a host file")
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(f"# {SECRET}")])
    (outside / "nb.ipynb").write_text(nbformat.writes(notebook))
    return outside


def is_regular(path: Path) -> bool:
    return stat.S_ISREG(path.lstat().st_mode)


@pytest.fixture(params=["local", "docker"])
def make_backend(request: pytest.FixtureRequest) -> Callable[[], KernelBackend | None]:
    if request.param == "local":
        return lambda: None
    image = request.getfixturevalue("kernel_image")
    return lambda: DockerBackend(image=image)


async def test_links_planted_where_kernelexec_writes_get_no_byte_outside(
    make_backend: Callable[[], KernelBackend | None], tmp_path: Path
) -> None:
    outside = outside_dir(tmp_path)
    before = snapshot(outside)
    work = tmp_path / "work"
    backend = make_backend()
    async with AsyncSession(work, backend=backend, limits=LIMITS, timeout=120) as s:
        # Links for the next executions' files (their names are predictable),
        # and for the temp file of the transcript write that follows this cell.
        plant = await s.execute(
            "import os\nos.makedirs('outputs', exist_ok=True)\n"
            "for name in ('0002-output.txt', '0003-1.png', '0004-output.txt'):\n"
            f"    os.symlink({str(outside)!r} + '/' + name, 'outputs/' + name)\n"
            f"os.symlink({str(outside / 'tmp.txt')!r}, '.transcript.ipynb.{os.getpid()}.tmp')\n"
        )
        assert plant.ok, plant.text
        flood = await s.execute("print('A' * 5000)")  # the stream spill
        image = await s.execute(SHOW_PNG)  # a saved rich output
        long_text = await s.execute("'B' * 5000")  # the text spill
        check_saved(work, flood, image, long_text)
        # Now outputs/ itself and the transcript are links to host paths.
        swap = await s.execute(
            "import os\nos.rename('outputs', 'outputs.real')\n"
            f"os.symlink({str(outside / 'outdir')!r}, 'outputs')\n"
            f"os.remove('transcript.ipynb')\nos.symlink({str(outside / 'nb.ipynb')!r}, "
            "'transcript.ipynb')"
        )
        assert swap.ok, swap.text
        flood = await s.execute("print('A' * 5000)")
        image = await s.execute(SHOW_PNG)
        long_text = await s.execute("'B' * 5000")
        check_saved(work, flood, image, long_text)
        assert flood.message is not None and "outputs.moved-" in flood.message
        await s.flush()

    assert snapshot(outside) == before, "kernelexec wrote outside the work dir"
    assert stat.S_ISDIR((work / "outputs").lstat().st_mode)  # a real folder again
    # The transcript is kernelexec's own, never the host notebook the link named.
    transcript = (work / "transcript.ipynb").read_text()
    assert is_regular(work / "transcript.ipynb") and SECRET not in transcript
    nbformat.validate(nbformat.reads(transcript, as_version=4))
    assert "'B' * 5000" in transcript


def check_saved(
    work: Path, flood: ExecutionResult, image: ExecutionResult, long_text: ExecutionResult
) -> None:
    """Nothing was lost: each file is a regular file in the work dir, as the result says."""
    for result, expected in ((flood, "A" * 5000), (long_text, "B" * 5000)):
        assert result.full_output is not None, result.text
        saved = work / result.full_output
        assert is_regular(saved) and expected in saved.read_text(), result.message
    [png] = image.files
    assert is_regular(work / png) and (work / png).read_bytes().startswith(b"\x89PNG")


# -- the HTTP routes, against a real server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    # Its tests run twice (forked and spawned kernels), some leaving their sessions.
    proc = ServerProcess(
        tmp_path_factory.mktemp("hostile-files") / "work",
        "--max-body-mb",
        "1",
        "--max-sessions",
        "40",
    )
    yield proc
    assert proc.stop() == 0


# renameat2(RENAME_EXCHANGE) swaps the two names atomically, so "flip" is
# always there: a folder one moment, a link out of the work dir the next.
FLIPPER = """
import ctypes, os, threading
libc = ctypes.CDLL(None, use_errno=True)
stop_flipping = threading.Event()
def _flip():
    while not stop_flipping.is_set():
        libc.renameat2(-100, b'flip', -100, b'flip.other', 2)
os.makedirs('flip', exist_ok=True)
open('flip/data.txt', 'w').write('inside')
os.symlink({outside!r}, 'flip.other')
threading.Thread(target=_flip, daemon=True).start()
"""


def test_a_kernel_flipping_a_folder_and_a_link_gets_nothing_out(
    server: ServerProcess, tmp_path: Path
) -> None:
    sid = server.create()
    outside = tmp_path / "flip-outside"
    outside.mkdir()
    (outside / "data.txt").write_text(SECRET)
    server.execute(sid, FLIPPER.format(outside=str(outside)))
    served_outside, statuses = 0, set()
    try:
        for _ in range(300):
            status, body = raw_request(server, "GET", f"/sessions/{sid}/files/flip/data.txt")
            statuses.add(status)
            served_outside += SECRET.encode() in body
        for i in range(100):
            status, _ = raw_request(server, "PUT", f"/sessions/{sid}/files/flip/put-{i}.txt", b"up")
            statuses.add(status)
    finally:
        server.execute(sid, "stop_flipping.set()")
    landed_outside = sorted(p.name for p in outside.iterdir() if p.name != "data.txt")
    assert (served_outside, landed_outside) == (0, []), (served_outside, len(landed_outside))
    assert statuses <= {200, 201, 403, 409}, statuses  # never a 500
    assert (outside / "data.txt").read_text() == SECRET


def test_the_notebook_route_never_serves_what_a_link_names(
    server: ServerProcess, tmp_path: Path
) -> None:
    sid = server.create()
    work = server.work_root / sid
    notebook = outside_dir(tmp_path) / "nb.ipynb"
    server.execute(sid, "x = 1")
    # Planted after the cell's transcript write, so the route meets the link itself.
    server.execute(
        sid,
        "import os, threading, time\n"
        "def _plant():\n"
        "    time.sleep(1)\n"
        "    os.remove('transcript.ipynb')\n"
        f"    os.symlink({str(notebook)!r}, 'transcript.ipynb')\n"
        "threading.Thread(target=_plant).start()",
    )
    assert wait_for(lambda: (work / "transcript.ipynb").is_symlink(), 60)
    status, body = raw_request(server, "GET", f"/sessions/{sid}/notebook")
    assert SECRET.encode() not in body
    assert status in (200, 409), body
    status, body = raw_request(server, "GET", f"/sessions/{sid}/files/transcript.ipynb")
    assert status == 403 and SECRET.encode() not in body, body
    # The next execution writes the transcript anew, in place of the link.
    server.execute(sid, "y = 2")
    status, body = raw_request(server, "GET", f"/sessions/{sid}/notebook")
    assert status == 200 and SECRET.encode() not in body
    assert is_regular(work / "transcript.ipynb")
    assert "y = 2" in body.decode()


# os.makedirs recurses; a folder at a time through handles does not.
DEEP_CHAIN = """
fd = os.open('.', os.O_RDONLY)
for _ in range(1200):
    os.mkdir('d', dir_fd=fd)
    fd, parent = os.open('d', os.O_RDONLY, dir_fd=fd), fd
    os.close(parent)
os.write(os.open('deep.txt', os.O_WRONLY | os.O_CREAT, dir_fd=fd), b'deep')
os.close(fd)
"""


def test_links_loops_long_names_and_deep_chains_are_4xx_never_500(
    server: ServerProcess,
) -> None:
    sid = server.create()
    work = server.work_root / sid
    made = server.execute(
        sid,
        "import os\nos.symlink('loop', 'loop')\nos.symlink('b', 'a')\nos.symlink('a', 'b')\n"
        f"{DEEP_CHAIN}\nopen('plain.txt', 'w').write('plain')",
    )
    assert made["status"] == "ok", made["text"]
    try:
        check_links_loops_long_names_and_deep_chains(server, sid, work)
    finally:
        remove_tree(work / "d")  # pytest's own clean-up would recurse 1,200 deep


def check_links_loops_long_names_and_deep_chains(
    server: ServerProcess, sid: str, work: Path
) -> None:
    files = f"/sessions/{sid}/files"
    for _ in range(2):  # a loop must not break the listing for good
        status, body = raw_request(server, "GET", files)
        assert status == 200, body
        listing = json.loads(body)
        paths = {f["path"] for f in listing["files"]}
        assert "plain.txt" in paths and "/".join(["d"] * 1200 + ["deep.txt"]) in paths
        assert not {"loop", "a", "b"} & paths
        assert listing["skipped"], listing  # the links, said so
    # Listed, but its path is longer than a URL path may be: a 4xx saying so.
    status, body = raw_request(server, "GET", f"{files}/{'/'.join(['d'] * 1200)}/deep.txt")
    assert 400 <= status < 500 and json.loads(body)["message"], body
    assert raw_request(server, "GET", f"{files}/{'/'.join(['d'] * 100)}")[0] == 404  # a folder

    long_name = "x" * 300
    too_deep = "/".join(["y"] * 2100)  # over PATH_MAX as one path
    for method, path in [
        ("GET", "loop"),
        ("GET", "loop/x"),
        ("GET", "a"),
        ("PUT", "loop"),
        ("PUT", "loop/x"),
        ("PUT", "a/x"),
        ("GET", long_name),
        ("PUT", long_name),
        ("GET", f"sub/{long_name}/f"),
        ("PUT", f"sub/{long_name}/f"),
        ("GET", too_deep),
        ("PUT", too_deep),
        ("PUT", "transcript.ipynb"),
    ]:
        status, body = raw_request(
            server, method, f"{files}/{path}", b"x" if method == "PUT" else None
        )
        assert 400 <= status < 500, (method, path[:40], status, body[:300])
        assert json.loads(body)["message"], body
    assert not (work / "loop").exists() and (work / "loop").is_symlink()
    nbformat.validate(nbformat.reads((work / "transcript.ipynb").read_text(), as_version=4))


# -- the MCP tools


async def test_mcp_serves_no_file_a_link_names(tmp_path: Path) -> None:
    notebook = outside_dir(tmp_path) / "nb.ipynb"
    root = tmp_path / "root"
    async with stdio_mcp(root) as client:
        await client.call_tool("execute_code", {"code": "x = 1"})
        await client.call_tool(
            "execute_code",
            {
                "code": "import os, threading, time\n"
                "def _plant():\n"
                "    time.sleep(1)\n"
                "    os.remove('transcript.ipynb')\n"
                f"    os.symlink({str(notebook)!r}, 'transcript.ipynb')\n"
                f"    os.symlink({str(notebook)!r}, 'leak.txt')\n"
                "threading.Thread(target=_plant).start()"
            },
        )
        work = root / "default"
        # Planted (both links), or what follows tests nothing.
        assert await until(lambda: (work / "leak.txt").is_symlink())
        got = await client.call_tool("get_notebook", {})
        read = await client.call_tool("read_file", {"path": "leak.txt"})
        read_notebook = await client.call_tool("read_file", {"path": "transcript.ipynb"})
    assert SECRET not in texts(got), texts(got)
    assert read.is_error and SECRET not in texts(read)
    assert SECRET not in texts(read_notebook)


def test_a_fifo_in_the_work_dir_does_not_hang_a_download(server: ServerProcess) -> None:
    sid = server.create()
    server.execute(sid, "import os\nos.mkfifo('pipe')")
    done: list[int] = []
    thread = threading.Thread(
        target=lambda: done.append(raw_request(server, "GET", f"/sessions/{sid}/files/pipe")[0])
    )
    thread.start()
    thread.join(30)
    assert done and 400 <= done[0] < 500, done
    status, body = raw_request(server, "GET", f"/sessions/{sid}/files")
    assert status == 200 and "pipe" not in {f["path"] for f in json.loads(body)["files"]}


def test_purging_a_session_removes_a_chain_deeper_than_any_path(server: ServerProcess) -> None:
    # 3,000 folders deep: past the recursion limit and past PATH_MAX as one path.
    sid = server.create()
    work = server.work_root / sid
    made = server.execute(sid, "import os\n" + DEEP_CHAIN.replace("1200", "3000"))
    assert made["status"] == "ok", made["text"]
    status, body = raw_request(server, "DELETE", f"/sessions/{sid}?purge=true")
    assert status in (200, 204), body
    assert not work.exists()
