"""Exact outputs under stress: ``python bench/fidelity.py IMPL fidelity N``.

Runs N executions over ``SESSIONS`` concurrent sessions while ``BURNERS``
CPU-bound processes (started and stopped here) compete for the cores, and
compares every execution's outputs with the exact list a notebook holds for
it: order, text, and one stream output where consecutive writes to one
stream belong together (a print split into two outputs is a difference).
The cells mix stdout, stderr, display_data, update_display_data,
clear_output (wait=True and not), ``\\r`` progress, an execute_result, an
error, and subprocesses writing to file descriptors 1 and 2.

Every other session shortens ipykernel's stream flush timer (0.2 s to
0.5 ms) and Python's thread switch interval (5 ms to 20 us): races between
the I/O thread and the cell that a fast cell rarely meets then happen in
most cells.

The expected list is what the code wrote, in the order it wrote it, stdout
and stderr included (a terminal's order); displays and clears come where the
code made them.

- ``kernelexec``: ``AsyncSession``; its ``result.outputs`` are compared.
- ``raw``: stock ipykernel through jupyter_client, each IOPub message of the
  execution folded as a notebook does: nbformat's ``output_from_msg``,
  consecutive stream text merged, ``clear_output`` (also ``wait=True``) and
  ``update_display_data`` applied.

``python -m bench --scenarios fidelity [--executions N]`` runs both and prints
their counts. Imports only the standard library at the top, like
``worker.py``: it runs under the benchmark's venv.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SESSIONS = 4
BURNERS = 2
# Every other session flushes its streams on a 0.5 ms timer instead of 0.2 s
# and passes the GIL between threads every 20 us instead of 5 ms, so the I/O
# thread's flushes land inside prints and next to displays many times a cell.
FAST_TIMERS = (
    "import sys\n"
    "sys.stdout.flush_interval = sys.stderr.flush_interval = 0.0005\n"
    "sys.setswitchinterval(0.00002)"
)
EXAMPLES = 10  # differing executions kept in full: the first of each kind in each case

Output = tuple[str, ...]


@dataclass(frozen=True)
class Case:
    """One execution's code and the outputs a notebook holds for it."""

    name: str
    code: str
    expected: list[Output]


def _stdout(text: str) -> Output:
    return ("stream", "stdout", text)


def _stderr(text: str) -> Output:
    return ("stream", "stderr", text)


def _display(text: str) -> Output:
    return ("display_data", text)


_MIX = """\
import sys
for i in range(6):
    print(f"s{K}.{i}")
    sys.stderr.write(f"e{K}.{i}\\n")
    display({"text/plain": f"d{K}.{i}"}, raw=True)
"""


def _mix(k: int) -> Case:
    expected: list[Output] = []
    for i in range(6):
        expected += [_stdout(f"s{k}.{i}\n"), _stderr(f"e{k}.{i}\n"), _display(f"d{k}.{i}")]
    return Case("mix", _MIX, expected)


_INTERLEAVE = """\
import sys
for i in range(4):
    print(f"o{K}.{i}")
    print(f"x{K}.{i}", file=sys.stderr)
print("end")
"""


def _interleave(k: int) -> Case:
    expected: list[Output] = []
    for i in range(4):
        expected += [_stdout(f"o{k}.{i}\n"), _stderr(f"x{k}.{i}\n")]
    return Case("interleave", _INTERLEAVE, [*expected, _stdout("end\n")])


_UPDATE = """\
h = display({"text/plain": f"u{K}a"}, raw=True, display_id=True)
print(f"b{K}")
h.update({"text/plain": f"u{K}b"}, raw=True)
print(f"c{K}")
display({"text/plain": f"v{K}"}, raw=True)
"""


def _update(k: int) -> Case:
    # The update changes the first display in place and adds no output, so
    # the two prints around it are one stream output.
    expected = [_display(f"u{k}b"), _stdout(f"b{k}\nc{k}\n"), _display(f"v{k}")]
    return Case("update", _UPDATE, expected)


