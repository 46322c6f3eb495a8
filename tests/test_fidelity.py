"""Exact outputs: order, text and one output per print, under load and under attack.

The short run of ``python -m bench --scenarios fidelity`` lives here, so
``.ci/run`` runs it; the kernel's stream code is ``kernelexec/_kernel/streams.py``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import _testvenvs
import pytest
from servers import unavailable

from bench import fidelity
from kernelexec import AsyncSession
from kernelexec._kernel import streams

ROOT = Path(__file__).parent.parent


async def test_stress_outputs_are_exact(tmp_path: Path) -> None:
    report = await fidelity.run(fidelity.KernelexecRunner, 1000, tmp_path)
    assert report.executed == 1000
    assert report.differences == [], json.dumps(report.examples, indent=1)


async def test_stdout_and_stderr_keep_the_order_they_were_written_in(
    session: AsyncSession,
) -> None:
    result = await session.execute(
        "import sys\nfor i in range(20):\n    print('out', i)\n    print('err', i, file=sys.stderr)"
    )
    expected = []
    for i in range(20):
        expected += [("stdout", f"out {i}\n"), ("stderr", f"err {i}\n")]
    assert [(o["name"], o["text"]) for o in result.outputs] == expected


# The I/O thread takes stdout's buffer, then builds and queues its message:
# this hook holds it inside that window (entered, then waiting for the cell
# to say it has displayed, or 1 s). A display made meanwhile must still come
# after the text printed before it.
SLOW_QUEUEING = """\
import sys, threading
out = sys.stdout
entered, displayed, hooked = threading.Event(), threading.Event(), threading.Event()
def slow(msg):
    entered.set()
    displayed.wait(1.0)
    return msg
out.pub_thread.schedule(lambda: (out.register_hook(slow), hooked.set()))
hooked.wait(10)
print("printed first")
out.pub_thread.schedule(out._flush)
entered.wait(10)
display({"text/plain": "displayed second"}, raw=True)
displayed.set()
out.pub_thread.schedule(lambda: out.unregister_hook(slow))
"""


async def test_a_display_never_overtakes_text_the_io_thread_is_queueing(
    session: AsyncSession,
) -> None:
    result = await session.execute(SLOW_QUEUEING)
    assert result.ok, result.text
    assert fidelity.normalize(result.outputs) == [
        ("stream", "stdout", "printed first\n"),
        ("display_data", "displayed second"),
    ]


async def test_fd_output_keeps_its_place_between_prints_and_displays(
    session: AsyncSession,
) -> None:
    # A child's fd 1 and fd 2 are two pipes, so only each one's order against
    # Python's writes is known: one child per stream.
    result = await session.execute(
        "import os, sys\n"
        "for i in range(5):\n"
        "    print('py', i)\n"
        "    os.system(f'echo sh {i}')\n"
        "    print('py err', i, file=sys.stderr)\n"
        "    os.system(f'echo she {i} >&2')\n"
        "    display({'text/plain': f'd{i}'}, raw=True)\n"
    )
    expected: list[tuple[str, ...]] = []
    for i in range(5):
        expected += [
            ("stream", "stdout", f"py {i}\nsh {i}\n"),
            ("stream", "stderr", f"py err {i}\nshe {i}\n"),
            ("display_data", f"d{i}"),
        ]
    assert fidelity.normalize(result.outputs) == expected


async def test_the_processs_own_fd_writes_keep_their_place_in_a_flood_of_prints(
    session: AsyncSession,
) -> None:
    # A print asks the pipe first (one poll), and takes what it holds; the
    # watcher thread may read the same text at the same moment, and a print
    # must then wait for it to be appended rather than overtake it.
    result = await session.execute(
        "import os\n"
        "for i in range(3000):\n"
        "    print('py', i)\n"
        "    os.write(1, f'fd {i}\\n'.encode())\n"
    )
    assert result.ok, result.text
    expected = "".join(f"py {i}\nfd {i}\n" for i in range(3000))
    assert "".join(o["text"] for o in result.outputs if o.get("name") == "stdout") == expected


async def test_a_stream_flood_comes_in_bounded_messages(session: AsyncSession) -> None:
    # 3 MB in one write, which ipykernel sends as one message; each live output is one message.
    sizes: list[int] = []
    result = await session.execute(
        "import sys; sys.stdout.write('x' * 3_000_000); 'done'",
        on_output=lambda o: sizes.append(len(o.get("text", ""))),
    )
    assert result.ok, result.text
    assert sum(sizes) == 3_000_000 and max(sizes) <= streams.CHUNK
    assert result.full_output is not None
    assert (session.work_dir / result.full_output).read_text() == "x" * 3_000_000


def test_only_the_known_ipykernel_gets_the_tuned_streams() -> None:
    assert streams.known_ipykernel("7.0.0")
    assert streams.known_ipykernel("7.4.0")
    assert not streams.known_ipykernel("6.29.5")
    assert not streams.known_ipykernel("8.0.0")
    assert not streams.known_ipykernel("dev")


def test_an_unknown_ipykernel_runs_stock_streams_with_a_log_line() -> None:
    # A real ipykernel's import, with the version it reports changed: the
    # boot script's choice, made in a process of its own.
    code = (
        "import sys, ipykernel\n"
        "ipykernel.__version__ = '6.29.5'\n"
        f"sys.path.insert(0, {str(ROOT / 'kernelexec' / '_kernel')!r})\n"
        "import boot\n"
        "from ipykernel.iostream import OutStream\n"
        "assert boot.load('streams').chunked_outstream() is OutStream\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "ipykernel 6.29.5 is not 7.x; using its stock output streams" in proc.stderr


@pytest.mark.test_venv("oldest-ipykernel")
async def test_the_oldest_supported_ipykernel_gives_exact_outputs(tmp_path: Path) -> None:
    problem = _testvenvs.problem("oldest-ipykernel")
    if problem is not None:
        unavailable(f"no Python with the oldest ipykernel: {problem}")
    python = str(_testvenvs.oldest_ipykernel_python())
    async with AsyncSession(tmp_path / "version", python=python) as session:
        shown = await session.execute(
            "import ipykernel, sys; print(ipykernel.__version__, type(sys.stdout).__name__)"
        )
    assert shown.stdout.split() == [_testvenvs.oldest_ipykernel(), "ChunkedOutStream"]
    report = await fidelity.run(lambda: fidelity.KernelexecRunner(python), 400, tmp_path)
    assert report.differences == [], json.dumps(report.examples, indent=1)
