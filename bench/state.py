"""Fork and checkpoint (issue #15): ``python state.py IMPL SCENARIO N``, one JSON object out.

Scenarios:

- ``fork``, ``fork-1gb``: a parent session holding the data stack and a small
  DataFrame (and, for ``fork-1gb``, 1 GiB of numpy data); each sample is the
  time from asking for a copy of that state to the copy's first result
  (``df.shape``), and the copy's private memory (USS of its process tree) just
  after. kernelexec: ``session.fork()``. raw: what an agent does without fork,
  a new jupyter_client kernel re-running the parent's code.
- ``checkpoint``: a namespace holding a 100 MB DataFrame; each sample is
  ``checkpoint()`` and then ``AsyncSession.restore()`` up to the restored
  kernel's first result. raw: ``df.to_pickle`` in the kernel, a new kernel,
  ``pandas.read_pickle``.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

from worker import Raw, process_tree, rollup, run_script

STACK = "import numpy, pandas\ndf = pandas.DataFrame({'a': range(1000)})"
ONE_GIB = "big = numpy.ones(128 * 1024 * 1024)"  # 1 GiB of float64, every page touched
FRAME_100MB = "import numpy, pandas\nframe = pandas.DataFrame(numpy.random.rand(1_310_720, 10))"
FRAME_MB = 1_310_720 * 10 * 8 / 1e6


async def fork_kernelexec(root: Path, n: int, big: bool) -> dict[str, Any]:
    from kernelexec import AsyncSession

    times, private = [], []
    # A process fork: an uncontained parent (a contained one is checkpointed:
    # bench/contained.py times that).
    async with AsyncSession(root / "parent", timeout=600, sandbox=False) as parent:
        await parent.execute(STACK + ("\n" + ONE_GIB if big else ""))
        for i in range(n):
            started = time.perf_counter()
            child = await parent.fork(root / f"fork-{i}")
            answer = await child.execute("df.shape")
            times.append(time.perf_counter() - started)
            assert answer.status == "ok", answer.text
            supervisor = child._backend._process.pid  # type: ignore[attr-defined]
            private.append(rollup(process_tree(supervisor))["uss_mb"])
            await child.close()
    return {"samples": times, "private_mb": private}


async def fork_raw(root: Path, n: int, big: bool) -> dict[str, Any]:
    times = []
    for i in range(n):
        started = time.perf_counter()
        (root / f"raw-{i}").mkdir()
        kernel = Raw(root / f"raw-{i}")
        await kernel.open()
        await kernel.run(STACK + ("\n" + ONE_GIB if big else ""))
        await kernel.run("print(df.shape)")
        times.append(time.perf_counter() - started)
        await kernel.close()
    return {"samples": times}


async def checkpoint_kernelexec(root: Path, n: int) -> dict[str, Any]:
    from kernelexec import AsyncSession

    saves, restores = [], []
    async with AsyncSession(root / "parent", timeout=600) as parent:
        await parent.execute(FRAME_100MB)
        for i in range(n):
            started = time.perf_counter()
            checkpoint = await parent.checkpoint(root / f"checkpoint-{i}", files=False)
            saved = time.perf_counter()
            restored = await AsyncSession.restore(checkpoint, root / f"restored-{i}")
            answer = await restored.execute("frame.shape")
            restores.append(time.perf_counter() - saved)
            saves.append(saved - started)
            assert answer.status == "ok", answer.text
            await restored.close()
            shutil.rmtree(checkpoint.path, ignore_errors=True)
    return {"samples": saves, "restore": restores, "mb": FRAME_MB}


async def checkpoint_raw(root: Path, n: int) -> dict[str, Any]:
    saves, restores = [], []
    (root / "parent").mkdir()
    kernel = Raw(root / "parent")
    await kernel.open()
    await kernel.run(FRAME_100MB)
    try:
        for i in range(n):
            path = root / f"frame-{i}.pkl"
            started = time.perf_counter()
            await kernel.run(f"frame.to_pickle({str(path)!r})")
            saved = time.perf_counter()
            (root / f"restored-{i}").mkdir()
            other = Raw(root / f"restored-{i}")
            await other.open()
            await other.run(f"import pandas\nframe = pandas.read_pickle({str(path)!r})")
            await other.run("print(frame.shape)")
            restores.append(time.perf_counter() - saved)
            saves.append(saved - started)
            await other.close()
            path.unlink()
    finally:
        await kernel.close()
    return {"samples": saves, "restore": restores, "mb": FRAME_MB}


async def measure(impl: str, scenario: str, n: int, root: Path) -> dict[str, Any]:
    if scenario in ("fork", "fork-1gb"):
        big = scenario == "fork-1gb"
        if impl == "raw":
            return await fork_raw(root, n, big)
        return await fork_kernelexec(root, n, big)
    if scenario == "checkpoint":
        if impl == "raw":
            return await checkpoint_raw(root, n)
        return await checkpoint_kernelexec(root, n)
    raise SystemExit(f"unknown scenario {scenario!r}")


if __name__ == "__main__":
    run_script(measure, "kernelexec-bench-state-")
