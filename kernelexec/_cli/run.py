"""``kernelexec run``: a message's code blocks, a script, or a notebook's code cells, live.

What the input is: a ``.md`` file is a message (its fenced blocks, see
``_markdown``); ``.py`` is one python block and ``.sh``/``.bash`` one shell
block; ``.ipynb`` runs its code cells in order. Anything else, stdin (``-``)
included, is a message if it has a fenced block and python otherwise;
``--lang`` says which instead.

Ctrl-C interrupts the running block (the kernel gets a KeyboardInterrupt and
its output so far is kept), runs nothing more, prints the summary and exits
130; a second Ctrl-C stops at once.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
import time
from pathlib import Path
from typing import Any

from .._exceptions import KernelexecError
from .._execution._languages import normalize_language
from .._execution._models import ExecutionResult
from .._markdown._blocks import BlockResult, CodeBlock, extract_code_blocks, run_blocks, summarize
from .._session._async import AsyncSession
from ._view import Ending, JsonView, TerminalView, View

__all__ = ["add_command"]

EXAMPLE = """\
example:
  kernelexec run answer.md --work-dir out   # an LLM's message, block by block, live
  cat answer.md | kernelexec run - --json   # from stdin; one JSON object per block
"""

_MARKDOWN = {"markdown", "md"}
_SUFFIXES = {
    ".md": "markdown",
    ".markdown": "markdown",
    ".py": "python",
    ".sh": "bash",
    ".bash": "bash",
}


class _BadInput(Exception):
    """The input cannot be run; the message names the fix (exit 2)."""


def add_command(commands: Any) -> None:
    """Adds ``kernelexec run``."""
    run = commands.add_parser(
        "run",
        help="run a message's code blocks (or a script, or a notebook) with live output",
        description="Runs the python and shell blocks of a markdown message in order in one "
        "session, showing their output as it happens; blocks that are not code (text, output, "
        "console, json, yaml, csv, diff, ...) are skipped, and the run stops after the first "
        "failure. An unlabelled block runs as python or, if it is shell commands, as bash; one "
        "that holds output (right after a line like 'Expected output:') or text is skipped "
        "(--strict runs it as python). A .py or .sh file runs as one block, a .ipynb runs its "
        "code cells (to compare them with their recorded outputs, use `kernelexec replay`). "
        "Exits 0 if every block succeeded, 1 if one failed or nothing ran, 2 if kernelexec could "
        "not run, 130 after Ctrl-C.",
        epilog=EXAMPLE,
    )
    run.add_argument(
        "file", help="a .md message, a .py or .sh script, a .ipynb notebook, or - for stdin"
    )
    run.add_argument(
        "--lang",
        metavar="LANG",
        help="read the input as LANG: markdown (a message), python or bash (one block); "
        "default: by the file's suffix, else a message if it has a fenced block",
    )
    run.add_argument(
        "--work-dir",
        type=Path,
        help="where files and the transcript go (default: a new temp dir, always printed)",
    )
    run.add_argument(
        "--strict",
        action="store_true",
        help="run every unlabelled fence as python, where by default one holding output "
        "(after a line like 'Expected output:', or printed values) or text is skipped, and "
        "one of shell commands runs as bash",
    )
    run.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object per block as it ends, then one with the work dir",
    )
    run.add_argument("--timeout", type=float, default=60.0, help="seconds per block (default 60)")
    run.add_argument("--python", help="the Python that hosts the kernel (it needs ipykernel)")
    run.add_argument("--kernel-name", help="the kernelspec to start (default python3)")
    run.add_argument(
        "--preload", metavar="CODE", help="code run silently in the kernel before the first block"
    )
    run.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    try:
        blocks, source = _read_blocks(args.file, args.lang, strict=args.strict)
    except _BadInput as exc:
        print(f"kernelexec: {exc}", file=sys.stderr)
        return 2
    view: View = JsonView(len(blocks)) if args.json else TerminalView(len(blocks))
    if not any(block.is_code for block in blocks):
        return _nothing_to_run(blocks, source, view)
    return asyncio.run(_Run(args, blocks, view).main())


def _read_blocks(file: str, lang: str | None, *, strict: bool) -> tuple[list[CodeBlock], str]:
    """The blocks to run, and how to name the input in messages."""
    source = "stdin" if file == "-" else file
    path = Path(file)
    try:
        raw = sys.stdin.buffer.read() if file == "-" else path.read_bytes()
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise _BadInput(f"cannot read {source}: {exc}") from exc
    kind = (lang or "").strip().lower() or _SUFFIXES.get(path.suffix.lower(), "")
    if not kind and path.suffix.lower() == ".ipynb" and file != "-":
        return _notebook_blocks(text, source), source
    if not kind:
        kind = "markdown" if extract_code_blocks(text) else "python"
    if kind in _MARKDOWN:
        return extract_code_blocks(text, strict=strict), source
    if normalize_language(kind) is None:
        raise _BadInput(f"--lang {lang!r}: use markdown, python or bash")
    return [CodeBlock(index=1, language=kind, code=text, line=1)], source


def _notebook_blocks(text: str, source: str) -> list[CodeBlock]:
    # Imported here: nbformat's import is slow (see _session/_replay.py, read_code_cells).
    import nbformat

    try:
        notebook = nbformat.reads(text, as_version=4)
        metadata = notebook.get("metadata") or {}
        # An R or Julia notebook fails at its first cell, saying kernelexec runs python.
        language = str(
            (metadata.get("kernelspec") or {}).get("language")
            or (metadata.get("language_info") or {}).get("name")
            or "python"
        ).lower()
        cells = [cell for cell in notebook.cells if cell.get("cell_type") == "code"]
        return [
            CodeBlock(index=n, language=language, code=str(cell.get("source", "")))
            for n, cell in enumerate(cells, start=1)
        ]
    except (nbformat.ValidationError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise _BadInput(f"cannot read {source} as a notebook: {exc}") from exc


def _nothing_to_run(blocks: list[CodeBlock], source: str, view: View) -> int:
    if blocks:
        tags = ", ".join(sorted({block.language or "unlabelled" for block in blocks}))
        what = f"its {len(blocks)} fenced blocks are not code ({tags})"
    else:
        what = "it has no fenced code blocks"
    error = f"nothing to run in {source}: {what}; fence code as ```python or ```bash"
    for block in blocks:
        view.finished(BlockResult.of(block, "skipped", message=f"skipped: {block.skip_reason}"))
    print(f"kernelexec: {error}", file=sys.stderr)
    view.summary(Ending(summarize(["skipped"] * len(blocks)), 1, error=error))
    return 1


class _Run:
    """One ``kernelexec run``: a session, its blocks in order, and Ctrl-C."""

    def __init__(self, args: argparse.Namespace, blocks: list[CodeBlock], view: View) -> None:
        self.args = args
        self.blocks = blocks
        self.view = view
        self.outcomes: list[BlockResult] = []
        self.phase = "starting"  # then "running", then "closing"
        self.running: CodeBlock | None = None  # the block executing now
        self.started: CodeBlock | None = None  # the last block sent to the kernel
        self.interrupts = 0
        self.stopped: set[int] = set()  # the blocks Ctrl-C interrupted, by index
        self._tasks: set[asyncio.Task[None]] = set()

    async def main(self) -> int:
        started = time.monotonic()
        try:
            session = AsyncSession(
                self.args.work_dir,
                timeout=self.args.timeout,
                kernel_name=self.args.kernel_name,
                python=self.args.python,
                preload=self.args.preload,
                # One session: a zygote would be started for nobody, and its
                # imports would compete with this session's for the CPU.
                zygote=False,
            )
        except KernelexecError as exc:
            print(f"kernelexec: {exc}", file=sys.stderr)
            return 2
        self.session = session
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        handled = _on_sigint(loop, lambda: self._sigint(task))
        error: str | None = None
        try:
            await self._run_all()
        except asyncio.CancelledError:
            # Only our Ctrl-C handler cancels this task: the run ends, the summary follows.
            if hasattr(task, "uncancel"):
                task.uncancel()
        except KernelexecError as exc:
            error = str(exc)
            print(f"kernelexec: {error}", file=sys.stderr)
        self.phase = "closing"
        statuses = self._close_out(error)
        if error:
            code = 2
        elif self.interrupts:
            code = 130
        else:
            code = 0 if all(outcome.ok for outcome in self.outcomes) else 1
        line = f"{summarize(statuses)} ({time.monotonic() - started:.1f} s)"
        self.view.summary(Ending(line, code, session.work_dir, session.notebook_path, error))
        try:
            await session.close()
        finally:
            if handled:
                loop.remove_signal_handler(signal.SIGINT)
        return code

    async def _run_all(self) -> None:
        self.view.starting()
        await self.session.start()
        self.view.started()
        self.phase = "running"
        if self.interrupts:
            return
        async for outcome in run_blocks(self.blocks, self._execute):
            self.outcomes.append(outcome)
            self.view.finished(outcome, interrupted=outcome.index in self.stopped)
            if self.interrupts:
                return

    async def _execute(self, block: CodeBlock) -> ExecutionResult:
        self.view.header(block)
        self.running = self.started = block
        try:
            return await self.session.execute(
                block.code,
                language=block.runs_as or block.language,
                on_output=self.view.output,
            )
        finally:
            self.running = None

    def _close_out(self, error: str | None) -> list[str]:
        """Shows the blocks the run never finished; one status per block, for the summary.

        The block that Ctrl-C stopped counts as "interrupted" whatever its
        result says (an interrupted shell script may end with status 0).
        """
        statuses = ["interrupted" if o.index in self.stopped else o.status for o in self.outcomes]
        rest = self.blocks[len(self.outcomes) :]
        if rest and rest[0] is self.started:
            # Stopped by a second Ctrl-C (or an error) before it had a result.
            stopped = "interrupted" if self.interrupts else "cancelled"
            message = f"{stopped} before it finished"
            self.view.finished(BlockResult.of(rest[0], "cancelled", message=message))
            statuses.append(stopped)
            rest = rest[1:]
        why = (
            "interrupted" if self.interrupts else "kernelexec failed" if error else "a block failed"
        )
        for block in rest:
            self.view.finished(BlockResult.of(block, "not_run", message=f"not run: {why}"))
            statuses.append("not_run")
        return statuses

    def _sigint(self, task: asyncio.Task[Any]) -> None:
        self.interrupts += 1
        if self.phase == "closing":
            self.view.note("stopping the kernel...")
        elif self.interrupts == 1 and self.running is not None:
            self.stopped.add(self.running.index)
            self.view.note(
                f"Ctrl-C: interrupting block {self.running.index}; Ctrl-C again to stop at once"
            )
            interrupt = asyncio.get_running_loop().create_task(self._interrupt())
            self._tasks.add(interrupt)
            interrupt.add_done_callback(self._tasks.discard)
        elif self.interrupts == 1 and self.phase == "starting":
            # Cancelling a kernel mid-start could leave it behind: stop once it is up.
            self.view.note("Ctrl-C: stopping once the kernel has started; Ctrl-C again to stop now")
        else:
            task.cancel()

    async def _interrupt(self) -> None:
        with contextlib.suppress(KernelexecError):
            await self.session.interrupt()


def _on_sigint(loop: asyncio.AbstractEventLoop, handler: Any) -> bool:
    """Installs ``handler`` for SIGINT on the loop; False where the platform cannot."""
    try:
        loop.add_signal_handler(signal.SIGINT, handler)
    except (NotImplementedError, RuntimeError, ValueError):
        return False  # Windows, or not the main thread: Ctrl-C is a KeyboardInterrupt
    return True
