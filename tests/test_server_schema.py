"""schemathesis against /openapi.json, every phase and every check: 0 failures.

The checks hold each answer to the schema (status, content type, headers,
body, each server-sent event), each request the schema calls invalid to a
refusal and each valid one to an acceptance, undeclared methods to a 405,
requests without the token to a 401, and a deleted session to a 404 (except
the kernel of an agent's session, which a DELETE through the Jupyter API only
lets go of: ``data/schemathesis.toml``). So
the hand-written schema and the server cannot drift apart. Runs the
``schemathesis run`` command as a user would, against a real server.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from _serverproc import ServerProcess

EXAMPLES = 25  # per operation and phase; a fixed seed makes each run the same
CONFIG = Path(__file__).parent / "data" / "schemathesis.toml"


# Two minutes on an idle 2-core machine; over five (the suite's default limit) on one
# that runs the rest of the suite beside it, and more.
@pytest.mark.timeout(900)
def test_schemathesis_finds_nothing_with_every_check(tmp_path: Path) -> None:
    command = shutil.which("schemathesis") or shutil.which("st")
    if command is None:
        pytest.fail("schemathesis is not installed: pip install -e '.[test]'")
    # A short --max-timeout keeps every execution far below the response time
    # limit that --checks all turns on (given here generously: this is not a
    # benchmark, and CI shares two cores).
    server = ServerProcess(
        tmp_path / "work",
        *("--max-sessions", "5", "--max-body-mb", "1", "--max-timeout", "5"),
    )
    try:
        run = subprocess.run(
            [
                command,
                *("--config-file", str(CONFIG)),
                "run",
                f"{server.url}/openapi.json",
                # Every check is on by default. Not "--checks all": checks named on
                # the command line override data/schemathesis.toml's per-operation
                # exclusion (schemathesis 4.32), which then never applied.
                *("--header", f"Authorization: Bearer {server.token}"),
                *("--max-examples", str(EXAMPLES), "--seed", "1", "--workers", "1"),
                *("--max-response-time", "60", "--request-timeout", "120"),
                *("--suppress-health-check", "all"),
                "--no-color",
            ],
            capture_output=True,
            text=True,
            timeout=840,
            cwd=tmp_path,
        )
    finally:
        assert server.stop() == 0
    report = run.stdout[-20_000:] + run.stderr[-3_000:]
    assert run.returncode == 0, report  # any failure, or an error, is a non-zero exit
    assert "Traceback" not in server.log.read_text(), server.log.read_text()[-5_000:]
