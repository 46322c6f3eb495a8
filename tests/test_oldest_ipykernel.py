"""The kernel-side tests again, on the oldest ipykernel pyproject.toml allows.

kernelexec/_kernel/streams.py reaches into ipykernel's private parts, so the
tests that check what a kernel sends run once more with the test process, and
so every kernel it starts, on a Python whose ipykernel is the lower bound
(the suite makes that venv before the tests run: tests/_testvenvs.py).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import _testvenvs
import pytest
from servers import unavailable

ROOT = Path(__file__).parent.parent
KERNEL_SIDE_TESTS = [
    "tests/test_session.py",
    "tests/test_reducer.py",
    "tests/test_fidelity.py",
    "tests/test_late_output.py",
    "tests/test_kernel_quick.py",
    "tests/test_made_shell.py",
    "tests/test_one_shell.py",
]


@pytest.mark.timeout(1500)
@pytest.mark.test_venv("oldest-ipykernel")
def test_the_kernel_side_tests_pass_on_the_oldest_ipykernel() -> None:
    problem = _testvenvs.problem("oldest-ipykernel")
    if problem is not None:
        unavailable(f"no Python with the oldest ipykernel: {problem}")
    python = str(_testvenvs.oldest_ipykernel_python())
    version = "import ipykernel; print(ipykernel.__version__)"
    found = subprocess.run([python, "-c", version], capture_output=True, text=True, timeout=120)
    assert found.stdout.strip() == _testvenvs.oldest_ipykernel(), found.stderr[-2000:]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    done = subprocess.run(
        [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *KERNEL_SIDE_TESTS],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1400,
    )
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and " skipped" not in done.stdout, done.stdout[-2000:]
