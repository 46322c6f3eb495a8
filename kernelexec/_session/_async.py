"""AsyncSession: one kernel, one work dir, one transcript."""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import sys
import tempfile
import time
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, overload

from .. import _telemetry, _workdir
from .._backends import DockerBackend, KernelBackend, LocalBackend
from .._environment import kernel_env
from .._exceptions import CheckpointError, ConfigurationError, SessionClosedError
from .._execution._assemble import assemble, check_code, full_output_path
from .._execution._background import (
    Execution,
    ExecutionCancelled,
    ExecutionStore,
    mark_started,
    run_in_background,
)
from .._execution._languages import kernel_source, normalize_language
from .._execution._live import OutputListener
from .._execution._models import ExecutionResult, Limits, Status
from .._execution._reducer import ExecutionReducer
from .._execution._run import Outcome, run_code
from .._markdown._blocks import BlockResult, CodeBlock, extract_code_blocks, run_blocks
from .._state import _checkpoint
from .._state._checkpoint import Checkpoint, RestoreReport
from .._state._fork import ForkMethod, ForkReport, fork_session
from .._state._restore import restart_keeping_state, restore_session
from .._state._variables import Variable, VariableDetail, ask_variables
from .._venvs._venv import ensure_env
from ._pool import KernelConfig, KernelPool
from ._replay import ReplayReport, read_code_cells, replay_into
from ._transcript import Transcript, code_cell, note_cell

__all__ = ["AsyncSession"]

STATE_LOST = "all earlier state (variables, imports) is gone"


