"""Core behaviour against a real kernel: state, streams, rich outputs, errors, languages."""

from __future__ import annotations

import asyncio
import json
import re
import site
import sys
import sysconfig
from pathlib import Path

import pytest

import kernelexec
from kernelexec import (
    AsyncSession,
    ExecutionResult,
    KernelStartError,
    Limits,
    Session,
    SessionClosedError,
)

# Every test here holds for kernels forked from a zygote and for spawned ones.
pytestmark = pytest.mark.usefixtures("kernel_start")

SVG = (
    '<svg xmlns="http://www.w3.org/2000/svg" width="4" height="4">'
    '<rect width="4" height="4"/></svg>'
)


async def test_state_is_kept_and_streams_kept_apart(session: AsyncSession) -> None:
    first = await session.execute("x = 41")
    assert first.ok and first.text == "" and first.outputs == []
    second = await session.execute(
        "import sys\nprint('to out'); print('to err', file=sys.stderr)\nx + 1"
    )
    assert second.status == "ok"
    assert second.stdout == "to out\n"
    assert second.stderr == "to err\n"
    assert second.text.splitlines() == ["to out", "to err", "42"]
    assert second.execution_count == first.execution_count + 1  # type: ignore[operator]


async def test_matplotlib_figure_is_saved_and_named(session: AsyncSession) -> None:
    result = await session.execute(
        "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()"
    )
    assert result.ok, result.text
    [png] = result.files
    assert png.endswith(".png") and png.startswith("outputs/")
    assert (session.work_dir / png).read_bytes().startswith(b"\x89PNG")
    assert f"[image/png saved to {png}]" in result.text
    assert "iVBOR" not in result.text  # never base64


async def test_pil_svg_html_and_jpeg_get_their_extensions(session: AsyncSession) -> None:
    result = await session.execute(
        "import io\nfrom PIL import Image as PILImage\n"
        "from IPython.display import HTML, SVG, Image, display\n"
        "img = PILImage.new('RGB', (8, 8), 'red')\ndisplay(img)\n"
        f"display(SVG({SVG!r}))\n"
        "display(HTML('<b>bold</b>'))\n"
        "buf = io.BytesIO(); img.save(buf, 'jpeg')\ndisplay(Image(buf.getvalue(), format='jpeg'))\n"
    )
    assert result.ok, result.text
    suffixes = [Path(f).suffix for f in result.files]
    assert ".png" in suffixes and ".svg" in suffixes and ".html" in suffixes and ".jpg" in suffixes
    assert (
        session.work_dir / next(f for f in result.files if f.endswith(".svg"))
    ).read_text() == SVG
    jpeg = [f for f in result.files if f.endswith(".jpg")][-1]
    assert (session.work_dir / jpeg).read_bytes()[:3] == b"\xff\xd8\xff"
    assert (
        "<b>bold</b>"
        == (session.work_dir / next(f for f in result.files if f.endswith(".html"))).read_text()
    )
    for name in result.files:
        assert f"saved to {name}" in result.text


async def test_error_keeps_stdout_and_files_shown_before_it(session: AsyncSession) -> None:
    result = await session.execute(
        f"from IPython.display import SVG, display\ndisplay(SVG({SVG!r}))\nprint('before'); 1/0"
    )
    assert result.status == "error"
    assert result.error is not None and result.error.ename == "ZeroDivisionError"
    assert result.error.evalue == "division by zero"
    assert not any("\x1b" in line for line in result.error.traceback)
    assert "\x1b" not in result.text and "ZeroDivisionError" in result.text
    assert result.stdout == "before\n"
    assert len(result.files) == 1 and (session.work_dir / result.files[0]).exists()


async def test_clear_output_and_display_updates_apply(session: AsyncSession) -> None:
    result = await session.execute(
        "from IPython.display import clear_output, display\n"
        "h = display('v1', display_id=True)\nh.update('v2')\n"
        "for i in range(3):\n    clear_output(wait=True)\n    print('tick', i)\n"
    )
    assert result.text == "tick 2\n"


