"""Background executions from the synchronous ``Session``: ``execute(..., background=True)``."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kernelexec import ExecutionEvent, Session, SyncExecution

COUNT = "import time\nfor i in range(1, 6):\n    print(i, flush=True)\n    time.sleep(0.3)\n'end'"


@pytest.fixture
def session(tmp_path: Path) -> Iterator[Session]:
    with Session(tmp_path / "work", timeout=120) as s:
        yield s


def _text(events: list[ExecutionEvent]) -> str:
    return "".join(str(e.data.get("text", "")) for e in events if e.kind == "output")


def test_start_then_wait(session: Session) -> None:
    execution = session.execute(COUNT, background=True)
    assert isinstance(execution, SyncExecution)
    assert execution.state in ("queued", "running") and not execution.done()
    assert execution.wait(0.01) is None or execution.done()  # a short wait: None, no exception
    result = execution.wait(60)
    assert result is not None and result.ok and result.stdout == "1\n2\n3\n4\n5\n"
    assert execution.done() and execution.state == "done" and execution.result is result
    assert execution.cancel() is False
    assert session.execute("i").text.strip() == "5"  # the session goes on from its state


def test_events_as_a_plain_iterator_from_an_offset(session: Session) -> None:
    execution = session.execute(COUNT, background=True)
    live = list(execution.events())  # follows it to its end
    assert execution.done()
    assert _text(live) == "1\n2\n3\n4\n5\n"
    assert [e.offset for e in live] == list(range(len(live)))
    assert list(execution.events(offset=live[1].offset + 1)) == live[2:]
    assert execution.read(len(live)) == []  # after the end: no wait, nothing more


def test_events_while_it_runs_come_before_the_end(session: Session) -> None:
    execution = session.execute(COUNT, background=True)
    first = next(iter(execution.events()))
    assert not execution.done()  # the first output came while it ran
    assert _text([first]) == "1\n"
    assert execution.wait(60) is not None


def test_cancel_a_sleeping_cell_from_another_thread(session: Session) -> None:
    session.execute("kept = 7")
    execution = session.execute(
        "import time\nprint('in', flush=True)\ntime.sleep(60)", background=True
    )
    next(iter(execution.events()))  # it has printed: it is in its sleep
    began = time.monotonic()
    cancelled: list[bool] = []
    # Cancelled from a thread of the caller's that is not the one that started it.
    canceller = threading.Thread(target=lambda: cancelled.append(execution.cancel()))
    canceller.start()
    canceller.join(30)
    assert cancelled == [True]
    result = execution.wait(30)
    assert result is not None and result.status == "cancelled" and result.stdout == "in\n"
    assert time.monotonic() - began < 50  # not the 60 s sleep
    assert session.execute("kept").text.strip() == "7"  # interrupted, not restarted
