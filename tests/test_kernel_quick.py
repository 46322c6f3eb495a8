"""The kernel skips per-execution work that changes nothing it sends (kernelexec/_kernel/quick.py).

Each change reaches into ipykernel's or IPython's internals: these tests run
again on the oldest ipykernel we support (tests/test_oldest_ipykernel.py), so
an upgrade that moves them fails here, not silently for users.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from kernelexec import AsyncSession
from kernelexec._kernel import quick

# The formats IPython's own path gives, next to the quick path's, for values of
# every plain type (and floats under %precision, which text/plain reads).
SAME_FORMATS = """\
shell = get_ipython()
display = shell.display_formatter
values = [0, -7, 10**40, 2.5, 1/3, 1+2j, True, False, 'text', 'a\\nb', 'x' * 5000, b'\\x00b']
def both():
    return [(display.format(v), type(display).format(display, v)) for v in values]
pairs = both()
shell.run_line_magic('precision', '3')
pairs += both()
shell.run_line_magic('precision', '')
print(len(pairs), all(quick == full for quick, full in pairs))
"""


async def test_every_change_applies_on_this_ipykernel(session: AsyncSession) -> None:
    result = await session.execute(
        "import sys\n"
        "print(sys.modules['kernelexec_kernel_quick'].install(get_ipython().kernel.parent))"
    )
    assert result.ok, result.text
    applied = result.stdout.strip()
    # and "modules" where the kernel came from a zygote (tests/test_zygote.py);
    # "one-shell" unless the kernel keeps subshells (tests/test_one_shell.py)
    assert applied in (
        "['log', 'signatures', 'plain-values', 'transform-once', 'one-shell', 'signal-wakeup', "
        "'interrupt-guard']",
        "['log', 'signatures', 'plain-values', 'transform-once', 'one-shell', 'signal-wakeup', "
        "'interrupt-guard', 'modules']",
    ), applied


async def test_an_interrupt_stops_an_awaiting_cell_at_once_and_keeps_the_state(
    tmp_path: Path,
) -> None:
    # The interrupt's handler ran only when the event loop next woke: a cell
    # awaiting two minutes outlived its timeout and the grace, and the kernel
    # was restarted, its variables lost.
    async with AsyncSession(tmp_path / "work", timeout=3) as session:
        assert (await session.execute("keep = 42")).ok
        result = await session.execute("import asyncio\nawait asyncio.sleep(120)")
        assert result.status == "timeout", result.text
        assert "restarted" not in result.text, result.text
        after = await session.execute("print(keep)")
        assert after.stdout == "42\n", after.text


async def test_plain_values_are_formatted_as_ipython_formats_them(session: AsyncSession) -> None:
    result = await session.execute(SAME_FORMATS)
    assert result.ok, result.text
    assert result.stdout.strip() == "24 True"
    assert (await session.execute("41 + 1")).text.strip() == "42"


async def test_a_printer_registered_for_a_plain_type_is_still_asked(session: AsyncSession) -> None:
    registered = await session.execute(
        "html = get_ipython().display_formatter.formatters['text/html']\n"
        "html.for_type(int, lambda n: f'<b>{n}</b>')"
    )
    assert registered.ok, registered.text
    result = await session.execute("7")
    assert [o["data"]["text/html"] for o in result.outputs if "text/html" in o.get("data", {})] == [
        "<b>7</b>"
    ]
    # A subclass is not the plain type: its own _repr_*_ is asked too.
    subclass = await session.execute(
        "html.pop(int)\n"
        "class Marked(str):\n"
        "    def _repr_markdown_(self):\n"
        "        return '**' + self + '**'\n"
        "Marked('m')"
    )
    markdown = [o["data"].get("text/markdown") for o in subclass.outputs if "data" in o]
    assert markdown == ["**m**"], subclass.outputs


COUNT_TRANSFORMS = """\
transforms = []
def counted(lines):
    transforms.append(''.join(lines))
    return lines
