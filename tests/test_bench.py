"""The benchmark harness still measures what it claims (a smoke run, no timing claims)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).parent.parent
FLOOD_LINES = 100_000  # bench/worker.py's flood (not imported: bench/ is not on sys.path)


def worker(impl: str, scenario: str, n: int) -> dict[str, Any]:
    """What ``bench/worker.py`` reports, run as ``python -m bench`` runs it."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "worker.py"), impl, scenario, str(n)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stderr
    line = next(x for x in proc.stdout.splitlines() if x.startswith("BENCH-RESULT "))
    result: dict[str, Any] = json.loads(line.split(" ", 1)[1])
    return result


@pytest.mark.parametrize(
    ("impl", "scenario"),
    [("kernelexec", "roundtrip"), ("kernelexec-pooled", "ready"), ("raw", "roundtrip")],
)
def test_worker_reports_samples(impl: str, scenario: str) -> None:
    samples = worker(impl, scenario, 3)["samples"]
    assert len(samples) == 3 and all(s > 0 for s in samples)


@pytest.mark.parametrize("impl", ["kernelexec", "kernelexec-pooled"])
def test_a_flood_comes_back_whole(impl: str) -> None:
    # The bench once reported a pooled session's flood as lost (0 of 100,000
    # lines); the table shows "output lost" for any run that does not deliver.
    assert worker(impl, "flood", 1)["delivered_lines"] == FLOOD_LINES
