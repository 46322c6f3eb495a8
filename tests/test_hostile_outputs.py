"""Hostile outputs: 50 MB results, displays, errors and tracebacks stay within the byte caps.

Each case runs its session in a child process (this file, run as a script),
which resets its peak RSS (``/proc/self/clear_refs``) once the kernel is warm
and reports how far the peak rose during the one hostile execution: the test
process's own memory (other tests, xdist) never blurs the figure.
"""

# Fixtures from servers.py are imported by name and used as parameters:
# ruff: noqa: F401, F811

from __future__ import annotations

import asyncio
import gc
import json
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nbformat
import pytest
from servers import kernel_image

from kernelexec import AsyncSession, DockerBackend, Limits

ROOT = Path(__file__).resolve().parents[1]
MB_50 = 50_000_000


@dataclass(frozen=True)
class Case:
    code: str
    whole: Callable[[bytes], bool]  # the named file holds all of the output


def _all_of(char: bytes) -> Callable[[bytes], bool]:
    return lambda data: data.count(char) >= MB_50


def _all_lines(data: bytes) -> bool:
    return data.count(b'deep.py", line') == 1_000_000 and b"line 999999, in f" in data


CASES = {
    "exception": Case("raise ValueError('x' * 50_000_000)", _all_of(b"x")),
    "execute_result": Case("'r' * 50_000_000", _all_of(b"r")),
    "display_plain": Case(
        "from IPython.display import display\ndisplay({'text/plain': 'p' * 50_000_000}, raw=True)",
        _all_of(b"p"),
    ),
    "display_html": Case(
        "from IPython.display import HTML, display\n"
        "display(HTML('<b>' + 'h' * 50_000_000 + '</b>'))",
        _all_of(b"h"),
    ),
    "traceback": Case(
        textwrap.dedent(
            """\
            class Deep(Exception):
                def _render_traceback_(self):
                    return [f'  File "deep.py", line {i}, in f' for i in range(1_000_000)]
            raise Deep('a million frames')
            """
        ),
        _all_lines,
    ),
    "json": Case(
        "from IPython.display import display\n"
        "display({'application/json': {'k': 'j' * 50_000_000}, 'text/plain': 'J'}, raw=True)",
        _all_of(b"j"),
    ),
    "metadata": Case(
        "from IPython.display import display\n"
        "display({'text/plain': 'small'}, metadata={'m': 'm' * 50_000_000}, raw=True)",
        _all_of(b"m"),
    ),
    "update": Case(
        "from IPython.display import display\n"
        "h = display({'text/plain': 'a'}, raw=True, display_id=True)\n"
        "h.update({'text/plain': 'u' * 50_000_000}, raw=True)",
        _all_of(b"u"),
    ),
}
# Kernels kernelexec did not boot get the same caps on the client's side: the
# result is as bounded, but each message is decoded whole first; so the
# exception is 20 MB, its messages (message and traceback: 40 MB) under the
# host's cap on one message (64 MB), past which they would be dropped unread
# (tests/test_host_caps.py).
MB_20 = 20_000_000
UNCAPPED_KERNEL = {
    # The kernel's code takes the cap off its own session.
    "unhooked": "del get_ipython().kernel.session.serialize\n",
    # A kernelspec of its own, not kernelexec's boot script.
    "stock": "",
}


def _transcript_cell(work_dir: Path) -> dict[str, Any]:
    notebook = json.loads((work_dir / "transcript.ipynb").read_text())
    cell: dict[str, Any] = [c for c in notebook["cells"] if c["cell_type"] == "code"][-1]
    return cell


