"""A kernel forked from a zygote takes the IPython shell the zygote made (_kernel/made.py).

Each test runs real kernels. What the made shell took from the zygote's process
(its folders, cwd, streams, logger, history's start) must be the kernel's own;
a kernel must answer as one that made its own shell; and a configuration that
differs from the zygote's (a config file edited since, a contained kernel's
own empty profile) must make the kernel build its own. This module runs again
on the oldest ipykernel we support (tests/test_oldest_ipykernel.py), whose
venv has the newest IPython: the internals made.py relies on are pinned on both.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path

import pytest
from conftest import warm_zygote

from kernelexec import AsyncSession

STATE = """\
import json, os, sys
made = sys.modules['kernelexec_kernel_made']
shell = get_ipython()
kernel = shell.kernel
info = shell.history_manager.get_session_info()
print(json.dumps({
    'taken': made.taken,
    'parsed': made.parsed,
    'kernel': kernel is kernel.parent.kernel and shell.parent is kernel,
    'log': shell.log is kernel.log,
    'profile': shell.profile_dir.location,
    'ipython_dir': shell.ipython_dir,
    'dh': [str(p) for p in _dh],
    'starting_dir': shell.starting_dir,
    'stdout': shell._orig_sys_module_state['stdout'] is sys.stdout,
    'history_started': info[1].timestamp(),
    'env_ipython_dir': os.environ.get('IPYTHONDIR'),
    'cwd': os.getcwd(),
}))
"""


@pytest.fixture(autouse=True)
def _zygote_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERNELEXEC_ZYGOTE", "1")


async def state(session: AsyncSession) -> dict[str, object]:
    result = await session.execute(STATE)
    assert result.status == "ok", result.text
    found: dict[str, object] = json.loads(result.stdout)
    return found


async def forked(path: Path, **options: object) -> AsyncSession:
    session = AsyncSession(path, timeout=30, **options)  # type: ignore[arg-type]
    await session.start()
    assert session._backend.forked, "expected a kernel forked from the zygote"  # type: ignore[attr-defined]
    return session


@pytest.mark.parametrize("contained", [True, False], ids=["contained", "uncontained"])
async def test_a_forked_kernel_takes_the_made_shell_as_its_own(
    tmp_path: Path, contained: bool
) -> None:
    await asyncio.to_thread(warm_zygote)
    before = time.time()
    async with await forked(tmp_path / "a", sandbox=contained) as session:
        found = await state(session)
    work = str(tmp_path / "a")
    assert found["taken"] is True and found["parsed"] is True, found
    assert found["kernel"] is True and found["log"] is True, found
    # Its folders are its own: a contained kernel's IPython dir is in its private
    # dir, not the zygote's; the profile is the one its app found there.
    assert found["ipython_dir"] == (found["env_ipython_dir"] or found["ipython_dir"]), found
    assert str(found["profile"]).startswith(str(found["ipython_dir"])), found
    if contained:
        assert "kernelexec-ipc-" in str(found["ipython_dir"]), found
    assert found["cwd"] == work and found["dh"] == [work] and found["starting_dir"] == work
    # At exit IPython restores the streams it found: the kernel's, not the zygote's.
    assert found["stdout"] is True
    assert float(found["history_started"]) >= before - 1, found  # type: ignore[arg-type]


PROBES = [
    "x = 41\nx + 1",
    "get_ipython().__class__.__name__, type(get_ipython().compile).__name__",
    "%lsmagic",
    "%config ZMQInteractiveShell.ast_node_interactivity",
    "from IPython.display import HTML, display\ndisplay(HTML('<b>x</b>'))",
    "1 / 0",
    "%who",
    "%history -n -l 3",
    "%cd ..",
    "%dhist",
    "print(len(_ih), len(_oh), _i2)",
    "exit()",
    "%matplotlib inline\nimport matplotlib; matplotlib.get_backend()",
]


def _masked(text: str, work: Path) -> str:
    text = text.replace(str(work.parent), "<WORK>")
    return re.sub(r"kernelexec-ipc-\w+", "<IPC>", text)


async def _answers(session: AsyncSession, work: Path) -> list[object]:
    found = []
    for code in PROBES:
        result = await session.execute(code)
        error = None if result.error is None else (result.error.ename, result.error.evalue)
        found.append((code, result.status, _masked(result.text, work), error))
    return found


async def test_a_made_shell_kernel_answers_as_one_that_made_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    await asyncio.to_thread(warm_zygote)
    async with await forked(tmp_path / "made" / "work") as session:
        made = await _answers(session, tmp_path / "made" / "work")
        assert (await state(session))["taken"] is True
    monkeypatch.setenv("KERNELEXEC_ZYGOTE", "0")
    async with AsyncSession(tmp_path / "own" / "work", timeout=30) as session:
        assert not session._backend.forked  # type: ignore[attr-defined]
        own = await _answers(session, tmp_path / "own" / "work")
    for mine, theirs in zip(made, own, strict=True):
        assert mine == theirs, "\n".join(map(str, [mine[2], "----", theirs[2]]))


CONFIG = 'c.InteractiveShell.ast_node_interactivity = "{how}"\n'
BOTH = "10 + 1\n20 + 2"


async def test_a_config_file_reaches_the_made_shell_and_a_changed_one_is_not_missed(
    tmp_path: Path,
) -> None:
    ipython = tmp_path / "ipython"
    profile = ipython / "profile_default"
    profile.mkdir(parents=True)
    config = profile / "ipython_kernel_config.py"
    config.write_text(CONFIG.format(how="all"))
    env = {"IPYTHONDIR": str(ipython)}
    # Uncontained: the kernel reads the config the zygote read, and takes its shell.
    await asyncio.to_thread(warm_zygote, env=env, sandbox=False)
    async with await forked(tmp_path / "a", sandbox=False, env=env) as session:
        assert (await state(session))["taken"] is True
        result = await session.execute(BOTH)
        assert "11" in result.text and "22" in result.text, result.text
    # Edited since the zygote read it: the kernel reads the new one and makes its own shell.
    config.write_text(CONFIG.format(how="none"))
    async with await forked(tmp_path / "b", sandbox=False, env=env) as session:
        assert (await state(session))["taken"] is False
        result = await session.execute(BOTH)
        assert "11" not in result.text and "22" not in result.text, result.text
    # Contained: its IPython dir is its own, empty, so not the zygote's configuration.
    config.write_text(CONFIG.format(how="all"))
    async with await forked(tmp_path / "c", sandbox=True, env=env) as session:
        found = await state(session)
        assert found["taken"] is False and found["log"] is True, found
        result = await session.execute(BOTH)
        assert "11" not in result.text and "22" in result.text, result.text


async def test_a_fork_of_a_kernel_takes_its_parents_reading_of_the_arguments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A kernel the zygote did not make read its arguments itself; a fork of
    # it runs a new app on the same arguments and its own connection file,
    # and takes that reading rather than parse them again (10 ms of its start).
    monkeypatch.setenv("KERNELEXEC_ZYGOTE", "0")
    async with AsyncSession(tmp_path / "a", timeout=30, sandbox=False) as parent:
        assert (await state(parent))["parsed"] is False
        async with await parent.fork(tmp_path / "b", method="process") as fork:
            assert (await state(fork))["parsed"] is True
            assert (await fork.execute("print(6 * 7)")).stdout == "42\n"


async def test_a_kernel_cannot_hand_a_shell_of_its_making_to_a_sibling(tmp_path: Path) -> None:
    # The made shell is the zygote's object, copy-on-write in each kernel: a
    # kernel that plants its own in the module, or spoils the one it holds,
    # reaches no kernel forked after it.
    await asyncio.to_thread(warm_zygote)
    plant = (
        "import sys\nmade = sys.modules['kernelexec_kernel_made']\n"
        "made._shell = object(); made._config = {'planted': {}}\n"
        "get_ipython().user_ns['planted'] = 'by a'\n"
        "print('planted')"
    )
    async with await forked(tmp_path / "a") as a:
        assert (await a.execute(plant)).stdout.strip() == "planted"
        async with await forked(tmp_path / "b") as b:
            assert (await state(b))["taken"] is True
            seen = await b.execute("print('planted' in get_ipython().user_ns)")
            assert seen.stdout.strip() == "False"
