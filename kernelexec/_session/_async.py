"""AsyncSession: one kernel, one work dir, one transcript."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, overload

from .. import _telemetry
from .._backends import KernelBackend
from .._containment._sandbox import Sandbox
from .._environment import kernel_env
from .._exceptions import CheckpointError, ConfigurationError, SessionClosedError
from .._execution._background import Execution, ExecutionStore, run_in_background
from .._execution._live import OutputListener
from .._execution._models import ExecutionResult, Limits
from .._execution._run import InputAnswerer, Interrupts
from .._markdown._blocks import BlockResult, CodeBlock, extract_code_blocks, run_blocks
from .._remote_models import FileInfo
from .._state._fork import ForkMethod, ForkReport
from .._state._manifest import Checkpoint, RestoreReport
from .._state._variables import Variable, VariableDetail, inspect_variable, list_variables
from . import _execute
from ._checkpointing import checkpoint_now
from ._files import LocalAccess, WorkDirAccess, list_files, read_file, write_file
from ._lifecycle import (
    STATE_LOST,
    await_pending_restart,
    close_session,
    ensure_kernel,
    local_backend,
    prepare_work_dir,
    warn,
)
from ._pool import KernelConfig, KernelPool
from ._replay import ReplayReport
from ._state import (
    fork_session,
    replay_session,
    restart_keeping_state,
    restore_session,
)
from ._transcript import Transcript, note_cell

__all__ = ["AsyncSession"]


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
        sandbox: contain the local kernel (``kernelexec.Sandbox``: the files
            it may read and write, the network, memory and processes), from
            inside its own process, before any code runs. None (the default):
            the default ``Sandbox()`` where this machine can contain a kernel,
            else uncontained, said once in the log (``KERNELEXEC_SANDBOX=0``:
            uncontained); True: the default ``Sandbox()``, or an error where it
            cannot be had; False: not contained
            (``docs/features/containment.md``). A pool's sessions take the
            pool's. ``session.sandbox`` says the policy in force.
        checkpoint_every: seconds; after an execution, once this long has
            passed since the last, the kernel's variables are checkpointed to
            a private folder (never the work dir, where the kernel's code could
            forge one), and a kernel that dies (a crash,
            its memory limit, a lost Ray node) is given them back in the new
            kernel at the next execution, which says so. None (the default):
            a dead kernel's state is gone.

    Raises:
        ConfigurationError: a setting is unusable (a timeout that is not
            positive, a work dir that cannot be made, both ``backend`` and
            ``pool``, a package that is no requirement of the index: a path,
            an archive, a URL or an option; a ``sandbox`` this machine cannot
            give, or given with ``backend``: give that its own). Raised
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
        sandbox: Sandbox | bool | None = None,
        checkpoint_every: float | None = None,
    ) -> None:
        if not timeout > 0 or not interrupt_grace > 0:
            raise ConfigurationError("timeout and interrupt_grace must be positive seconds")
        if checkpoint_every is not None and (
            isinstance(checkpoint_every, bool)
            or not isinstance(checkpoint_every, (int, float))
            or not checkpoint_every > 0
        ):
            raise ConfigurationError("checkpoint_every is None or a number of seconds > 0")
        if backend is not None and pool is not None:
            raise ConfigurationError(
                "give a session backend= or pool=, not both: a pool's kernels are local "
                "processes, and a backend says where the session's kernel runs"
            )
        if backend is not None and sandbox is not None:
            raise ConfigurationError(
                "give a session backend= or sandbox=, not both: a LocalBackend takes its "
                "own sandbox= (a Docker kernel is contained by Docker)"
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
            sandbox=sandbox,
            base=pool.config if pool is not None else None,
        )
        self._env_request = config.env_request()
        if backend is not None and self._env_request is not None:
            raise ConfigurationError(
                "packages=, python_version= and venv= make an environment for a local kernel; "
                "for a Docker kernel give DockerBackend(packages=...) instead"
            )
        self.work_dir = prepare_work_dir(
            work_dir, within=pool.sessions_root() if pool is not None else None
        )
        self.notebook_path = self.work_dir / notebook
        self.timeout = timeout
        self.limits = config.limits
        self.interrupt_grace = interrupt_grace
        self.auto_restart = auto_restart
        self._config = config
        self._zygote = zygote
        self._startup_timeout = startup_timeout
        self._backend: KernelBackend = backend or local_backend(
            config, config.python, zygote=zygote, startup_timeout=startup_timeout
        )
        if checkpoint_every is not None and not getattr(self._backend, "checkpoints", True):
            raise ConfigurationError(
                "checkpoint_every needs a kernel that can be checkpointed; this one's work dir "
                "is its Ray node's own (RayBackend(shared_work_dirs=True) shares the session's)"
            )
        # The host's own cap on every message the kernel sends, wherever it runs.
        self._backend.max_message_bytes = config.limits.max_message_bytes
        # The kernel cuts outputs to the byte caps before sending them.
        self._env = kernel_env(config.kernel_env())
        self._pool = pool
        unfit = pool.unfit(config, self.work_dir) if pool is not None else None
        if unfit is not None:
            self._pool = None
            warn(
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
        self._interrupts: Interrupts | None = None  # the execution's that holds the lock
        # Whether its kernel says execute_input as it begins the code (None: not
        # known yet). An interrupt before then waits for it, unless it does not.
        self._announces: bool | None = None
        self._closed = False
        self._dead: str | None = None  # why the kernel is down, when auto_restart is off
        self._checkpoint_every = checkpoint_every
        # When the last recovery checkpoint was made (monotonic); None: none yet, so the
        # first execution makes one (a clock that counts from boot may be younger than
        # checkpoint_every).
        self._recovery_at: float | None = None
        self._recover = False  # a dead kernel's replacement is to get the recovery checkpoint
        self._recovery_root: Path | None = None  # the private folder holding it
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
        return await replay_session(
            cls, path, work_dir, until=until, include_failed=include_failed, options=options
        )

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
    def file_access(self) -> WorkDirAccess:
        """The session's files, where its kernel can see them: the work dir, and on a
        Ray node without shared storage, the kernel's own folder there too. The doors'
        files APIs and ``files``, ``download`` and ``upload`` go through it; no link is
        followed on either side."""
        remote = getattr(self._backend, "files", None)
        found = remote(self.work_dir) if callable(remote) else None
        return found if found is not None else LocalAccess(self.work_dir)

    async def files(self) -> list[FileInfo]:
        """The session's files (at most 10,000): path, size, modified time, as a
        server's ``files()`` lists them; links and pipes left out."""
        return await list_files(self.file_access)

    async def download(self, path: str) -> bytes:
        """A file of the session's, whole (a kernel's on its Ray node too).

        Raises:
            FileRefusedError: the path is malformed, climbs, leads through a
                link, or names no regular file.
        """
        return await read_file(self.file_access, path)

    async def upload(self, path: str, data: bytes | str) -> FileInfo:
        """Writes a file where the kernel reads it, whole or not at all (text as UTF-8).

        Raises:
            FileRefusedError: as for ``download``, or ``path`` is the transcript.
            DiskSpaceError: the disk has no room for it.
        """
        return await write_file(self.file_access, path, data, self.work_dir, self.notebook_path)

    @property
    def sandbox(self) -> Sandbox | None:
        """The containment of the session's kernel; None where it runs uncontained.

        Only local kernels of kernelexec's own are contained by kernelexec (a
        Docker kernel by Docker; a gateway's by whoever runs the gateway).
        """
        found = getattr(self._backend, "sandbox", None)
        return found if isinstance(found, Sandbox) else None

    @property
    def kernel_pid(self) -> int | None:
        """The host's process id of a local kernel (the root of its process tree: a
        contained kernel's is the init of its PID namespace); None for others, or none
        running."""
        pid = getattr(self._backend, "pid", None)
        return pid if isinstance(pid, int) else None

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
            await ensure_kernel(self)
        return self

    @overload
    async def execute(
        self,
        code: str | bytes,
        *,
        language: str | None = ...,
        timeout: float | None = ...,
        stdin: Sequence[str] | InputAnswerer | None = ...,
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
        stdin: Sequence[str] | InputAnswerer | None = ...,
        on_output: OutputListener | None = ...,
        background: Literal[True],
    ) -> Execution: ...

    async def execute(
        self,
        code: str | bytes,
        *,
        language: str | None = "python",
        timeout: float | None = None,
        stdin: Sequence[str] | InputAnswerer | None = None,
        on_output: OutputListener | None = None,
        background: bool = False,
    ) -> ExecutionResult | Execution:
        """Runs one block of code and returns what it did.

        Args:
            code: Python, or shell when ``language`` is "bash"/"sh"/"shell".
            language: "python" (also "py", "python3", "ipython", None) or a shell.
            timeout: seconds for this execution; default the session's.
            stdin: answers for ``input()``/``getpass()``, in order. Without
                them, asking for input fails at once instead of hanging. Or
                an async callable given each prompt as it comes, returning
                the answer (None: end of file), within the timeout; not
                shown in the output. A door's own channel from the kernel's
                code (the Agent Framework integration's ``call_tool``).
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
        return await _execute.execute(
            self, code, language=language, timeout=timeout, stdin=stdin, on_output=on_output
        )

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

    def _record_cell(self, cell: dict[str, Any]) -> None:
        """Adds to the transcript a cell this session's executions did not make: code a
        person ran on its kernel through the server's Jupyter channels (``_attached``)."""
        if not self._closed:
            self._transcript.add(cell)

    async def interrupt(self) -> None:
        """Interrupts whatever the kernel is running (a KeyboardInterrupt).

        This session's execution that the kernel has not begun yet (just
        sent, or its kernel still starting) is interrupted as it begins, not
        before: a kernel ignores an interrupt until then, and the code ran in
        full. (One interrupt, not two: a second one, landing as the kernel
        handles the first, can stop the kernel's own request loop.)
        """
        self._check_open()
        interrupts = self._interrupts
        if interrupts is not None and not interrupts.begun and self._announces is not False:
            interrupts.pending = True
        else:
            await self._interrupt_kernel()

    async def _interrupt_kernel(self) -> None:
        """Interrupts whatever the kernel runs, now: a person's interrupt, from JupyterLab.

        Not deferred for this session's execution: the person means the cell
        that runs, their own perhaps, with the agent's waiting behind it.
        """
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
            self._recover = False  # a restart asked for is a fresh kernel
            await await_pending_restart(self)
            if keep_state and self._kernel_up and await self._backend.is_alive():
                return await restart_keeping_state(self)
            if self._kernel_up:
                await _telemetry.kernel_restart(self, self._backend.restart())
            else:
                await ensure_kernel(self)
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
            await ensure_kernel(self)
            if not await self._backend.is_alive():
                raise CheckpointError("the kernel has died; there is no state to checkpoint")
            return await checkpoint_now(
                self, path, files, timeout, variable_timeout, max_bytes=max_bytes
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
        with nothing re-run; the two diverge from then on. A contained kernel
        (``sandbox``) is checkpointed and restored into a new contained one
        (a process copy would keep its file access). A kernel holding
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
        return await list_variables(self._backend)

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
        return await inspect_variable(self._backend, name)

    async def flush(self) -> None:
        """Returns once the transcript file holds every execution so far."""
        await self._transcript.flush()

    @_telemetry.session_span("kernelexec.session.close")
    async def close(self) -> None:
        """Shuts the kernel (and its children) down; files and transcript stay."""
        await close_session(self)

    # -- internals

    def _check_open(self) -> None:
        if self._closed:
            raise SessionClosedError("this session is closed; create a new one")
