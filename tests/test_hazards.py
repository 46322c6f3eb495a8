"""The kernel's fork-hazard detection (``_kernel/hazards.py``), on what processes show."""

from __future__ import annotations

import subprocess
import sys

import pytest

from kernelexec._kernel import hazards

# -- the detection code itself, on what a process using a GPU shows

# What /proc/self/fd of a process that initialized CUDA (torch, on an H100
# machine) points at, with the usual pipes and files around it.
CUDA_FDS = [
    "/dev/null",
    "pipe:[73121]",
    "/dev/nvidiactl",
    "/dev/nvidia-uvm",
    "/dev/nvidia0",
    "/dev/nvidia-uvm-tools",
    "socket:[73190]",
    "anon_inode:[eventfd]",
]


@pytest.mark.parametrize(
    ("targets", "modules", "expected"),
    [
        (CUDA_FDS, ["torch", "numpy"], "by torch"),
        (["/dev/kfd", "/dev/dri/renderD128"], ["jax"], "by jax"),  # ROCm
        (["/dev/nvidiactl"], [], "/dev/nvidiactl"),
        # torch imported, CUDA never initialized: no device node is open.
        (["/dev/null", "pipe:[1]", "/usr/lib/libcuda.so.1"], ["torch"], None),
        ([], [], None),
    ],
)
def test_cuda_detection(targets: list[str], modules: list[str], expected: str | None) -> None:
    found = hazards.cuda_hazard(targets, modules)
    if expected is None:
        assert found is None
    else:
        assert found is not None and found["blocks"] and found["kind"] == "cuda"
        assert expected in found["text"]


def test_openmp_detection() -> None:
    libgomp = [(0x7F0000000000, 0x7F0000040000)]
    inside, elsewhere = 0x7F0000001234, 0x7E0000000000
    assert hazards.openmp_hazard([], [inside, None]) is None  # not loaded
    assert hazards.openmp_hazard(libgomp, [elsewhere, elsewhere]) is None  # no pool
    found = hazards.openmp_hazard(libgomp, [elsewhere, inside, inside])
    assert found is not None and found["blocks"] and "2 threads" in found["text"]
    assert hazards.openmp_hazard(libgomp, [None]) is not None  # unknown: assumed
    # And this process, which has no GPU driver open: nothing.
    assert hazards.cuda_hazard(hazards._fds().values(), []) is None


def test_a_python_thread_running_is_never_a_pools() -> None:
    # Python's threads are skipped (a pool's are native): one hashing outside the GIL
    # reads "running" at every look, and counted as a pool thread of unknown place. In a
    # process of its own: this one may hold other libraries' threads, spinning.
    code = (
        "import hashlib, threading\n"
        "from kernelexec._kernel import hazards\n"
        "def hash_on(data=b'x' * 2**26):\n"
        "    while True:\n"
        "        hashlib.sha256(data)\n"
        "threading.Thread(target=hash_on, daemon=True).start()\n"
        "print(hazards._thread_places())\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "None" not in done.stdout, done