def _run_child(
    case: str,
    work_dir: Path,
    *,
    code: str | None = None,
    limits: dict[str, int] | None = None,
    kernel: str = "boot",
) -> dict[str, Any]:
    spec = {
        "code": CASES[case].code if code is None else code,
        "work_dir": str(work_dir),
        "limits": limits or {},
        "kernel": kernel,
    }
    # The child imports kernelexec from this checkout, as the test does.
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "PYTHONPATH": path}
    proc = subprocess.run(
        [sys.executable, __file__, json.dumps(spec)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=work_dir.parent,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report: dict[str, Any] = json.loads(proc.stdout.splitlines()[-1])
    return report


def _check_within_caps(report: dict[str, Any], work_dir: Path, limits: Limits) -> None:
    # One hostile output: the result holds it at most twice (an error is both
    # an output and result.error), plus the capped text.
    bound = 2 * limits.max_output_bytes + limits.max_text_chars + 10_000
    assert report["dict_bytes"] <= bound, f"{report['dict_bytes']:,} bytes in the result"
    cell = len(json.dumps(_transcript_cell(work_dir)))
    assert cell <= limits.max_output_bytes + 20_000, f"{cell:,} bytes in the transcript cell"
    nbformat.validate(nbformat.read(work_dir / "transcript.ipynb", as_version=4))


@pytest.mark.parametrize("case", list(CASES))
def test_a_50_mb_output_is_cut_in_the_kernel_and_kept_whole_in_a_file(
    case: str, tmp_path: Path
) -> None:
    work_dir = tmp_path / "work"
    report = _run_child(case, work_dir)
    print(f"{case}: peak RSS +{report['peak_mb']:.1f} MB, result {report['dict_bytes']:,} bytes")
    assert report["peak_mb"] < 50, f"our peak RSS grew {report['peak_mb']:.0f} MB"
    _check_within_caps(report, work_dir, Limits())
    named = [f for f in report["files"] if f in (report["message"] or "")]
    assert named, report["message"]
    assert named[0] in report["text"], "the text an LLM reads says where the rest is"
    assert CASES[case].whole((work_dir / named[0]).read_bytes())


@pytest.mark.parametrize("how", list(UNCAPPED_KERNEL))
def test_a_kernel_that_does_not_cap_is_capped_by_the_client(how: str, tmp_path: Path) -> None:
    work_dir = tmp_path / "work"
    code = UNCAPPED_KERNEL[how] + f"raise ValueError('x' * {MB_20})"
    report = _run_child("exception", work_dir, code=code, kernel=how)
    # Transient: the 50 MB message is decoded whole before it is cut.
    print(f"{how}: peak RSS +{report['peak_mb']:.1f} MB, result {report['dict_bytes']:,} bytes")
    assert report["status"] == "error"
    _check_within_caps(report, work_dir, Limits())
    spill = report["full_output"]
    assert spill is not None and f"all of it is in {spill}" in report["message"]
    assert not [f for f in report["files"] if f.startswith("outputs/in")], "no kernel file"
    assert (work_dir / spill).read_bytes().count(b"x") >= MB_20


def test_a_40_mb_image_is_saved_whole_and_not_sent(tmp_path: Path) -> None:
    work_dir = tmp_path / "work"
    code = (
        "import os\nfrom IPython.display import Image, display\n"
        "png = b'\\x89PNG\\r\\n\\x1a\\n' + os.urandom(40_000_000)\n"
        "open('original.png', 'wb').write(png)\n"
        "display(Image(data=png, format='png'))"
    )
    report = _run_child("image", work_dir, code=code)
    print(f"image: peak RSS +{report['peak_mb']:.1f} MB, result {report['dict_bytes']:,} bytes")
    assert report["peak_mb"] < 50
    assert report["dict_bytes"] < Limits().max_output_bytes
    saved = [f for f in report["files"] if f.endswith(".png")]
    assert saved and f"saved to {saved[0]}" in report["text"], report["text"]
    assert (work_dir / saved[0]).read_bytes() == (work_dir / "original.png").read_bytes()


def test_configured_caps_reach_the_kernel_and_bound_the_whole_result(tmp_path: Path) -> None:
    limits = {"max_output_bytes": 100_000, "max_result_bytes": 300_000}
    work_dir = tmp_path / "work"
    code = (
        "from IPython.display import display\n"
        "display({'text/plain': 'c' * 200_000}, raw=True)\n"  # over max_output_bytes
        "for i in range(10):\n"
        "    display({'text/plain': str(i) * 90_000}, raw=True)\n"  # together over the result's
    )
    report = _run_child("budget", work_dir, code=code, limits=limits)
    assert report["status"] == "ok"
    # Cut by the kernel, which read the cap from its environment (the file is
    # named by the cell's In [N], which silent requests before it may have moved).
    [saved] = [f for f in report["files"] if f.endswith("-display.txt")]
    assert (work_dir / saved).read_text() == "c" * 200_000
    first, *rest = report["outputs"]
    assert first["size"] <= 100_000 and saved in first["marker"]
    assert rest == [{"size": 90_000, "head": str(i) * 20, "marker": None} for i in range(2)]
    assert report["dict_bytes"] <= 300_000 + Limits().max_text_chars + 10_000
    assert "8 outputs past max_result_bytes (300,000 bytes) were left out" in report["message"]
    spill = (work_dir / report["full_output"]).read_text()
    assert all(str(i) * 90_000 in spill for i in range(2, 10))


def test_a_docker_kernel_cuts_and_saves_in_the_bind_mounted_work_dir(
    kernel_image: str, tmp_path: Path
) -> None:
    work_dir = tmp_path / "work"
    report = _run_child("exception", work_dir, kernel=f"docker:{kernel_image}")
    print(f"docker: peak RSS +{report['peak_mb']:.1f} MB, result {report['dict_bytes']:,} bytes")
    assert report["peak_mb"] < 50
    _check_within_caps(report, work_dir, Limits())
    named = [f for f in report["files"] if f in (report["message"] or "")]
    assert named and CASES["exception"].whole((work_dir / named[0]).read_bytes())
    assert (work_dir / named[0]).stat().st_uid == os.getuid()


# -- the child process


def _vm_mb(field: str) -> float:
    status = Path("/proc/self/status").read_text()
    return int(status.split(f"{field}:")[1].split()[0]) / 1024


def _marker(text: str) -> str | None:
    found = re.search(r"\[\.\.\. kernelexec cut [^\]]*\]", text)
    return found.group(0) if found else None


def _stock_kernelspec(home: Path) -> None:
    """A kernelspec named "stock": plain ipykernel, without kernelexec's boot script."""
    spec = home / "kernels" / "stock"
    spec.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(
        json.dumps({"argv": argv, "display_name": "stock", "language": "python"})
    )
    os.environ["JUPYTER_PATH"] = str(home)


async def _child(spec: dict[str, Any]) -> dict[str, Any]:
    work_dir = Path(spec["work_dir"])
    options: dict[str, Any] = {"timeout": 300, "limits": Limits(**spec["limits"])}
    if spec["kernel"] == "stock":
        _stock_kernelspec(work_dir.parent / "jupyter")
        options["kernel_name"] = "stock"
    elif spec["kernel"].startswith("docker:"):
        options["backend"] = DockerBackend(image=spec["kernel"].removeprefix("docker:"))
    async with AsyncSession(work_dir, **options) as session:
        await session.execute("1")
        gc.collect()
        Path("/proc/self/clear_refs").write_text("5")  # the peak, from now
        base = _vm_mb("VmRSS")
        result = await session.execute(spec["code"])
        peak = _vm_mb("VmHWM") - base
    shown = [o.get("data", {}).get("text/plain", "") for o in result.outputs if "data" in o]
    return {
        "peak_mb": peak,
        "dict_bytes": len(json.dumps(result.to_dict())),
        "status": result.status,
        "message": result.message,
        "files": result.files,
        "text": result.text,
        "full_output": result.full_output,
        "outputs": [{"size": len(t), "head": t[:20], "marker": _marker(t)} for t in shown],
    }


if __name__ == "__main__":
    print(json.dumps(asyncio.run(_child(json.loads(sys.argv[1])))))