class AsyncSession:
    """A stateful kernel for an agent's code, with its files and transcript.

    Executions on one session run one at a time, first come first served;
    sessions are independent, so many can run at once in one event loop.

    Args:
        work_dir: the kernel's cwd, where outputs and the transcript go;
            None makes a temp dir that is kept after close.
        kernel_name: an installed kernelspec; default "python3", the IPython kernel.
        python: a Python (say a venv's) to host the kernel; it needs ipykernel.
            With ``packages``, ``venv`` or ``python_version``: the Python to
            make the environment with.
        env: variables for the kernel, on top of this process's environment
            with credential-like names (TOKEN, SECRET, API_KEY, ...) removed.
        timeout: default seconds per execution; on expiry the kernel is interrupted.
        notebook: the transcript's file name in the work dir (or a path).
        limits: caps on output kept per execution; default ``Limits()``.
        interrupt_grace: seconds an interrupted kernel gets to become idle
            before it is restarted.
        startup_timeout: seconds a new kernel gets to answer.
        auto_restart: start a new kernel when the kernel dies.
        backend: where the kernel runs; default a local process.
        preload: code run silently in each new kernel before the first
            execution (and after every restart), e.g. ``import pandas``;
            ``""`` for none when the pool has one.
        pool: a ``KernelPool`` to take a ready kernel from. ``kernel_name``,
            ``python``, ``env``, ``preload`` and ``limits`` left out are the
            pool's. Given ones that the pool's kernels do not have (another
            preload, say) make the session start its own kernel, cold, and
            warn (``UserWarning``) naming the difference.
        packages: requirements (``["rich", "pandas>=2"]``) to install, with
            ipykernel, in a virtual environment made for the kernel (with uv
            when it is on PATH, else venv and pip) when the session starts.
            Without ``venv``, the environment is cached by its inputs in
            ``KERNELEXEC_VENV_DIR`` (default ``~/.cache/kernelexec/venvs``),
            so a session with the same inputs reuses it at once.
        python_version: "3.12": make the environment with that Python
            (``python3.12`` on PATH, or one uv has installed).
        venv: the environment's path: made there if absent, used (and the
            packages installed into it) if it is a venv.
        zygote: fork the local kernel from a zygote that has imported
            ipykernel and the preload's modules once (milliseconds and a few
            MB instead of a cold boot; Linux). None: on unless
            ``KERNELEXEC_ZYGOTE=0``. A configuration's first kernel starts
            cold while its zygote starts in the background.

    Raises:
        ConfigurationError: a setting is unusable (a timeout that is not
            positive, a work dir that cannot be made, both ``backend`` and
            ``pool``, a package that is no requirement of the index: a path,
            an archive, a URL or an option). Raised
            by ``start`` (or the first execution): no such ``python_version``.
        EnvironmentBuildError: raised by ``start``: a package could not be
            installed; the message names it and says why.
    """

    @_telemetry.session_span("kernelexec.session.create")
    def __init__(
        self,
        work_dir: str | Path | None = None,
        *,
        kernel_name: str | None = None,
        python: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float = 60.0,
        notebook: str | Path = "transcript.ipynb",
        limits: Limits | None = None,
        interrupt_grace: float = 3.0,
        startup_timeout: float = 60.0,
        auto_restart: bool = True,
        backend: KernelBackend | None = None,
        preload: str | None = None,
        pool: KernelPool | None = None,
        packages: Sequence[str] | None = None,
        python_version: str | None = None,
        venv: str | Path | None = None,
        zygote: bool | None = None,
    ) -> None:
        if not timeout > 0 or not interrupt_grace > 0:
            raise ConfigurationError("timeout and interrupt_grace must be positive seconds")
        if backend is not None and pool is not None:
            raise ConfigurationError(
                "give a session backend= or pool=, not both: a pool's kernels are local "
                "processes, and a backend says where the session's kernel runs"
            )
        # What the session is not told, it takes from the pool.
        config = KernelConfig.of(
            kernel_name=kernel_name,
            python=python,
            env=env,
            preload=preload,
            limits=limits,
            packages=packages,
            python_version=python_version,
            venv=venv,
            base=pool.config if pool is not None else None,
        )
        self._env_request = config.env_request()
        if backend is not None and self._env_request is not None:
            raise ConfigurationError(
                "packages=, python_version= and venv= make an environment for a local kernel; "
                "for a Docker kernel give DockerBackend(packages=...) instead"
            )
        self.work_dir = _prepare_work_dir(work_dir)
        self.notebook_path = self.work_dir / notebook
        self.timeout = timeout
        self.limits = config.limits
        self.interrupt_grace = interrupt_grace
        self.auto_restart = auto_restart
        self._config = config
        self._zygote = zygote
        self._startup_timeout = startup_timeout
        self._backend: KernelBackend = backend or self._local_backend(config.python)
        # The host's own cap on every message the kernel sends, wherever it runs.
        self._backend.max_message_bytes = config.limits.max_message_bytes
        # The kernel cuts outputs to the byte caps before sending them.
        self._env = kernel_env(config.kernel_env())
        self._pool = pool
        unfit = pool.unfit(config) if pool is not None else None
        if unfit is not None:
            self._pool = None
            _warn(
                "this session starts its own kernel, cold, instead of taking a ready one "
                f"from its pool: {unfit}."
            )
        self._transcript = Transcript(self.notebook_path, work_dir=self.work_dir)
        self._seq = self._transcript.code_cells
        self._lock = asyncio.Lock()
        # Background executions not yet ended, bounded (finished ones are the caller's).
        self._queue = ExecutionStore(keep=0)
        self._kernel_up = False
        self._restarting: asyncio.Task[None] | None = None
        self._running = False
        self._closed = False
        self._dead: str | None = None  # why the kernel is down, when auto_restart is off
        self.replay_report: ReplayReport | None = None  # set by from_transcript
        self.fork_report: ForkReport | None = None  # set by fork
        self.restore_report: RestoreReport | None = None  # set by restore

    @classmethod
    async def from_transcript(
        cls,
        path: str | Path,
        work_dir: str | Path | None = None,
        *,
        until: int | None = None,
        include_failed: bool = False,
        **options: Any,
    ) -> AsyncSession:
        """A new, started session with a notebook's code cells replayed into it.

        Restores an agent's state after a crash, or reproduces a run. Cells that
        failed when recorded are skipped unless ``include_failed``; a cell whose
        stdout or error now differs from the recording is listed in
        ``session.replay_report`` with a diff.

        Args:
            path: a kernelexec transcript or any notebook (markdown cells are
                ignored, magics kept).
            work_dir: the new session's work dir (not the one holding ``path``'s
                transcript, which the replay would append to).
            until: stop after the code cell with this index (from 1).
            include_failed: also run the cells that failed when recorded.
            **options: as for ``AsyncSession`` (``timeout`` is the new session's).

        Raises:
            ConfigurationError: ``path`` is not a readable notebook, or is the
                new session's own transcript.
        """
        source = Path(path).expanduser().resolve()
        cells = read_code_cells(source)  # a bad notebook fails before any kernel starts
        session = cls(work_dir, **options)
        if session.notebook_path.resolve() == source:
            raise ConfigurationError(
                f"{source} is the new session's own transcript; replay into another work_dir"
            )
        await session.start()
        try:
            session.replay_report = await replay_into(
                session, source, cells, until=until, include_failed=include_failed
            )
        except BaseException:
            await session.close()
            raise
        return session

    def __repr__(self) -> str:
        state = "closed" if self._closed else "running" if self._kernel_up else "new"
        return f"<AsyncSession {state} work_dir={str(self.work_dir)!r}>"

    async def __aenter__(self) -> AsyncSession:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def connection_info(self) -> dict[str, Any] | None:
        """How a second client reaches the running kernel over ZMQ, to debug it.

        A local kernel's connection file contents (its Unix sockets or ports,
        and its key); None for a backend without one, or before the kernel started.
        """
        info = getattr(self._backend, "connection_info", None)
        result: dict[str, Any] | None = info() if callable(info) and self._kernel_up else None
        return result

    async def start(self) -> AsyncSession:
        """Starts the kernel now rather than on the first execution."""
        async with self._lock:
            await self._ensure_kernel()
        return self

    @overload
    async def execute(
        self,
        code: str | bytes,
        *,
        language: str | None = ...,
        timeout: float | None = ...,
        stdin: Sequence[str] | None = ...,
        on_output: OutputListener | None = ...,
        background: Literal[False] = ...,
    ) -> ExecutionResult: ...

    @overload
    async def execute(
        self,
        code: str | bytes,
        *,
        language: str | None = ...,
        timeout: float | None = ...,
        stdin: Sequence[str] | None = ...,
        on_output: OutputListener | None = ...,
        background: Literal[True],
    ) -> Execution: ...

    async def execute(
        self,
        code: str | bytes,
        *,
        language: str | None = "python",
        timeout: float | None = None,
        stdin: Sequence[str] | None = None,
        on_output: OutputListener | None = None,
        background: bool = False,
    ) -> ExecutionResult | Execution:
        """Runs one block of code and returns what it did.

        Args:
            code: Python, or shell when ``language`` is "bash"/"sh"/"shell".
            language: "python" (also "py", "python3", "ipython", None) or a shell.
            timeout: seconds for this execution; default the session's.
            stdin: answers for ``input()``/``getpass()``, in order. Without
                them, asking for input fails at once instead of hanging.
            on_output: called with each output as it happens, a
                ``LiveOutput``: its ``str()`` is readable text (so
                ``on_output=print`` shows the output), and it is the nbformat
                output too (a mapping; ``.output`` is the dict), with
                ``clear_output`` and ``update_display_data`` events among
                them. The result still holds everything.
            background: return an ``Execution`` at once instead, running
                on its own (see ``kernelexec.Execution``): wait for it, read
                its outputs from any offset, cancel it. A session holds at
                most 32 background executions not yet ended, with at most
                64 Mi characters of code together.

        Raises:
            SessionClosedError: the session was closed.
            KernelStartError: no kernel could be started for it.
            QueueFullError: ``background`` and the session's queue is full;
                nothing was queued.
        """
        self._check_open()
        if background:
            held = self._queue.reserve(len(code))
            try:
                execution = run_in_background(
                    self.execute,
                    code,
                    language=language,
                    on_output=on_output,
                    timeout=timeout,
                    stdin=stdin,
                )
            except BaseException:
                held.release()
                raise
            return self._queue.add(execution, held)
        normalized = normalize_language(language)
        text, refused = check_code(code, language, normalized, self.limits)
        async with self._lock:
            mark_started()  # a background execution is "running" from here
            if self._closed:
                return _cancelled(normalized or "python")
            if self._dead is not None:
                return _kernel_down(self._dead, normalized or "python")
            self._seq += 1
            try:
                if refused is not None or normalized is None:
                    assert refused is not None
                    self._record_refusal(refused, text, language)
                    return refused
                return await self._execute(
                    text, normalized, timeout or self.timeout, stdin, on_output
                )
            finally:
                # The cell is in the file before its result is handed out: a
                # crash right after a result loses nothing, and a caller may
                # delete or copy the work dir as soon as it has the result.
                await self._transcript.flush()

    async def run_markdown(
        self,
        text: str,
        *,
        timeout: float | None = None,
        on_output: OutputListener | None = None,
        strict: bool = False,
    ) -> list[BlockResult]:
        """Runs the python and shell blocks of a message in order, stopping after the first failure.

        Every fenced block gets a ``BlockResult`` saying which block it was
        (index, language, line, first line) and what became of it: blocks
        that are not code (text, output, console, json, yaml, csv, diff, ...)
        are "skipped"; a block in a language kernelexec cannot run fails at
        its position, the blocks before it having run; the blocks after a
        failure are "not_run". An unlabelled block runs as python, or as bash
        when it is shell commands; one holding output (right after a line
        like "Expected output:", or printed values) or text is "skipped",
        its ``message`` saying why.

        Args:
            text: the message, markdown with fenced code blocks.
            timeout: seconds per block; default the session's.
            on_output: as for ``execute``, for every block's outputs.
            strict: run every unlabelled block as python, output or not.

        Raises:
            SessionClosedError: the session was closed.
            KernelStartError: no kernel could be started for it.
        """

        async def execute(block: CodeBlock) -> ExecutionResult:
            return await self.execute(
                block.code,
                language=block.runs_as or block.language,
                timeout=timeout,
                on_output=on_output,
            )

        blocks = extract_code_blocks(text, strict=strict)
        return [outcome async for outcome in run_blocks(blocks, execute)]

    async def interrupt(self) -> None:
        """Interrupts whatever the kernel is running (a KeyboardInterrupt)."""
        self._check_open()
        if self._kernel_up:
            await self._backend.interrupt()

    async def restart(self, *, keep_state: bool = False) -> RestoreReport | None:
        """Replaces the kernel with a fresh one; a running execution is interrupted first.

        Args:
            keep_state: carry the variables and imports over (checkpoint,
                restart, restore), for "pip install, then keep going": a
                variable whose package changed version, or that cannot be
                pickled, stays behind and the report says so. If the
                checkpoint cannot be made, nothing is restarted.

        Returns:
            With ``keep_state``, what came back and what did not; else None.

        Raises:
            CheckpointError: ``keep_state`` and the state could not be saved
                (the kernel is left as it was) or loaded back.
        """
        self._check_open()
        if self._running:
            await self._backend.interrupt()
        async with self._lock:
            self._dead = None
            await self._await_pending_restart()
            if keep_state and self._kernel_up and await self._backend.is_alive():
                return await self._restart_keeping_state()
            if self._kernel_up:
                await _telemetry.kernel_restart(self, self._backend.restart())
            else:
                await self._ensure_kernel()
            self._transcript.add(
                note_cell(f"*kernelexec: kernel restarted on request; {STATE_LOST}.*")
            )
            await self._transcript.flush()
        if keep_state:
            return RestoreReport(
                checkpoint="", message="The kernel was not running, so there was no state to keep."
            )
        return None

    async def checkpoint(
        self,
        path: str | Path | None = None,
        *,
        files: bool = True,
        timeout: float = 300.0,
        variable_timeout: float = 30.0,
        max_bytes: int | None = None,
    ) -> Checkpoint:
        """Saves the kernel's variables, imports and work-dir files to a directory.

        Waits for a running execution to end. Variables that cannot be
        carried (sockets, generators, open files, ...) are listed in
        ``Checkpoint.skipped`` with the reason; the rest are saved.

        Args:
            path: a new or empty directory; None: ``work_dir/checkpoints/<time>``.
            files: copy the work dir's files into it (``files/``).
            timeout: seconds for the whole checkpoint; the kernel is interrupted after.
            variable_timeout: seconds one variable may take to pickle (a
                ``__reduce__`` that hangs is stopped and reported).
            max_bytes: the most the checkpoint may hold (variables, and files
                at their apparent sizes); None: what the disk has free,
                less a reserve. Either way it is refused before it is written.

        Raises:
            DiskSpaceError: it would hold more than ``max_bytes``, or than
                the disk has room for; nothing is kept.
            CheckpointError: the checkpoint could not be made (the kernel has
                no cloudpickle, died or took too long; ``path`` not empty).
            SessionClosedError: the session was closed.
        """
        self._check_open()
        async with self._lock:
            await self._ensure_kernel()
            if not await self._backend.is_alive():
                raise CheckpointError("the kernel has died; there is no state to checkpoint")
            return await self._checkpoint_now(
                path, files, timeout, variable_timeout, max_bytes=max_bytes
            )

    @classmethod
    async def restore(
        cls,
        checkpoint: Checkpoint | str | Path,
        work_dir: str | Path | None = None,
        *,
        load_timeout: float = 300.0,
        variable_timeout: float = 30.0,
        **options: Any,
    ) -> AsyncSession:
        """A new, started session holding a checkpoint's variables, imports and files.

        The files are copied into ``work_dir`` first (replacing files of the
        same name), then the variables are loaded into the new kernel. The
        transcript starts with a note naming the checkpoint and what did not
        come back; ``session.restore_report`` says the same. Execution
        counts go on from the checkpointed kernel's.

        Args:
            checkpoint: a ``Checkpoint`` or its directory.
            work_dir: the new session's work dir; None makes a temp dir.
            load_timeout: seconds for loading the variables.
            variable_timeout: seconds one variable may take to load.
            **options: as for ``AsyncSession`` (``timeout`` is the new session's).

        Raises:
            IncompatibleCheckpointError: the kernel's Python (major.minor) or
                the version of a package whose objects the checkpoint holds
                differs from the checkpoint's; nothing is restored.
            CheckpointError: the checkpoint is missing, damaged or unreadable.
        """
        return await restore_session(
            cls,
            checkpoint,
            work_dir,
            load_timeout=load_timeout,
            variable_timeout=variable_timeout,
            options=options,
        )

    async def fork(
        self,
        work_dir: str | Path | None = None,
        *,
        wait: bool = True,
        method: ForkMethod = "auto",
        max_bytes: int | None = None,
    ) -> AsyncSession:
        """A new, independent session holding a copy of this one's live state.

        A local kernel is forked as a process: the new kernel starts with
        every variable, import, class and figure this one has, copy-on-write,
        with nothing re-run; the two diverge from then on. A kernel holding
        what a process fork would break (a GPU driver in use, a live GNU
        OpenMP pool, whose copy would hang on its first parallel operation),
        and other backends (a gateway, Docker), are checkpointed and restored
        into a new kernel of the same kind instead; ``fork_report.reason``
        says why. The new session gets ``work_dir`` (None: a new
        temp dir) with a copy of this one's files, its own transcript, which
        begins with a note naming this session and this session's cells, and
        ``fork_report`` saying how it was made. Random state: a fork's numpy
        and ``random`` generators are reseeded (seed them yourself for equal
        sequences).

        Args:
            work_dir: the fork's work dir (not this session's).
            wait: wait for a running execution to end; False raises instead.
            method: "auto" (above); "process" forks a local kernel's process
                even so, listing what breaks in ``fork_report.left_behind``;
                "checkpoint" always checkpoints and restores.
            max_bytes: the most the copy of the files may hold, by their
                apparent sizes (a sparse file counts at its full length,
                though it is copied sparsely); None: what the disk has free,
                less a reserve.

        Raises:
            SessionBusyError: ``wait=False`` and an execution is running.
            DiskSpaceError: the files would not fit; nothing was forked.
            KernelStartError: the kernel could not be forked or restored.
            CheckpointError: the checkpoint a non-local backend needs failed.
            ConfigurationError: an unknown ``method``, or "process" for a
                kernel that is not local.
        """
        return await fork_session(self, work_dir, wait=wait, method=method, max_bytes=max_bytes)

    async def variables(self) -> list[Variable]:
        """The user namespace's variables, briefly, without running a cell.

        Answers while a cell runs (the kernel's control channel); the
        execution count, ``In``/``Out`` and the transcript are not touched.
        IPython's own names, names starting with ``_`` and modules are left
        out. An object whose repr, length or size raises or takes too long
        is listed with ``unavailable`` saying so. A session whose kernel has
        not started has none.

        Raises:
            SessionClosedError: the session was closed.
            KernelexecError: the backend cannot be asked (a gateway), or the
                kernel did not answer.
        """
        self._check_open()
        if not self._kernel_up:
            return []
        reply = await ask_variables(self._backend, None)
        listed = reply.get("variables")
        return (
            [Variable.from_dict(v) for v in listed if isinstance(v, dict)]
            if isinstance(listed, list)
            else []
        )

    async def inspect(self, name: str) -> VariableDetail | None:
        """One variable in more detail (a DataFrame's columns, dtypes and head); None if unknown.

        Like ``variables()``, answers while a cell runs and runs no cell.

        Raises:
            SessionClosedError: the session was closed.
            KernelexecError: the backend cannot be asked, or the kernel did not answer.
        """
        self._check_open()
        if not self._kernel_up:
            return None
        reply = await ask_variables(self._backend, name)
        found = reply.get("variable")
        return VariableDetail.from_dict(found) if isinstance(found, dict) else None

    async def flush(self) -> None:
        """Returns once the transcript file holds every execution so far."""
        await self._transcript.flush()

    @_telemetry.session_span("kernelexec.session.close")
    async def close(self) -> None:
        """Shuts the kernel (and its children) down; files and transcript stay."""
        if self._closed:
            return
        self._closed = True
        if self._running:
            with contextlib.suppress(Exception):
                await self._backend.interrupt()
        try:
            await asyncio.wait_for(self._lock.acquire(), self.interrupt_grace)
            self._lock.release()
        except asyncio.TimeoutError:
            pass  # the shutdown below ends the stuck execution
        if self._restarting is not None:
            self._restarting.cancel()
            with contextlib.suppress(BaseException):
                await self._restarting
        await self._backend.shutdown()
        self._kernel_up = False
        await self._transcript.flush()

    # -- internals

    def _fork_options(self) -> dict[str, Any]:
        """What a fork of this session is made with, its backend aside."""
        return {
            "timeout": self.timeout,
            "limits": self.limits,
            "interrupt_grace": self.interrupt_grace,
            "auto_restart": self.auto_restart,
            "notebook": self.notebook_path.name,
            "startup_timeout": self._startup_timeout,
        }

    def _kernel_dir(self) -> str:
        """The work dir as the kernel sees it."""
        return "/workspace" if isinstance(self._backend, DockerBackend) else str(self.work_dir)

    async def _checkpoint_now(
        self,
        path: str | Path | None,
        files: bool,
        timeout: float,
        variable_timeout: float,
        *,
        max_bytes: int | None = None,
    ) -> Checkpoint:
        return await _checkpoint.take(
            self._backend,
            work_dir=self.work_dir,
            kernel_dir=self._kernel_dir(),
            path=path,
            notebook=self.notebook_path,
            cells=self._seq,
            files=files,
            timeout=timeout,
            variable_timeout=variable_timeout,
            max_bytes=max_bytes,
        )

    async def _restart_keeping_state(self) -> RestoreReport:
        """Checkpoint, restart, restore; the lock is held."""
        return await restart_keeping_state(self)

    @_telemetry.execution
    async def _execute(
        self,
        code: str,
        language: str,
        timeout: float,
        stdin: Sequence[str] | None,
        on_output: OutputListener | None,
    ) -> ExecutionResult:
        started_wall, started = time.time(), time.monotonic()
        await self._ensure_kernel()
        revived = await self._revive_if_dead()
        if self._dead is not None:
            return _kernel_down(self._dead, language)
        stem = f"{self._seq:04d}"
        source = kernel_source(code, language)
        spill_notes: list[str] = []

        def open_spill() -> Any:
            # Through _workdir: a link the kernel planted at the name is replaced, not followed.
            try:
                raw, moved = _workdir.create(self.work_dir, full_output_path(stem))
            except OSError as exc:
                spill_notes.append(f"The full output could not be saved: {exc}.")
                return open(os.devnull, "w")
            spill_notes.extend([moved] if moved else [])
            return io.TextIOWrapper(raw, encoding="utf-8", errors="surrogatepass")

        def reducer_factory(msg_id: str) -> ExecutionReducer:
            return ExecutionReducer(
                msg_id, limits=self.limits, spill=open_spill, spill_name=full_output_path(stem)
            )

        self._running = True
        try:
            outcome = await run_code(
                self._backend,
                source,
                reducer_factory=reducer_factory,
                timeout=timeout,
                grace=self.interrupt_grace,
                stdin=stdin,
                on_output=on_output,
            )
        finally:
            self._running = False
        status, notes, restarted = self._judge(outcome, timeout)
        notes.extend(spill_notes)
        if revived:
            notes.insert(0, revived)
            restarted = True
        assembly = assemble(
            outcome.reducer.finish(),
            status=status,
            language=language,
            work_dir=self.work_dir,
            stem=stem,
            limits=self.limits,
            duration=time.monotonic() - started,
            notes=notes,
            spilled=outcome.reducer.spilled,
            restarted=restarted,
        )
        result = assembly.result
        self._transcript.add(
            code_cell(
                source,
                assembly.outputs,
                execution_count=result.execution_count,
                started=started_wall,
                finished=time.time(),
                failed=status != "ok",
                usage=result.usage,
                kernelexec={
                    "status": status,
                    "language": language,
                    "duration": result.duration,
                    "files": result.files,
                    "restarted": restarted,
                    "message": result.message,
                },
            )
        )
        if status == "kernel_died":
            self._transcript.add(note_cell(f"*kernelexec: {result.message}*"))
        if outcome.ending == "cancelled":
            raise ExecutionCancelled(result)  # a CancelledError that keeps the result
        return result

    def _judge(self, outcome: Outcome, timeout: float) -> tuple[Status, list[str], bool]:
        notes = list(outcome.notes)
        reducer = outcome.reducer
        # close() interrupts a running cell: the KeyboardInterrupt it ends with is ours.
        stopped_by_close = reducer.error is not None and reducer.error.ename == "KeyboardInterrupt"
        if self._closed and (outcome.ending != "done" or stopped_by_close):
            notes.append("The session was closed while this code ran.")
            return "cancelled", notes, False
        if outcome.ending == "done":
            return ("error" if reducer.error is not None else "ok"), notes, False
        if outcome.ending == "died":
            reason = self._backend.exit_reason() or "cause unknown"
            then = (
                "A new kernel is starting for the next execution."
                if self.auto_restart
                else "Call restart() to start a new kernel."
            )
            notes.append(
                f"The kernel died ({reason}) while running this code; {STATE_LOST}. {then}"
            )
            self._kernel_up = False
            if self.auto_restart:
                self._schedule_restart()
            else:
                self._dead = f"The kernel died ({reason})."
            return "kernel_died", notes, self.auto_restart
        what = f"Timed out after {timeout:g} s" if outcome.ending == "timeout" else "Cancelled"
        if outcome.needs_restart:
            notes.append(
                f"{what}; the kernel did not stop within {self.interrupt_grace:g} s of an "
                f"interrupt, so it was restarted and {STATE_LOST}."
            )
            self._kernel_up = False
            self._schedule_restart()
            restarted = True
        else:
            notes.append(f"{what}; the kernel was interrupted and its state is kept.")
            restarted = False
        status: Status = "timeout" if outcome.ending == "timeout" else "cancelled"
        return status, notes, restarted

    def _schedule_restart(self) -> None:
        # In the background, so the result of a death comes at once; the next
        # execution waits for the new kernel.
        self._restarting = asyncio.get_running_loop().create_task(
            _telemetry.kernel_restart(self, self._backend.restart())
        )

    async def _await_pending_restart(self) -> None:
        task, self._restarting = self._restarting, None
        if task is not None:
            await task  # a KernelStartError surfaces here, on the next call
            self._kernel_up = True

    async def _ensure_kernel(self) -> None:
        self._check_open()
        await self._await_pending_restart()
        if not self._kernel_up:
            with _telemetry.kernel_start(self) as traced:
                taken = await self._pool.take(self.work_dir) if self._pool is not None else None
                self._pool = None  # a restart starts this session's own kernel, cold
                if taken is not None:
                    self._backend = taken
                else:
                    await self._make_environment()
                    await self._backend.start(cwd=self.work_dir, env=self._env)
                _telemetry.note_kernel(traced, self._backend, pooled=taken is not None)
            self._kernel_up = True

    async def _make_environment(self) -> None:
        """Makes (or finds made) the environment asked for, and a kernel to run in it."""
        if self._env_request is None:
            return
        # In a thread: a build takes seconds to minutes, and other sessions run meanwhile.
        python = await ensure_env(self._env_request)
        self._check_open()  # closed while the environment was being made
        self._env_request = None  # only once made: a failed build is tried again
        self._backend = self._local_backend(python)

    def _local_backend(self, python: str | None) -> LocalBackend:
        return LocalBackend(
            kernel_name=self._config.kernel_name,
            python=python,
            startup_timeout=self._startup_timeout,
            preload=self._config.preload,
            zygote=self._zygote,
            max_message_bytes=self._config.limits.max_message_bytes,
        )

    async def _revive_if_dead(self) -> str | None:
        """Restarts a kernel that died between executions; says so, or None."""
        if await self._backend.is_alive():
            return None
        reason = self._backend.exit_reason() or "cause unknown"
        said = f"The kernel had died since the last execution ({reason}); {STATE_LOST}."
        if not self.auto_restart:
            self._dead = said
            return None
        self._transcript.add(note_cell(f"*kernelexec: {said} A new kernel was started.*"))
        await _telemetry.kernel_restart(self, self._backend.restart())
        return f"{said} A new kernel was started before this code ran."

    def _record_refusal(self, result: ExecutionResult, code: str, language: str | None) -> None:
        with contextlib.suppress(UnicodeEncodeError):
            code.encode("utf-8")
            self._transcript.add(
                note_cell(
                    code[:10_000],
                    kind="raw",
                    kernelexec={"status": "error", "language": language, "message": result.message},
                )
            )

    def _check_open(self) -> None:
        if self._closed:
            raise SessionClosedError("this session is closed; create a new one")


def _warn(message: str) -> None:
    """Warns at the caller's line: the first frame outside kernelexec (``Session`` wraps us)."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # kernelexec/
    level, frame = 2, sys._getframe(1)
    while frame.f_back is not None and frame.f_code.co_filename.startswith(package):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, UserWarning, stacklevel=level)


def _prepare_work_dir(work_dir: str | Path | None) -> Path:
    if work_dir is None:
        return Path(tempfile.mkdtemp(prefix="kernelexec-")).resolve()
    path = Path(work_dir).expanduser().resolve()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError) as exc:
        raise ConfigurationError(f"work_dir {path} exists and is not a directory") from exc
    except OSError as exc:
        raise ConfigurationError(f"cannot create work_dir {path}: {exc}") from exc
    return path


def _cancelled(language: str) -> ExecutionResult:
    message = "The session was closed before this code ran."
    return ExecutionResult(
        status="cancelled", text=f"[kernelexec] {message}\n", message=message, language=language
    )


def _kernel_down(why: str, language: str) -> ExecutionResult:
    message = f"{why} auto_restart is off: call restart() to start a new kernel. Nothing was run."
    return ExecutionResult(
        status="kernel_died", text=f"[kernelexec] {message}\n", message=message, language=language
    )