_CLEAR_WAIT = """\
from IPython.display import clear_output
for i in range(3):
    clear_output(wait=True)
    print(f"p{K}.{i}")
    display({"text/plain": f"q{K}.{i}"}, raw=True)
"""


def _clear_wait(k: int) -> Case:
    return Case("clear_wait", _CLEAR_WAIT, [_stdout(f"p{k}.2\n"), _display(f"q{k}.2")])


_CLEAR_NOW = """\
from IPython.display import clear_output
print(f"gone{K}")
display({"text/plain": "gone"}, raw=True)
clear_output()
print(f"kept{K}")
"""


def _clear_now(k: int) -> Case:
    return Case("clear_now", _CLEAR_NOW, [_stdout(f"kept{k}\n")])


_PROGRESS = """\
for i in range(0, 101, 10):
    print(f"\\r{K}:{i}%", end="", flush=True)
print()
"""


def _progress(k: int) -> Case:
    text = "".join(f"\r{k}:{i}%" for i in range(0, 101, 10)) + "\n"
    return Case("progress", _PROGRESS, [_stdout(text)])


_ERROR = """\
import sys
print(f"before{K}")
display({"text/plain": f"shown{K}"}, raw=True)
sys.stderr.write(f"warn{K}\\n")
raise ValueError(f"boom{K}")
"""


def _error(k: int) -> Case:
    expected = [
        _stdout(f"before{k}\n"),
        _display(f"shown{k}"),
        _stderr(f"warn{k}\n"),
        ("error", "ValueError", f"boom{k}"),
    ]
    return Case("error", _ERROR, expected)


_RESULT = """\
print(f"r{K}")
K * 2
"""


def _result(k: int) -> Case:
    return Case("result", _RESULT, [_stdout(f"r{k}\n"), ("execute_result", repr(k * 2))])


_SHELL = """\
import os, sys
print(f"py{K}")
os.system(f"echo sh{K}")
print(f"pe{K}", file=sys.stderr)
os.system(f"echo se{K} >&2")
display({"text/plain": f"sd{K}"}, raw=True)
_ = os.system(f"echo last{K}")
"""


def _shell(k: int) -> Case:
    # What processes write to fd 1 and 2 takes its place among the prints
    # and displays, the end of the cell included.
    expected = [
        _stdout(f"py{k}\nsh{k}\n"),
        _stderr(f"pe{k}\nse{k}\n"),
        _display(f"sd{k}"),
        _stdout(f"last{k}\n"),
    ]
    return Case("shell", _SHELL, expected)


CASES: list[Callable[[int], Case]] = [
    _mix,
    _interleave,
    _update,
    _clear_wait,
    _clear_now,
    _progress,
    _error,
    _result,
    _shell,
]


def case(k: int) -> Case:
    """The k-th execution of the workload (each kind in turn, tokens unique to k)."""
    made = CASES[k % len(CASES)](k)
    return Case(made.name, f"K = {k}\n{made.code}", made.expected)


def normalize(outputs: list[dict[str, Any]]) -> list[Output]:
    """The parts of nbformat outputs the comparison looks at (a traceback's lines vary)."""
    normal: list[Output] = []
    for output in outputs:
        kind = output.get("output_type", "?")
        if kind == "stream":
            normal.append(("stream", output["name"], output["text"]))
        elif kind in ("display_data", "execute_result"):
            normal.append((kind, str(output.get("data", {}).get("text/plain", ""))))
        elif kind == "error":
            normal.append(("error", output["ename"], output["evalue"]))
        else:
            normal.append((kind,))
    return normal


def _merge_streams(outputs: list[Output]) -> list[Output]:
    merged: list[Output] = []
    for output in outputs:
        last = merged[-1] if merged else None
        if last is not None and output[0] == last[0] == "stream" and output[1] == last[1]:
            merged[-1] = ("stream", output[1], last[2] + output[2])
        else:
            merged.append(output)
    return merged


