from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from kernelexec import AsyncSession

DATA = Path(__file__).parent / "data"


@pytest.fixture
async def session(tmp_path: Path) -> AsyncIterator[AsyncSession]:
    async with AsyncSession(tmp_path / "work", timeout=30) as s:
        yield s


@pytest.fixture(scope="session")
def recorded() -> dict[str, list[dict[str, Any]]]:
    return json.loads((DATA / "messages.json").read_text())


def process_gone(pid: int) -> bool:
    """True once ``pid`` no longer runs; a zombie nobody reaped counts as gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def rss_mb(pid: int | None = None) -> float:
    status = Path(f"/proc/{pid or os.getpid()}/status").read_text()
    return int(status.split("VmRSS:")[1].split()[0]) / 1024
