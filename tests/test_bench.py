"""The benchmark harness still measures what it claims (a smoke run, no timing claims)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent


@pytest.mark.parametrize(
    ("impl", "scenario"),
    [("kernelexec", "roundtrip"), ("kernelexec-pooled", "ready"), ("raw", "roundtrip")],
)
def test_worker_reports_samples(impl: str, scenario: str) -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "worker.py"), impl, scenario, "3"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stderr
    line = next(x for x in proc.stdout.splitlines() if x.startswith("BENCH-RESULT "))
    samples = json.loads(line.split(" ", 1)[1])["samples"]
    assert len(samples) == 3 and all(s > 0 for s in samples)