async def test_markdown_message_runs_python_and_bash_in_the_same_cwd(session: AsyncSession) -> None:
    message = (
        "First python:\n```python\nimport os\nopen('made_by_python.txt', 'w').write('hi')\n"
        "print(os.getcwd())\n```\nThen shell:\n```bash\npwd\ncat made_by_python.txt\n```\n"
    )
    results = [r.result for r in await session.run_markdown(message)]
    assert all(r is not None for r in results)
    assert [r.status for r in results] == ["ok", "ok"]  # type: ignore[union-attr]
    assert [r.language for r in results] == ["python", "bash"]  # type: ignore[union-attr]
    first, second = results[0].stdout, results[1].stdout  # type: ignore[union-attr]
    assert first == second.splitlines()[0] + "\n" == f"{session.work_dir}\n"
    assert second.endswith("hi")


async def test_markdown_stops_after_the_first_failure(session: AsyncSession) -> None:
    results = await session.run_markdown(
        "```python\nx = 1\n```\n```sh\nexit 3\n```\n```python\nx = 2\n```"
    )
    assert [r.status for r in results] == ["ok", "error", "not_run"]
    error = results[1].result.error  # type: ignore[union-attr]
    assert error is not None and error.evalue == "bash exited with status 3"
    assert (await session.execute("x")).text == "1\n"


async def test_unknown_language_is_refused(session: AsyncSession) -> None:
    result = await session.execute("puts 1", language="ruby")
    assert result.status == "error" and result.error is not None
    assert result.error.ename == "UnsupportedLanguage"
    assert "ruby" in result.text and "python" in result.text
    # In a message, such a block fails at its position (tests/test_markdown.py).


async def test_result_serializes_to_json_and_back(session: AsyncSession) -> None:
    result = await session.execute("print('a'); 1/0")
    wire = json.loads(json.dumps(result.to_dict()))
    assert ExecutionResult.from_dict(wire) == result
    assert wire["error"]["ename"] == "ZeroDivisionError" and "text" in wire


async def test_the_kernel_listens_on_unix_sockets_only_this_user_can_reach(
    session: AsyncSession,
) -> None:
    # No TCP port to lose to another process between choosing it and binding it.
    assert (await session.execute("1")).ok
    info = session.connection_info
    assert info is not None and info["transport"] == "ipc"
    channels = ("shell", "iopub", "stdin", "control", "hb")
    assert all(Path(f"{info['ip']}-{info[f'{c}_port']}").is_socket() for c in channels)
    assert Path(info["ip"]).parent.stat().st_mode & 0o777 == 0o700


async def test_work_dir_none_makes_a_kept_temp_dir() -> None:
    async with AsyncSession() as s:
        result = await s.execute("import os; print(os.getcwd())")
        work_dir = s.work_dir
    assert result.stdout.strip() == str(work_dir)
    assert work_dir.is_dir() and (work_dir / "transcript.ipynb").exists()


async def test_another_interpreter_without_ipykernel_gives_a_clear_error(tmp_path: Path) -> None:
    venv = tmp_path / "bare"
    proc = await asyncio.create_subprocess_exec("python", "-m", "venv", "--without-pip", str(venv))
    assert await proc.wait() == 0
    python = str(venv / "bin" / "python")
    with pytest.raises(KernelStartError, match=r"ipykernel.*pip install ipykernel"):
        async with AsyncSession(tmp_path / "w", python=python):
            pass


async def test_another_interpreter_with_ipykernel_hosts_the_kernel(tmp_path: Path) -> None:
    # A venv of its own that imports this interpreter's packages (ipykernel),
    # whether the tests run in a venv or not: --system-site-packages would
    # reach only the base interpreter's, which in a venv has no ipykernel.
    venv = tmp_path / "site"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "venv", "--without-pip", str(venv)
    )
    assert await proc.wait() == 0
    python = venv / "bin" / "python"
    where = "import sysconfig; print(sysconfig.get_path('purelib'))"
    ask = await asyncio.create_subprocess_exec(
        str(python), "-c", where, stdout=asyncio.subprocess.PIPE
    )
    purelib = Path((await ask.communicate())[0].decode().strip())
    ours = dict.fromkeys([*site.getsitepackages(), sysconfig.get_path("purelib")])
    (purelib / "parent.pth").write_text(
        "".join(f"import site; site.addsitedir({path!r})\n" for path in ours)
    )
    async with AsyncSession(tmp_path / "w", python=str(python)) as s:
        result = await s.execute("import sys, ipykernel; print(sys.prefix)")
    assert result.ok, result.text
    assert result.stdout.strip() == str(venv)


