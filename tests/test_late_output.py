"""Output belongs to the execution that produced it (issue 14, item 3).

A thread or a background process started by one cell keeps writing while
the next cells run; none of it may appear in their results. kernelexec sends
such output under the parent header of the cell that started the writer, so
a later result (which keeps only its own request's messages) never sees it.
Each later cell checks that the writer really wrote while it ran, so a
writer that stopped early cannot make a test pass.
"""

from __future__ import annotations

import pytest

from kernelexec import AsyncSession, ExecutionResult

LATER_CELLS = 3
# The later cells: wait while the writer writes, then say whether it did. They wait
# until it has (a shell loop on a loaded machine once wrote nothing in a fixed 0.3 s),
# a minute at most: a writer that stopped says "progressed False".
LATER = """\
import time
before, until = ticks(), time.monotonic() + 60
while ticks() <= before + 2 and time.monotonic() < until:
    time.sleep(0.05)
print('progressed', ticks() > before + 2)
"""
ONLY_OWN_OUTPUT = [{"output_type": "stream", "name": "stdout", "text": "progressed True\n"}]

THREAD_PRINTS = """\
import sys, threading, time
count = [0]
stop = threading.Event()
def chatter():
    while not stop.is_set():
        count[0] += 1
        print("late thread line", count[0])
        print("late thread error", count[0], file=sys.stderr)
        time.sleep(0.01)
threading.Thread(target=chatter, daemon=True).start()
ticks = lambda: count[0]
"""

THREAD_DISPLAYS = """\
import threading, time
count = [0]
stop = threading.Event()
def chatter():
    while not stop.is_set():
        count[0] += 1
        display({"text/plain": f"late display {count[0]}"}, raw=True)
        time.sleep(0.01)
threading.Thread(target=chatter, daemon=True).start()
ticks = lambda: count[0]
"""

# A thread started by a thread the cell started: the grandchild is the cell's too.
NESTED_THREAD = """\
import threading, time
count = [0]
stop = threading.Event()
def chatter():
    while not stop.is_set():
        count[0] += 1
        print("late nested line", count[0])
        time.sleep(0.01)
threading.Thread(target=lambda: threading.Thread(target=chatter, daemon=True).start()).start()
ticks = lambda: count[0]
"""

POPEN = """\
import os, subprocess
writer = subprocess.Popen(
    'i=0; while [ ! -e stop ]; do i=$((i+1)); echo late popen $i; echo late popen err $i >&2;'
    ' echo $i > ticks.new; mv ticks.new ticks; sleep 0.01; done',
    shell=True,
)
ticks = lambda: int(open('ticks').read().strip() or 0) if os.path.exists('ticks') else 0
"""

OS_SYSTEM = """\
import os
os.system(
    '(i=0; while [ ! -e stop ]; do i=$((i+1)); echo late system $i;'
    ' echo $i > ticks.new; mv ticks.new ticks; sleep 0.01; done) &'
)
ticks = lambda: int(open('ticks').read().strip() or 0) if os.path.exists('ticks') else 0
"""

STOP_THREAD = "stop.set()"
STOP_PROCESS = "open('stop', 'w').close()"


async def _later_results(session: AsyncSession, start: str) -> list[ExecutionResult]:
    first = await session.execute(start)
    assert first.ok, first.text
    return [await session.execute(LATER) for _ in range(LATER_CELLS)]


@pytest.mark.parametrize(
    ("start", "stop"),
    [
        (THREAD_PRINTS, STOP_THREAD),
        (THREAD_DISPLAYS, STOP_THREAD),
        (NESTED_THREAD, STOP_THREAD),
        (POPEN, STOP_PROCESS),
        (OS_SYSTEM, STOP_PROCESS),
    ],
    ids=["thread-print", "thread-display", "nested-thread", "popen", "os-system"],
)
async def test_a_writer_started_by_an_earlier_cell_never_reaches_a_later_result(
    session: AsyncSession, start: str, stop: str
) -> None:
    try:
        later = await _later_results(session, start)
    finally:
        await session.execute(stop)
    for result in later:
        assert result.outputs == ONLY_OWN_OUTPUT, result.outputs


async def test_foreground_processes_output_arrives_in_their_own_cell_in_order(
    session: AsyncSession,
) -> None:
    result = await session.execute(
        "import os, subprocess\n"
        "os.system('echo fg system')\n"
        "subprocess.run(['echo', 'fg run'])\n"
        "subprocess.run('echo fg error >&2', shell=True)\n"
        "p = subprocess.Popen('sleep 0.2; echo fg popen', shell=True); p.wait()\n"
        "print('after')\n"
    )
    # Each stream keeps its order, and what the processes wrote comes before the
    # print after them. Which of two processes' fd 1 and fd 2 writes came first
    # is not known: they are two pipes (stock ipykernel's are too).
    assert result.stdout == "fg system\nfg run\nfg popen\nafter\n", result.outputs
    assert result.stderr == "fg error\n", result.outputs
    assert result.outputs[-1]["name"] == "stdout" and result.outputs[-1]["text"].endswith("after\n")


async def test_output_a_background_process_writes_before_the_cell_ends_stays_in_it(
    session: AsyncSession,
) -> None:
    # Started in the background, but it writes while its cell still runs: the cell
    # waits until it has (a fixed 0.5 s can run out first on a loaded machine).
    result = await session.execute(
        "import os, time\nos.system('(echo bg done; touch written) &')\n"
        "until = time.monotonic() + 60\n"
        "while not os.path.exists('written') and time.monotonic() < until:\n"
        "    time.sleep(0.05)\n"
        "print('end')"
    )
    assert result.stdout == "bg done\nend\n", result.outputs


async def test_a_thread_pool_task_belongs_to_the_cell_that_submitted_it(
    session: AsyncSession,
) -> None:
    # The pool's thread is started by the first cell; the task is the second's.
    first = await session.execute(
        "from concurrent.futures import ThreadPoolExecutor\n"
        "pool = ThreadPoolExecutor(1)\npool.submit(print, 'first task').result()"
    )
    assert first.stdout == "first task\n"
    second = await session.execute("pool.submit(print, 'second task').result(); pool.shutdown()")
    assert second.stdout == "second task\n"


async def test_a_cell_that_closes_its_own_stdout_does_not_break_the_next(
    session: AsyncSession,
) -> None:
    closed = await session.execute("import os; os.close(1); os.close(2); print('python still')")
    assert closed.stdout == "python still\n"
    after = await session.execute("import os; os.system('echo shell again'); print('and python')")
    assert after.stdout == "shell again\nand python\n"
