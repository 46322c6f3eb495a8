"""What fork and containment do to a kernel using a real GPU: run by hand on a machine with one.

Not collected by pytest (CI machines have no GPU). On a machine with an
NVIDIA GPU and torch in this interpreter::

    python tests/gpu_check.py [OUT_DIR]

Each step runs real kernels and records what it saw; the claims checked are
the documented ones (docs/features/fork.md, docs/features/containment.md):

1. a kernel that initialized CUDA is forked by checkpoint, with the reason,
   and the copy holds the tensor on the GPU and can compute with it;
2. ``fork(method="process")`` of it makes a copy whose GPU calls fail, and
   ``left_behind`` says so;
3. a kernel that imported torch without touching the GPU is forked as a
   process, and the copy can use the GPU;
4. a live GNU OpenMP pool (torch on the CPU) makes the fork a checkpoint;
5. a contained kernel has no GPU and a failed GPU call's result names
   ``Sandbox(gpus=True)``; with ``gpus=True`` it computes on the GPU, and its
   fork (checkpoint and restore) carries the tensor.

It prints one JSON object (also written to OUT_DIR/gpu_check.json) and
exits 1 if a claim did not hold.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

from kernelexec import AsyncSession, Sandbox
from kernelexec._containment._platform import support
from kernelexec._containment._sandbox import gpu_devices

CUDA_TENSOR = (
    "import torch\n"
    "x = torch.arange(6.0, device='cuda')\n"
    "print(float(x.sum()), torch.cuda.get_device_name())"
)
USE_X = "print(float((x * 2).sum()), str(x.device))"
NEW_TENSOR = "import torch\nprint(float(torch.ones(3, device='cuda').sum()))"
OPENMP = (
    "import torch\n"
    "torch.set_num_threads(4)\n"
    "t = torch.randn(4_000_000)\n"
    "print(float(t.exp().sum()) > 0)\n"
    "print([l.split()[-1] for l in open('/proc/self/maps') if 'gomp' in l][:1])"
)

# A program the kernel starts: its threads are not the kernel's (documented, not claimed).
CHILD = (
    "import subprocess, sys\n"
    "code = \"import ctypes; print(ctypes.CDLL('libcuda.so.1').cuInit(0))\"\n"
    "print(subprocess.run([sys.executable, '-c', code], capture_output=True, text=True).stdout)"
)

seen: dict[str, Any] = {}
claims: dict[str, bool] = {}


def said(result: Any) -> dict[str, Any]:
    error = result.error
    return {
        "status": result.status,
        "stdout": result.stdout[-800:],
        "error": None if error is None else f"{error.ename}: {error.evalue}"[-800:],
        "message": result.message,
    }


def report(copy: AsyncSession) -> dict[str, Any]:
    found = copy.fork_report
    assert found is not None
    return {"method": found.method, "reason": found.reason, "left_behind": list(found.left_behind)}


async def step(name: str, body: Any) -> None:
    started = time.monotonic()
    try:
        await asyncio.wait_for(body(), 300)
    except BaseException:  # a step that breaks is recorded; the others still run
        seen[f"{name}.crash"] = traceback.format_exc()[-3000:]
    seen[f"{name}.seconds"] = round(time.monotonic() - started, 2)


async def uncontained_cuda(root: Path) -> None:
    async with AsyncSession(root / "cuda", sandbox=False, timeout=240) as parent:
        seen["cuda.parent"] = said(await parent.execute(CUDA_TENSOR))
        started = time.monotonic()
        async with await parent.fork(root / "cuda-copy") as copy:
            seen["cuda.fork_seconds"] = round(time.monotonic() - started, 2)
            seen["cuda.fork"] = report(copy)
            used = said(await copy.execute(USE_X))
            seen["cuda.copy"] = used
            claims["1 cuda kernel forked by checkpoint, copy computes on the GPU"] = (
                seen["cuda.fork"]["method"] == "checkpoint"
                and "GPU" in (seen["cuda.fork"]["reason"] or "")
                and used["stdout"].strip() == "30.0 cuda:0"
            )
        async with await parent.fork(root / "cuda-forced", method="process") as forced:
            seen["cuda.forced"] = report(forced)
            broken = said(await forced.execute(NEW_TENSOR))
            seen["cuda.forced_copy"] = broken
            claims["2 forced process fork: GPU calls fail, left_behind says so"] = broken[
                "status"
            ] == "error" and any("GPU" in item for item in seen["cuda.forced"]["left_behind"])
        seen["cuda.parent_after"] = said(await parent.execute(USE_X))


async def imported_only(root: Path) -> None:
    async with AsyncSession(root / "import", sandbox=False, timeout=240) as parent:
        seen["import.parent"] = said(await parent.execute("import torch; print(torch.__version__)"))
        async with await parent.fork(root / "import-copy") as copy:
            seen["import.fork"] = report(copy)
            used = said(await copy.execute(NEW_TENSOR))
            seen["import.copy"] = used
            claims["3 torch imported, GPU untouched: process fork, copy uses the GPU"] = (
                seen["import.fork"]["method"] == "process" and used["stdout"].strip() == "3.0"
            )


async def openmp(root: Path) -> None:
    async with AsyncSession(root / "omp", sandbox=False, timeout=240) as parent:
        seen["omp.parent"] = said(await parent.execute(OPENMP))
        async with await parent.fork(root / "omp-copy") as copy:
            seen["omp.fork"] = report(copy)
            seen["omp.copy"] = said(await copy.execute("print(float(t.exp().sum()) > 0)"))
            claims["4 live OpenMP pool: fork by checkpoint"] = (
                seen["omp.fork"]["method"] == "checkpoint"
                and seen["omp.copy"]["stdout"].strip() == "True"
            )


async def contained(root: Path) -> None:
    seen["contain.support"] = support().ok or support().why_not()
    if support().ok is not True:
        return
    async with AsyncSession(root / "boxed", sandbox=True, timeout=240) as boxed:
        seen["contain.default.available"] = said(
            await boxed.execute("import torch; print(torch.cuda.is_available())")
        )
        failed = said(await boxed.execute(NEW_TENSOR))
        seen["contain.default.tensor"] = failed
        claims["5a contained: no GPU, the result names Sandbox(gpus=True)"] = failed[
            "status"
        ] == "error" and "Sandbox(gpus=True)" in (failed["message"] or "")
    async with AsyncSession(root / "gpus", sandbox=Sandbox(gpus=True), timeout=240) as given:
        used = said(await given.execute(CUDA_TENSOR))
        seen["contain.gpus.tensor"] = used
        async with await given.fork(root / "gpus-copy") as copy:
            seen["contain.gpus.fork"] = report(copy)
            seen["contain.gpus.copy"] = said(await copy.execute(USE_X))
        child = said(await given.execute(CHILD))
        seen["contain.gpus.child_process"] = child
        escape = said(await given.execute("print(open('/etc/shadow').read()[:3])"))
        seen["contain.gpus.shadow"] = escape
        claims["5b Sandbox(gpus=True): computes on the GPU, fork carries the tensor"] = (
            used["status"] == "ok"
            and seen["contain.gpus.copy"]["stdout"].strip() == "30.0 cuda:0"
            and escape["status"] == "error"
        )


async def main(out: Path) -> int:
    seen["devices"] = gpu_devices()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for name, body in (
            ("cuda", uncontained_cuda),
            ("import", imported_only),
            ("omp", openmp),
            ("contain", contained),
        ):
            await step(name, lambda body=body: body(root))
    seen["claims"] = claims
    text = json.dumps(seen, indent=1, default=str)
    print(text)
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_check.json").write_text(text)
    expected = 6
    return 0 if len(claims) == expected and all(claims.values()) else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main(Path(sys.argv[1] if len(sys.argv) > 1 else "."))))
