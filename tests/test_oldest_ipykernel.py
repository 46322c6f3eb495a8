"""The kernel-side tests again, on the oldest ipykernel pyproject.toml allows.

kernelexec/_kernel/streams.py reaches into ipykernel's private parts, so the
tests that check what a kernel sends run once more with the test process, and
so every kernel it starts, on a Python whose ipykernel is the lower bound
(``.ci/run`` makes that venv and names it in KERNELEXEC_TEST_OLD_IPYKERNEL_PYTHON).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from conftest import IN_CI

ROOT = Path(__file__).parent.parent
OLD_IPYKERNEL = os.environ.get("KERNELEXEC_TEST_OLD_IPYKERNEL_PYTHON")
KERNEL_SIDE_TESTS = [
    "tests/test_session.py",
    "tests/test_reducer.py",
    "tests/test_fidelity.py",
    "tests/test_late_output.py",
]


@pytest.mark.timeout(1500)
@pytest.mark.skipif(
    OLD_IPYKERNEL is None and not IN_CI,
    reason="set KERNELEXEC_TEST_OLD_IPYKERNEL_PYTHON to a Python with the oldest ipykernel",
)
def test_the_kernel_side_tests_pass_on_the_oldest_ipykernel() -> None:
    assert OLD_IPYKERNEL, "CI=true: KERNELEXEC_TEST_OLD_IPYKERNEL_PYTHON must be set (.ci/run)"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    done = subprocess.run(
        [OLD_IPYKERNEL, "-m", "pytest", "-q", "-p", "no:cacheprovider", *KERNEL_SIDE_TESTS],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1400,
    )
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and " skipped" not in done.stdout, done.stdout[-2000:]
