from __future__ import annotations

import asyncio
import inspect
import json
import os
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import _tempchains
import _testvenvs
import pytest
from servers import Gateway

from kernelexec import AsyncSession, ExecutionResult, Session

DATA = Path(__file__).parent / "data"
# Seconds within which "at once" must happen: far below the 30 s and more
# that a hang would take, with room for a loaded machine. The real latencies
# are measured by `python -m bench`, not asserted here.
SOON = 10.0
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
_skipped: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{_testvenvs.MARKER}(name): needs a venv the suite makes before any test runs "
        "(tests/_testvenvs.py)",
    )
    config.addinivalue_line(
        "markers",
        "uncontained: runs its kernels uncontained (KERNELEXEC_SANDBOX=0, a server it starts "
        "too): for what only an uncontained kernel does, such as a process fork",
    )


def pytest_report_header(config: pytest.Config) -> str | None:
    missing = _testvenvs.missing(set(_testvenvs.NAMES))
    if not missing:
        return None
    return (
        f"test venvs not made yet: {', '.join(missing)}; made before the first test that needs "
        f"them (a few minutes, once) in {_testvenvs.CACHE}"
    )


def pytest_collection_finish(session: pytest.Session) -> None:
    # Here, before any test runs and outside every test's time limit; in each
    # pytest-xdist worker (each collects every test), one makes a venv while
    # the others wait on its lock and then find it made.
    if session.config.option.collectonly:
        return
    wanted = {
        str(mark.args[0]) for item in session.items for mark in item.iter_markers(_testvenvs.MARKER)
    }
    workerinput = getattr(session.config, "workerinput", None)
    run_id = str(workerinput["testrunuid"]) if workerinput else uuid.uuid4().hex
    builders = [
        threading.Thread(target=_testvenvs.build, args=(name, run_id))
        for name in _testvenvs.missing(wanted)
    ]
    for builder in builders:
        builder.start()
    for builder in builders:
        builder.join()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Iterator[None] | Any:
    # A failed test that used a gateway carries the end of that gateway's log:
    # what the gateway did is often the cause, and its process and files are
    # gone when CI prints the failure.
    report = yield
    if report.failed:
        for name, value in getattr(item, "funcargs", {}).items():
            log = getattr(value, "log", None)
            if isinstance(value, Gateway) and isinstance(log, Path) and log.is_file():
                tail = log.read_text(errors="replace")[-6000:]
                report.sections.append((f"{name}: the end of {log.name}", tail))
    return report


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped and not hasattr(report, "wasxfail"):
        _skipped.append(report.nodeid)


@pytest.hookimpl(tryfirst=True)  # before pytest removes its older temp dirs
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if hasattr(session.config, "workerinput"):
        return  # the controller's, once every worker is done
    _tempchains.remove_deep_chains(session.config)
    # In CI every real component is there, so a skip means one was not tested.
    if IN_CI and _skipped:
        print(f"\nCI=true: {len(_skipped)} skipped tests count as failures:")
        for nodeid in _skipped:
            print(f"  {nodeid}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(autouse=True)
def _uncontained(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    if request.node.get_closest_marker("uncontained") is not None:
        monkeypatch.setenv("KERNELEXEC_SANDBOX", "0")


@pytest.fixture
async def session(tmp_path: Path) -> AsyncIterator[AsyncSession]:
    async with AsyncSession(tmp_path / "work", timeout=30) as s:
        yield s


_WARMED: set[str] = set()


def warm_zygote(
    preload: str | None = None,
    *,
    again: bool = False,
    within: float = 90.0,
    **options: Any,
) -> None:
    """Returns once a new session (of the default configuration, or this preload) is forked.

    A configuration's first kernel starts the usual way while its zygote
    starts; tests of forked kernels need the zygote ready first. ``options``
    (``env``, ``sandbox``...) go to each ``Session``: a zygote is per environment.
    """
    key = repr((preload or "", sorted(options.items())))
    if key in _WARMED and not again:
        return
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        with Session(preload=preload, **options) as session:
            if session._async._backend.forked:  # type: ignore[attr-defined]
                _WARMED.add(key)
                return
        time.sleep(0.2)
    raise AssertionError(f"no session was forked from a zygote within {within:g} s")


@pytest.fixture(params=["forked", "spawned"])
def kernel_start(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Runs a test with kernels forked from a zygote, then with kernels spawned as before.

    Modules whose every test must hold for both say
    ``pytestmark = pytest.mark.usefixtures("kernel_start")``. A server the
    test starts inherits the choice through ``KERNELEXEC_ZYGOTE``.
    """
    if request.param == "spawned":
        monkeypatch.setenv("KERNELEXEC_ZYGOTE", "0")
    else:
        monkeypatch.setenv("KERNELEXEC_ZYGOTE", "1")
        warm_zygote()
    return str(request.param)


@pytest.fixture(scope="session")
def recorded() -> dict[str, list[dict[str, Any]]]:
    return json.loads((DATA / "messages.json").read_text())


async def until(condition: Callable[[], object | Awaitable[object]], within: float = 60.0) -> bool:
    """Polls ``condition`` (a function, or an async one) until it holds (True) or
    ``within`` seconds pass (False).

    For a test that waits for another process, thread or kernel to act: a fixed
    sleep is overrun on a loaded 2-core CI machine, and this returns as soon as
    the thing has happened. The async twin of ``_serverproc.wait_for``.
    """
    deadline = time.monotonic() + within
    while True:
        held = condition()
        if inspect.isawaitable(held):
            held = await held
        if held:
            return True
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.05)


async def once_it_says(
    session: AsyncSession, code: str, within: float = 60.0
) -> asyncio.Task[ExecutionResult]:
    """``session.execute(code)`` as a task, returned once the code has output something.

    For a test that acts on a running cell (interrupts, cuts, forks it): the
    cell prints first, and the test acts then, not after a fixed time that a
    loaded machine can pass before the cell even starts.
    """
    said = asyncio.Event()
    task = asyncio.create_task(session.execute(code, on_output=lambda _: said.set()))
    await asyncio.wait_for(said.wait(), within)
    return task


def process_gone(pid: int) -> bool:
    """True once ``pid`` no longer runs; a zombie nobody reaped counts as gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):  # ESRCH: it ended as it was read
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def rss_mb(pid: int | None = None) -> float:
    status = Path(f"/proc/{pid or os.getpid()}/status").read_text()
    return int(status.split("VmRSS:")[1].split()[0]) / 1024