get_ipython().input_transformers_post.append(counted)
"""


async def test_a_cell_is_transformed_once(session: AsyncSession) -> None:
    # ipykernel transformed a cell and asked whether it must run async, then
    # the shell's run_cell did both again: twice IPython's transforms and a
    # compile of the whole cell (1.4 ms a 30-line cell). Counted by a
    # transformer of the code's own, which IPython runs at each transform.
    assert (await session.execute(COUNT_TRANSFORMS)).ok
    assert (await session.execute("before = len(transforms)")).ok
    assert (await session.execute("x = 20\nx + 1")).text.strip() == "21"
    # this cell's own transform comes before its code runs
    counted = await session.execute("len(transforms) - before, transforms[-2]")
    assert counted.text.strip() == "(2, 'x = 20\\nx + 1\\n')", counted.text


@pytest.mark.parametrize(
    ("cell", "shown"),
    [
        ("%precision 2\n1/3", "0.33"),  # a magic: IPython's transforms
        ("!echo hi", "hi"),  # the shell escape
        ("import asyncio\nawait asyncio.sleep(0)\n'awaited'", "'awaited'"),  # runs async
        ("def f(:\n    pass", "SyntaxError"),
    ],
)
async def test_each_kind_of_cell_runs_as_before(
    session: AsyncSession, cell: str, shown: str
) -> None:
    result = await session.execute(cell)
    assert shown in result.text, result.text


async def test_the_codes_own_transforms_are_answered_afresh(session: AsyncSession) -> None:
    # Outside ipykernel's execute, a second call for the same string is not
    # the first's answer: here autocall turns "g 3" into a call once g exists.
    result = await session.execute(
        "shell = get_ipython()\n"
        "shell.run_line_magic('autocall', '2')\n"
        "cell = 'g 3'\n"
        "first = shell.transform_cell(cell)\n"
        "def g(n):\n"
        "    return n * 2\n"
        "second = shell.transform_cell(cell)\n"
        "print(first.strip(), '|', second.strip())\n"
        "print(shell.run_cell(cell).result)"
    )
    assert result.ok, result.text
    assert "g 3 | g(3)" in result.stdout.splitlines(), result.text
    assert result.stdout.splitlines()[-1] == "6", result.text
    # and a cell of its own, transformed as the request's (a single line: autocall)
    autocalled = await session.execute("g 4")
    assert autocalled.text.split() == ["------>", "g(4)", "8"], autocalled.text
    # A transformer that raises is the cell's error, each time.
    broken = await session.execute(
        "def broken(lines):\n"
        "    if 'boom' in ''.join(lines):\n"
        "        raise ValueError('no')\n"
        "    return lines\n"
        "shell.input_transformers_post.append(broken)"
    )
    assert broken.ok, broken.text
    for _ in range(2):
        failed = await session.execute("'boom'")
        assert failed.status == "error" and "ValueError" in failed.text, failed.text
    assert (await session.execute("2 + 2")).text.strip() == "4"


def test_each_function_is_asked_its_own_signature() -> None:
    # ipykernel passes cell_id only to a run_cell_async that takes it: an
    # answer kept for the shell's own would break one an extension put in its place.
    from ipykernel import ipkernel

    own = ipkernel._accepts_parameters
    try:
        assert quick._kept_signatures()

        class Shell:
            async def wide(self, raw_cell, *, cell_id=None):  # type: ignore[no-untyped-def]
                return raw_cell

            async def narrow(self, raw_cell):  # type: ignore[no-untyped-def]
                return raw_cell

        shell, names = Shell(), ["cell_id", "cell_meta"]
        for _ in range(2):  # asked, then kept
            assert ipkernel._accepts_parameters(shell.wide, names) == {
                "cell_id": True,
                "cell_meta": False,
            }
            assert ipkernel._accepts_parameters(shell.narrow, names) == {
                "cell_id": False,
                "cell_meta": False,
            }
        # A caller changing the answer it got does not change the kept one.
        ipkernel._accepts_parameters(shell.narrow, names)["cell_id"] = True
        assert ipkernel._accepts_parameters(shell.narrow, names)["cell_id"] is False
    finally:
        ipkernel._accepts_parameters = own


async def test_the_kernel_builds_no_debug_records_nobody_asked_for(
    session: AsyncSession,
) -> None:
    result = await session.execute(
        "import logging\nprint(get_ipython().kernel.log.isEnabledFor(logging.DEBUG))"
    )
    assert result.stdout.strip() == "False", result.text


def test_a_log_whose_handler_asks_for_debug_keeps_it() -> None:
    log = logging.getLogger("kernelexec-test-quick-debug")
    handler = logging.StreamHandler()
    handler.setLevel(logging.DEBUG)
    log.addHandler(handler)
    log.setLevel(logging.DEBUG)
    try:
        assert quick._quiet_log(log)
        assert log.isEnabledFor(logging.DEBUG)
        handler.setLevel(logging.WARNING)
        assert quick._quiet_log(log)
        assert not log.isEnabledFor(logging.INFO) and log.isEnabledFor(logging.WARNING)
    finally:
        log.removeHandler(handler)


@pytest.mark.parametrize("hook", ["pre", "post"])
async def test_an_interrupt_outside_the_kernels_own_guard_does_not_end_it(
    session: AsyncSession, hook: str
) -> None:
    # ipykernel catches the KeyboardInterrupt of a SIGINT only between its two
    # hooks; one raised in either hook (a signal landing there: the host sends
    # one as a cell begins, which can be as a quick cell ends) stopped the
    # kernel's event loop, and the kernel ended with every variable.
    await session.execute("x = 1")
    land = (
        "k = get_ipython().kernel\n"
        f"_hook = k.{hook}_handler_hook\n"
        "def _interrupted():\n"
        f"    k.{hook}_handler_hook = _hook\n"
        # pre: the handler is set, then the signal comes; post: it comes first
        + ("    _hook()\n" if hook == "pre" else "")
        + "    raise KeyboardInterrupt\n"
        f"k.{hook}_handler_hook = _interrupted"
    )
    assert (await session.execute(land)).ok
    landed = await session.execute("print('ran')")
    assert landed.status != "kernel_died" and not landed.restarted, landed
    if hook == "pre":  # before the code: no reply came
        assert landed.error is not None and landed.error.ename == "ReplyMissing", landed
    else:  # after it: the code ran and replied
        assert (landed.status, landed.stdout) == ("ok", "ran\n"), landed
    # SIGINT is ignored between requests again: an interrupt now would have
    # raised in the kernel's event loop and ended it too.
    await session.interrupt()
    after = await session.execute("print(x + 1)")
    assert (after.status, after.stdout, after.restarted) == ("ok", "2\n", False), after