def difference(actual: list[Output], expected: list[Output]) -> str | None:
    """None when equal; else "split" (a stream cut in two), "order" or "content"."""
    if actual == expected:
        return None
    if _merge_streams(actual) == expected:
        return "split"

    def text(outputs: list[Output], name: str) -> str:
        return "".join(o[2] for o in outputs if o[0] == "stream" and o[1] == name)

    others = [o for o in actual if o[0] != "stream"]
    if (
        text(actual, "stdout") == text(expected, "stdout")
        and text(actual, "stderr") == text(expected, "stderr")
        and sorted(others) == sorted(o for o in expected if o[0] != "stream")
    ):
        return "order"
    return "content"


def notebook_fold(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One execution's IOPub messages as the outputs a notebook holds."""
    from nbformat.v4 import output_from_msg

    outputs: list[dict[str, Any]] = []
    by_display_id: dict[str, list[int]] = {}
    clear_pending = False
    for msg in messages:
        kind, content = msg["header"]["msg_type"], msg["content"]
        if kind == "clear_output":
            if content.get("wait"):
                clear_pending = True
            else:
                outputs.clear()
                by_display_id.clear()
            continue
        if kind == "update_display_data":
            updated = str((content.get("transient") or {}).get("display_id"))
            for index in by_display_id.get(updated, []):
                outputs[index]["data"] = content["data"]
            continue
        if kind not in ("stream", "display_data", "execute_result", "error"):
            continue
        if clear_pending:
            clear_pending = False
            outputs.clear()
            by_display_id.clear()
        output = dict(output_from_msg(msg))
        last = outputs[-1] if outputs else None
        if kind == "stream" and last and last["output_type"] == "stream":
            if last["name"] == output["name"]:
                last["text"] += output["text"]
                continue
        display_id = (content.get("transient") or {}).get("display_id")
        if kind == "display_data" and display_id:
            by_display_id.setdefault(display_id, []).append(len(outputs))
        outputs.append(output)
    return outputs


class Runner:
    """Runs code in one session and hands back its outputs as nbformat outputs."""

    async def open(self, work_dir: Path) -> None:
        raise NotImplementedError

    async def outputs(self, code: str) -> list[dict[str, Any]]:
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError


class KernelexecRunner(Runner):
    def __init__(self, python: str | None = None) -> None:
        self.python = python

    async def open(self, work_dir: Path) -> None:
        import kernelexec

        # Forked kernels are what kernelexec runs by default once a
        # configuration's zygote is up: measure those (the first kernels of a
        # configuration start cold while it imports).
        deadline = time.monotonic() + 120
        while True:
            self.session = kernelexec.AsyncSession(work_dir, python=self.python, timeout=120)
            await self.session.start()
            self.forked = bool(getattr(self.session._backend, "forked", False))
            if (
                self.forked
                or time.monotonic() > deadline
                or os.environ.get("KERNELEXEC_ZYGOTE") == "0"
            ):
                return
            await self.session.close()
            await asyncio.sleep(0.2)

    async def outputs(self, code: str) -> list[dict[str, Any]]:
        return list((await self.session.execute(code)).outputs)

    async def close(self) -> None:
        await self.session.close()


class RawRunner(Runner):
    """Stock ipykernel, read with jupyter_client as a notebook frontend reads it."""

    async def open(self, work_dir: Path) -> None:
        from jupyter_client.manager import AsyncKernelManager

        self.km = AsyncKernelManager(kernel_name="python3")
        # Its fd 1 and 2 (which ipykernel echoes what processes write to) are not ours.
        await self.km.start_kernel(
            cwd=str(work_dir), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        self.kc = self.km.client()
        self.kc.start_channels()
        await self.kc.wait_for_ready(timeout=60)

    async def outputs(self, code: str) -> list[dict[str, Any]]:
        msg_id = self.kc.execute(code)
        messages: list[dict[str, Any]] = []
        while True:
            msg = await self.kc.get_iopub_msg(timeout=120)
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                break
            messages.append(msg)
        while (await self.kc.get_shell_msg(timeout=120))["parent_header"].get("msg_id") != msg_id:
            pass
        return notebook_fold(messages)

    async def close(self) -> None:
        self.kc.stop_channels()
        await self.km.shutdown_kernel(now=True)


@dataclass
class Report:
    """What a run found: "kind/case" per differing execution, and a few in full."""

    executed: int = 0
    differences: list[str] = field(default_factory=list)
    examples: list[dict[str, Any]] = field(default_factory=list)
    runners: list[Any] = field(default_factory=list)  # the sessions it ran on

    def summary(self) -> str:
        kinds = Counter(self.differences)
        detail = ", ".join(f"{kind} {count:,}" for kind, count in sorted(kinds.items()))
        found = f"{len(self.differences):,} of {self.executed:,} executions differ"
        return f"{found} ({detail})" if detail else found


def burners(count: int = BURNERS) -> list[subprocess.Popen[bytes]]:
    """CPU-bound processes competing with the kernels; stop them with ``stop_burners``."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]


def stop_burners(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        proc.kill()
    for proc in procs:
        proc.wait()


async def run(
    make_runner: Callable[[], Runner],
    executions: int,
    root: Path,
    *,
    sessions: int = SESSIONS,
    burner_count: int = BURNERS,
) -> Report:
    """``executions`` cells over ``sessions`` concurrent sessions next to the burners."""
    report = Report()
    runners = report.runners = [make_runner() for _ in range(sessions)]
    for index, runner in enumerate(runners):
        work = root / f"s{index}"
        work.mkdir(parents=True, exist_ok=True)
        await runner.open(work)
        if index % 2:
            await runner.outputs(FAST_TIMERS)
    hot = burners(burner_count)
    try:

        async def drive(index: int, runner: Runner) -> None:
            for k in range(index, executions, sessions):
                made = case(k)
                actual = normalize(await runner.outputs(made.code))
                report.executed += 1
                kind = difference(actual, made.expected)
                if kind is None:
                    continue
                seen = f"{kind}/{made.name}"
                first = not any(
                    e["case"] == made.name and e["kind"] == kind for e in report.examples
                )
                if first and len(report.examples) < EXAMPLES:
                    report.examples.append(
                        {"case": made.name, "kind": kind, "got": actual, "expected": made.expected}
                    )
                report.differences.append(seen)

        await asyncio.gather(*(drive(i, r) for i, r in enumerate(runners)))
    finally:
        stop_burners(hot)
        await asyncio.gather(*(r.close() for r in runners), return_exceptions=True)
    return report


def table_value(result: dict[str, Any]) -> str:
    """The bench table's cell: a run's (or several rounds') differences."""
    report = Report(executed=sum(result["executed"]), differences=result["differences"])
    return report.summary()


RUNNERS: dict[str, Callable[[], Runner]] = {"kernelexec": KernelexecRunner, "raw": RawRunner}


def main() -> None:
    impl, _scenario, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with tempfile.TemporaryDirectory(prefix="kernelexec-fidelity-") as root:
        started = time.perf_counter()
        report = asyncio.run(run(RUNNERS[impl], n, Path(root)))
        elapsed = time.perf_counter() - started
    print(f"[fidelity] {impl}: {report.summary()} in {elapsed:.0f} s", file=sys.stderr)
    for example in report.examples:
        print(f"[fidelity] {impl} example: {json.dumps(example)}", file=sys.stderr)
    result = {
        "samples": [elapsed],
        "forked": [sum(bool(getattr(r, "forked", False)) for r in report.runners)],
        "executed": [report.executed],
        "differences": report.differences,
        "examples": report.examples,
    }
    print("BENCH-RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
