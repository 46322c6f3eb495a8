"""schemathesis against /openapi.json: generated requests, bounded, and never a 5xx.

Each answer is also checked against the schema (status, content type, body),
which keeps the hand-written schema honest.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from _serverproc import ServerProcess
from hypothesis import HealthCheck, settings


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = ServerProcess(
        tmp_path_factory.mktemp("schema") / "work",
        "--max-sessions",
        "3",
        "--max-body-mb",
        "1",
        "--max-timeout",
        "30",
    )
    yield proc
    assert proc.stop() == 0


@pytest.fixture(scope="module")
def api_schema(server: ServerProcess) -> Any:
    return schemathesis.openapi.from_url(
        f"{server.url}/openapi.json", headers=server.auth, timeout=30
    )


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_generated_requests_never_get_a_5xx(case: Any, server: ServerProcess) -> None:
    case.call_and_validate(headers=server.auth, timeout=120)
