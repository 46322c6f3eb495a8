"""What AutoGen's and AG2's own Jupyter-executor suites check, held by our executors.

AutoGen's ``test_jupyter_code_executor.py`` (autogen-ext 0.7) and AG2's
``test_embedded_ipython_code_executor.py`` (ag2 0.14; AG2's classic framework is
the ``autogen`` package since, which these run against) were read for the
behaviours a user switching over relies on; these are our own tests of them,
against real kernels. Where we differ on purpose (a timeout is a result that
keeps the kernel's state, not an exception; saved files are named in the
text), the table of differences in docs/guides/autogen-ag2.md says so.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from autogen import ConversableAgent
from autogen.coding.base import CodeBlock as AG2Block
from autogen.coding.base import CodeExecutor as AG2Executor
from autogen.coding.factory import CodeExecutorFactory
from autogen_core import CancellationToken
from autogen_core.code_executor import CodeBlock

from kernelexec.integrations import ag2, autogen

# IPython's traceback for an undefined name in the cell ``In [n]``, colours stripped.
NAME_ERROR = (
    "---------------------------------------------------------------------------\n"
    "NameError                                 Traceback (most recent call last)\n"
    "Cell In[{n}], line 1\n"
    "----> 1 {line}\n"
    "\n"
    "NameError: name 'undefined_variable' is not defined"
)


@pytest.fixture
async def autogen_executor(tmp_path: Path) -> AsyncIterator[autogen.KernelexecCodeExecutor]:
    async with autogen.KernelexecCodeExecutor(timeout=30, output_dir=tmp_path) as executor:
        yield executor


@pytest.fixture
def ag2_executor(tmp_path: Path) -> Iterator[ag2.KernelexecCodeExecutor]:
    with ag2.KernelexecCodeExecutor(timeout=30, output_dir=tmp_path) as executor:
        yield executor


async def autogen_run(
    executor: autogen.KernelexecCodeExecutor, *codes: str
) -> autogen.KernelexecCodeResult:
    blocks = [CodeBlock(code=code, language="python") for code in codes]
    return await executor.execute_code_blocks(blocks, CancellationToken())


# AutoGen: the exact text, the result type, the arguments.


async def test_autogen_output_text_is_autogens_to_the_character(
    autogen_executor: autogen.KernelexecCodeExecutor,
) -> None:
    one = await autogen_run(autogen_executor, "print('hello world!')")
    two = await autogen_run(autogen_executor, "print('hello world!')", "b = 100 + 100; print(b)")
    assert (one.exit_code, one.output, one.output_files) == (0, "hello world!\n", [])
    # Each block's text as printed, the blocks joined by a newline.
    assert (two.exit_code, two.output) == (0, "hello world!\n\n200\n")


async def test_autogen_error_text_is_the_ipython_traceback(
    autogen_executor: autogen.KernelexecCodeExecutor,
) -> None:
    alone = await autogen_run(autogen_executor, "print(undefined_variable)")
    assert (alone.exit_code, alone.output) == (
        1,
        NAME_ERROR.format(n=1, line="print(undefined_variable)"),
    )
    after_output = await autogen_run(
        autogen_executor, "print('first')", "c = 3; print(c); print(undefined_variable)"
    )
    # The block's print and its traceback are two outputs: joined by a newline too.
    expected = "first\n\n3\n\n" + NAME_ERROR.format(
        n=3, line="c = 3; print(c); print(undefined_variable)"
    )
    assert (after_output.exit_code, after_output.output) == (1, expected)


async def test_autogen_outputs_of_one_block_are_joined_as_autogen_joins_them(
    autogen_executor: autogen.KernelexecCodeExecutor,
) -> None:
    result = await autogen_run(
        autogen_executor,
        "import sys\nprint('out')\nprint('err', file=sys.stderr, flush=True)\n"
        "sys.stdout.write('no newline')\n'value'",
    )
    assert result.output.split("\n") == ["out", "", "err", "", "no newline", "'value'"]


async def test_autogen_result_is_a_jupyter_code_result_and_equals_one(
    autogen_executor: autogen.KernelexecCodeExecutor,
) -> None:
    jupyter = pytest.importorskip("autogen_ext.code_executors.jupyter")
    result = await autogen_run(autogen_executor, "print('same')")
    theirs = jupyter.JupyterCodeResult(exit_code=0, output="same\n", output_files=[])
    assert isinstance(result, jupyter.JupyterCodeResult)
    assert result == theirs and theirs == result
    assert result != jupyter.JupyterCodeResult(exit_code=0, output="other\n", output_files=[])


async def test_autogen_timeout_exits_124_and_says_timeout(tmp_path: Path) -> None:
    async with autogen.KernelexecCodeExecutor(timeout=1, output_dir=tmp_path) as executor:
        await autogen_run(executor, "kept = 123")
        result = await autogen_run(executor, "import time; time.sleep(30); print('slept')")
        after = await autogen_run(executor, "print(kept)")
    assert result.exit_code == 124
    assert result.output.splitlines()[-1] == "Timeout" and "slept" not in result.output
    assert (after.exit_code, after.output) == (0, "123\n")


def test_autogen_bad_kernel_name_is_refused_at_construction(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="Kernel no-such-kernel is not installed"):
        autogen.KernelexecCodeExecutor(kernel_name="no-such-kernel", output_dir=tmp_path)


async def test_autogen_makes_a_missing_output_dir_as_autogen_does(tmp_path: Path) -> None:
    missing = tmp_path / "not" / "yet"
    async with autogen.KernelexecCodeExecutor(output_dir=missing) as executor:
        result = await autogen_run(executor, "import os; print(os.getcwd())")
    assert result.output == f"{missing}\n"


def test_autogen_warns_as_autogen_does_for_the_current_directory(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.warns(DeprecationWarning, match="current directory as output_dir is deprecated"):
        executor = autogen.KernelexecCodeExecutor(output_dir=".")
    assert executor.output_dir == tmp_path.resolve()


# AG2: the arguments, the text an agent greps, the factory, bang lines.


def test_ag2_arguments_are_checked_and_kept_as_ag2_keeps_them(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    executor = ag2.KernelexecCodeExecutor(timeout=10, kernel_name="python3", output_dir=".")
    assert (executor._timeout, executor._kernel_name, executor._output_dir) == (
        10,
        "python3",
        Path(),
    )
    assert executor.output_dir == tmp_path.resolve()
    with pytest.raises(ValueError, match=r"Output directory .*/absent does not exist\."):
        ag2.KernelexecCodeExecutor(output_dir=tmp_path / "absent")
    (tmp_path / "a-file").write_text("")
    with pytest.raises(ValueError, match=r"Output directory .*/a-file is not a directory\."):
        ag2.KernelexecCodeExecutor(output_dir=tmp_path / "a-file")
    with pytest.raises(ValueError, match="Kernel no-such-kernel is not installed"):
        ag2.KernelexecCodeExecutor(kernel_name="no-such-kernel", output_dir=".")
    with pytest.raises(ValueError, match="Timeout must be greater than or equal to 1"):
        ag2.KernelexecCodeExecutor(timeout=0)
    assert not (tmp_path / "absent").exists()


def test_ag2_executor_is_an_ag2_code_executor_the_factory_passes_through(
    ag2_executor: ag2.KernelexecCodeExecutor,
) -> None:
    assert isinstance(ag2_executor, AG2Executor)
    assert CodeExecutorFactory.create({"executor": ag2_executor}) is ag2_executor


def test_ag2_timeout_says_timeout_and_keeps_state(tmp_path: Path) -> None:
    with ag2.KernelexecCodeExecutor(timeout=1, output_dir=tmp_path) as executor:
        set_x = executor.execute_code_blocks([AG2Block(code="x = 123", language="python")])
        slow = executor.execute_code_blocks(
            [AG2Block(code="import time; time.sleep(30)", language="python")]
        )
        after = executor.execute_code_blocks([AG2Block(code="print(x)", language="python")])
    assert (set_x.exit_code, set_x.output.strip()) == (0, "")
    assert slow.exit_code == 124 and "Timeout" in slow.output.splitlines()
    assert (after.exit_code, after.output.strip()) == (0, "123")


def test_ag2_bang_lines_in_a_bash_block_run_as_commands(
    ag2_executor: ag2.KernelexecCodeExecutor,
) -> None:
    result = ag2_executor.execute_code_blocks(
        [AG2Block(code='!echo "hello world!"\n! false && echo negated', language="bash")]
    )
    # "!echo" is IPython's, run as a command; "! false" is bash's own negation.
    assert (result.exit_code, result.output) == (0, "hello world!\nnegated\n")


def test_ag2_an_expression_and_a_failed_pip_install_show(
    ag2_executor: ag2.KernelexecCodeExecutor,
) -> None:
    result = ag2_executor.execute_code_blocks(
        [
            AG2Block(code="def add(a, b):\n    return a + b\n", language="python"),
            AG2Block(code="add(431, 423)", language="python"),
        ]
    )
    assert (result.exit_code, result.output) == (0, "\n854")
    # --no-index: pip fails at once, with no network. Quiet keeps its errors.
    missing = f"!pip install --no-index matplotlib_{uuid.uuid4().hex}"
    failed = ag2_executor.execute_code_blocks([AG2Block(code=missing, language="python")])
    assert failed.exit_code == 0 and "ERROR: " in failed.output


def test_ag2_agent_runs_a_definition_then_its_use(
    ag2_executor: ag2.KernelexecCodeExecutor,
) -> None:
    agent = ConversableAgent(
        "runner", llm_config=False, code_execution_config={"executor": ag2_executor}
    )
    message = (
        "First:\n```python\ndef times(a, b):\n    return a * b\n```\n"
        "Then:\n```python\nprint(times(123, 4))\n```\n"
    )
    sender = ConversableAgent("user", llm_config=False, code_execution_config=False)
    answer = agent.generate_reply([{"role": "user", "content": message}], sender=sender)
    assert isinstance(answer, str) and "492" in answer


# Nothing is written after execute_code_blocks returns.

# Enough to have seen the old background write win the race most times (14 of 20).
ROUNDS = 100
# A block that writes an output file and fills a transcript cell.
WRITES = "from IPython.display import HTML\nprint('round')\nHTML('<b>saved</b>')"


async def test_autogen_output_dir_can_be_deleted_the_moment_the_call_returns(
    tmp_path: Path,
) -> None:
    work = tmp_path / "work"
    async with autogen.KernelexecCodeExecutor(output_dir=work) as executor:
        for round_ in range(ROUNDS):
            # A write after the last round's rmtree would have remade the directory.
            assert round_ == 0 or not work.exists()
            work.mkdir(exist_ok=True)
            result = await autogen_run(executor, WRITES)
            assert result.exit_code == 0 and len(result.output_files) == 1, result.output
            shutil.rmtree(work)  # "Directory not empty" if a write lands meanwhile


def test_ag2_output_dir_can_be_deleted_the_moment_the_call_returns(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    with ag2.KernelexecCodeExecutor(output_dir=work) as executor:
        for round_ in range(ROUNDS):
            assert round_ == 0 or not work.exists()
            work.mkdir(exist_ok=True)
            result = executor.execute_code_blocks([AG2Block(code=WRITES, language="python")])
            assert result.exit_code == 0 and len(result.output_files) == 1, result.output
            shutil.rmtree(work)