async def test_closed_session_refuses_work(tmp_path: Path) -> None:
    s = AsyncSession(tmp_path)
    await s.close()
    with pytest.raises(SessionClosedError):
        await s.execute("1")


def test_sync_session_works_inside_a_running_event_loop(tmp_path: Path) -> None:
    async def inside_a_notebook() -> str:
        with Session(tmp_path) as s:
            s.execute("x = 41")
            return s.execute("x + 1").text

    assert asyncio.run(inside_a_notebook()) == "42\n"


def test_public_api_is_sorted_and_complete() -> None:
    assert kernelexec.__all__ == sorted(kernelexec.__all__)
    for name in kernelexec.__all__:
        assert getattr(kernelexec, name) is not None


async def test_outputs_reach_a_listener_as_they_happen(session: AsyncSession) -> None:
    # The code waits for a file that only the listener creates, on seeing the
    # first output: it can finish only if that output arrived while it ran.
    go = session.work_dir / "go"
    seen: list[dict[str, object]] = []

    def listener(output: dict[str, object]) -> None:
        seen.append(output)
        if output.get("text") == "waiting\n":
            go.touch()

    result = await session.execute(
        "import os, time\nprint('waiting', flush=True)\n"
        "for _ in range(200):\n    if os.path.exists('go'): break\n    time.sleep(0.05)\n"
        "print('go' if os.path.exists('go') else 'never heard')\n'done'",
        on_output=listener,
    )
    assert result.stdout == "waiting\ngo\n"
    assert [o["output_type"] for o in seen] == ["stream", "stream", "execute_result"]


async def test_output_keeps_its_order_across_streams_displays_and_subprocesses(
    session: AsyncSession,
) -> None:
    # stdout and stderr are separate streams, each in order; a display flushes both first.
    result = await session.execute(
        "import os\nprint('a')\ndisplay('b')\nos.system('echo c')\nprint('d')\n'e'"
    )
    shown = [o.get("text") or o["data"]["text/plain"] for o in result.outputs]
    assert shown == ["a\n", "'b'", "c\nd\n", "'e'"], result.outputs


async def test_history_works_but_stays_out_of_the_users_history_file(tmp_path: Path) -> None:
    ipython_dir = tmp_path / "ipython"
    async with AsyncSession(tmp_path / "w", env={"IPYTHONDIR": str(ipython_dir)}) as s:
        await s.execute("marker_7f3a = 1")
        shown = await s.execute("%history -n")
        assert "marker_7f3a = 1" in shown.stdout
    databases = list(ipython_dir.rglob("history.sqlite"))
    assert all(b"marker_7f3a" not in db.read_bytes() for db in databases)


@pytest.mark.parametrize(
    ("limits", "lines"),
    [
        (Limits(), 400_000),  # the streams cut, then the text: one marker
        (Limits(max_stream_chars=1_000), 20_000),  # only the streams cut
        (Limits(max_stream_chars=1_000, max_text_chars=1_000), 20_000),  # both, near each other
        (Limits(max_stream_chars=4_000, max_text_chars=1_000), 20_000),
    ],
)
async def test_a_flood_text_names_one_cut_count_and_it_is_exact(
    tmp_path: Path, limits: Limits, lines: int
) -> None:
    async with AsyncSession(tmp_path, limits=limits) as s:
        result = await s.execute(
            f"import sys\nfor i in range({lines}): sys.stdout.write(f'{{i:07d}}\\n')"
        )
    assert result.ok, result.message
    full = "".join(f"{i:07d}\n" for i in range(lines))
    counts = re.findall(r"([\d,]+) characters[a-z ]*? cut", result.text)  # of output were cut, ...
    assert len(counts) == 1, result.text
    head, rest = result.text.split("\n[... ", 1)
    tail, note = rest.split(" ...]\n", 1)[1].split("[kernelexec] ", 1)
    assert full.startswith(head) and full.endswith(tail)
    assert int(counts[0].replace(",", "")) == len(full) - len(head) - len(tail)
    kept = len(result.stdout) - len(
        f"\n[... {len(full) - limits.max_stream_chars:,} characters cut ...]\n"
    )
    assert kept == limits.max_stream_chars
    assert note.startswith(
        f"stdout and stderr were {len(full):,} characters, of which the result keeps "
        f"{kept:,}, head and tail (Limits.max_stream_chars); all of it is in {result.full_output}."
    )
    assert len(result.text) <= limits.max_text_chars + 100
