"""KernelPool: local kernels started ahead of time, so a session is ready at once."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import tempfile
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from .._backends import LocalBackend
from .._containment._platform import choose
from .._containment._sandbox import Sandbox
from .._containment._start import movable_to
from .._environment import kernel_env
from .._exceptions import ConfigurationError, KernelStartError
from .._execution._models import Limits
from .._venvs._venv import EnvRequest, check_packages, ensure_env

__all__ = ["KernelConfig", "KernelPool"]

log = logging.getLogger("kernelexec")


@dataclass(frozen=True)
class KernelConfig:
    """What a local kernel is started with.

    Two kernels of one configuration are interchangeable before their first
    execution, so a session of a pool's configuration can take the pool's.
    Of ``limits`` only the byte caps reach the kernel (``Limits.kernel_env``);
    the rest apply in this process, so they may differ. ``packages``,
    ``python_version`` and ``venv`` ask for an environment made for the
    kernel (``_venvs/_venv.py``); ``packages`` None asks for none.
    ``sandbox`` is what was asked for (None: the default); ``policy()`` the
    containment in force.
    """

    kernel_name: str = "python3"
    python: str | None = None
    env: tuple[tuple[str, str], ...] = ()  # the caller's variables, sorted
    preload: str | None = None
    limits: Limits = field(default_factory=Limits)
    packages: tuple[str, ...] | None = None
    python_version: str | None = None
    venv: str | None = None  # an absolute path
    sandbox: Sandbox | bool | None = None

    @classmethod
    def of(
        cls,
        *,
        kernel_name: str | None = None,
        python: str | None = None,
        env: Mapping[str, str] | None = None,
        preload: str | None = None,
        limits: Limits | None = None,
        packages: Sequence[str] | None = None,
        python_version: str | None = None,
        venv: str | Path | None = None,
        sandbox: Sandbox | bool | None = None,
        base: KernelConfig | None = None,
    ) -> KernelConfig:
        """The settings given; each one left None is ``base``'s (a pool's), or the default.

        ``preload=""`` asks for no preload even when ``base`` has one. ``python``
        and ``python_version`` are one choice: giving either drops ``base``'s other.

        Raises:
            ConfigurationError: a package looks like an option, ``venv`` is not a path.
        """
        base = base or cls()
        interpreter_given = python is not None or python_version is not None
        config = cls(
            base.kernel_name if kernel_name is None else kernel_name,
            python if interpreter_given else base.python,
            base.env if env is None else tuple(sorted(env.items())),
            base.preload if preload is None else preload or None,
            base.limits if limits is None else limits,
            base.packages if packages is None else check_packages(packages),
            python_version if interpreter_given else base.python_version,
            base.venv if venv is None else _absolute(venv),
            base.sandbox if sandbox is None else sandbox,
        )
        config.env_request()  # a malformed request fails here, at construction
        return config

    def policy(self) -> Sandbox | None:
        """The containment of this configuration's kernels (None: uncontained).

        Raises:
            ConfigurationError: a sandbox was asked for and cannot be had.
        """
        return choose(self.sandbox, ours=self.kernel_name == "python3" or self.python is not None)

    def env_request(self) -> EnvRequest | None:
        """The environment to make for the kernel; None when it runs in ``python`` as is.

        Raises:
            ConfigurationError: the request cannot work (python and python_version
                both, a version that is not "3.x", another kernel_name).
        """
        request = EnvRequest.of(
            packages=self.packages,
            python=self.python,
            python_version=self.python_version,
            venv=self.venv,
        )
        if request is not None and self.kernel_name != "python3":
            raise ConfigurationError(
                f"packages=, python_version= and venv= make an environment for kernelexec's "
                f"Python kernel, not for kernel_name={self.kernel_name!r}; leave one out"
            )
        return request

    def kernel_env(self) -> dict[str, str]:
        """The variables the kernel gets on top of the filtered environment."""
        # The byte caps last: the kernel reads them, whatever env says.
        return {**dict(self.env), **self.limits.kernel_env()}

    def differences(self, other: KernelConfig) -> list[str]:
        """What keeps a kernel started for ``other`` from serving this configuration.

        One phrase per setting, naming this side's value and ``other``'s; for
        ``env`` only the names, as values may be secrets.
        """
        found = [
            f"{name}={_shown(mine)} (the pool's: {_shown(theirs)})"
            for name, mine, theirs in (
                ("kernel_name", self.kernel_name, other.kernel_name),
                ("python", self.python, other.python),
                ("preload", self.preload, other.preload),
                ("packages", self.packages, other.packages),
                ("python_version", self.python_version, other.python_version),
                ("venv", self.venv, other.venv),
            )
            if mine != theirs
        ]
        mine_policy, theirs_policy = self.policy(), other.policy()
        if mine_policy != theirs_policy:
            found.append(f"sandbox={mine_policy!r} (the pool's: {theirs_policy!r})")
        names = _changed(dict(self.env), dict(other.env))
        if names:
            found.append(f"env with other values for {', '.join(names)}")
        caps = _changed(self.limits.kernel_env(), other.limits.kernel_env())
        if caps:
            shown = ", ".join(k.removeprefix("KERNELEXEC_").lower() for k in caps)
            found.append(f"limits with other byte caps ({shown})")
        # The host's cap is set on a kernel's sockets when they connect.
        mine, theirs = self.limits.max_message_bytes, other.limits.max_message_bytes
        if mine != theirs:
            found.append(f"limits.max_message_bytes={mine:,} (the pool's: {theirs:,})")
        return found


def _changed(mine: dict[str, str], theirs: dict[str, str]) -> list[str]:
    """The names whose values differ, or that one side lacks."""
    return sorted(k for k in mine.keys() | theirs.keys() if mine.get(k) != theirs.get(k))


def _shown(value: str | tuple[str, ...] | None) -> str:
    if value is None:
        return "None"
    if isinstance(value, tuple):
        return "[" + ", ".join(map(_shown, value)) + "]"
    return repr(value if len(value) <= 60 else value[:57] + "...")


def _umask() -> int:
    """This process's umask (a slot renamed to a work dir keeps the mode mkdir gives)."""
    with contextlib.suppress(OSError, ValueError):
        with open("/proc/self/status") as file:
            for line in file:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    return 0o022


def _absolute(venv: str | Path) -> str:
    if not isinstance(venv, (str, os.PathLike)):
        raise ConfigurationError(f"venv= takes a path, not {type(venv).__name__}")
    return str(Path(venv).expanduser().absolute())


class KernelPool:
    """Kernels of one configuration, started and preloaded before anyone asks.

    A session given ``pool=`` takes the pool's configuration (kernel name,
    interpreter, env, preload, limits) for every one of those arguments it is
    not given, and a kernel from the pool. A session that asks for another
    configuration cannot use the pool's kernels: it starts its own, cold, with
    a warning that names the difference.

    A kernel leaves the pool for one session and never comes back, so no
    session ever sees another's state; the pool starts a replacement in the
    background. A taken kernel is moved to the session's work dir before its
    first execution (the request is queued ahead of it, not waited for).

    Args:
        size: how many ready kernels to keep.
        kernel_name, python, env, preload, limits, packages, python_version, venv: the
            configuration, as for ``AsyncSession``; the sessions
            given this pool take it. An environment asked for is made (or
            found made) once, before the first kernel starts.
        startup_timeout: seconds a new kernel (and its preload) may take.
        zygote: fork the pool's kernels from a zygote, as for ``AsyncSession``.
        sandbox: contain the pool's kernels, as for ``AsyncSession``. A
            contained kernel may write only the folder it started in: each
            waits in a folder of its own, which becomes the session's work dir
            when a session takes it (renamed there: the session's work dir must
            be new or empty, and below ``work_root``, the one folder of the
            machine's temp dir or home the kernel sees). A session whose work
            dir is not starts its own kernel.
        work_root: where the sessions' work dirs are; the pool makes a folder
            of its own in it, for its waiting kernels. Default: the temp dir;
            for contained kernels, a folder of the pool's own there, in which
            its sessions' default work dirs are made too (a contained kernel
            sees that folder, not the whole temp dir).
        refill_delay: seconds between taking a kernel and starting its
            replacement, so a kernel's boot (a CPU-second of imports) does not
            slow the session that was just handed one.

    A preload that fails is not hidden: ``last_error`` says why, the pool stops
    refilling, and ``wait_ready`` raises it.
    """

    def __init__(
        self,
        size: int = 2,
        *,
        kernel_name: str = "python3",
        python: str | None = None,
        env: Mapping[str, str] | None = None,
        preload: str | None = None,
        limits: Limits | None = None,
        packages: Sequence[str] | None = None,
        python_version: str | None = None,
        venv: str | Path | None = None,
        startup_timeout: float = 60.0,
        refill_delay: float = 1.0,
        zygote: bool | None = None,
        sandbox: Sandbox | bool | None = None,
        work_root: str | Path | None = None,
    ) -> None:
        if size < 1:
            raise ConfigurationError("KernelPool size must be at least 1")
        self.size = size
        self._zygote = zygote
        self._work_root = None if work_root is None else Path(work_root)
        self.config = KernelConfig.of(
            kernel_name=kernel_name,
            python=python,
            env=env,
            preload=preload,
            limits=limits,
            packages=packages,
            python_version=python_version,
            venv=venv,
            sandbox=sandbox,
        )
        self.sandbox = self.config.policy()
        self._env_request = self.config.env_request()
        self._env_python: str | None = None
        self._env_lock = asyncio.Lock()
        self.startup_timeout = startup_timeout
        self.refill_delay = refill_delay
        self.last_error: str | None = None
        self._env = kernel_env(self.config.kernel_env())
        self._ready: deque[LocalBackend] = deque()
        self._starting: set[asyncio.Task[None]] = set()
        self._changed = asyncio.Event()
        self._home: Path | None = None
        self._closed = False

    def __repr__(self) -> str:
        return f"<KernelPool ready={len(self._ready)}/{self.size} starting={len(self._starting)}>"

    async def __aenter__(self) -> KernelPool:
        return self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    @property
    def ready(self) -> int:
        """Kernels waiting to be taken."""
        return len(self._ready)

    def start(self) -> KernelPool:
        """Begins filling the pool in the background; returns at once."""
        self._refill()
        return self

    async def wait_ready(self, timeout: float | None = None) -> None:
        """Returns once the pool is full.

        Raises:
            KernelStartError: a kernel or its preload failed to start.
        """
        await asyncio.wait_for(self._filled(), timeout)

    async def _filled(self) -> None:
        while len(self._ready) < self.size:
            if self.last_error is not None:
                raise KernelStartError(f"the kernel pool cannot fill: {self.last_error}")
            self._refill()
            self._changed.clear()
            await self._changed.wait()

    def unfit(self, config: KernelConfig, work_dir: Path | None = None) -> str | None:
        """Why this pool's kernels cannot serve a session of ``config`` in ``work_dir``.

        None when they can.
        """
        if self._closed:
            return "the pool is closed"
        differences = config.differences(self.config)
        if differences:
            return (
                f"the session asks for {'; '.join(differences)}. Leave those arguments out "
                "to take the pool's, or make a pool of this configuration"
            )
        root = self.sessions_root() if self.sandbox is not None else None
        if root is not None and work_dir is not None and not movable_to(work_dir, root):
            return (
                f"its kernels are contained, and one can only take a work dir below the "
                f"pool's work root ({root}), not {work_dir}. Give the pool "
                "work_root= the folder your sessions' work dirs are in"
            )
        return None

    def sessions_root(self) -> Path | None:
        """Where a session of this pool makes its default work dir; None: the temp dir.

        A contained kernel's work dir must be below the pool's work root (see
        ``work_root``), so a contained pool makes one of its own if given none.
        """
        if self.sandbox is None:
            return self._work_root
        if self._work_root is None:
            self._work_root = Path(tempfile.mkdtemp(prefix="kernelexec-pool-root-")).resolve()
        return self._work_root

    async def take(self, cwd: Path) -> LocalBackend | None:
        """A ready kernel, moved to ``cwd``; None when none is ready (start one cold).

        None too when a contained kernel cannot take ``cwd`` (not empty, or
        on another file system): the kernel stays in the pool.
        """
        while self._ready:
            backend = self._ready.popleft()
            if not await backend.is_alive():
                self._refill(delay=self.refill_delay)
                await backend.shutdown()
                continue
            if not backend.take_work_dir(cwd):
                self._ready.appendleft(backend)
                return None
            self._refill(delay=self.refill_delay)
            return backend
        self._refill()
        return None

    async def close(self) -> None:
        """Stops every kernel the pool holds or is starting."""
        self._closed = True
        for task in list(self._starting):
            task.cancel()
        for task in list(self._starting):
            with contextlib.suppress(BaseException):
                await task
        while self._ready:
            await self._ready.popleft().shutdown()
        if self._home is not None:
            shutil.rmtree(self._home, ignore_errors=True)
            self._home = None

    def _refill(self, delay: float = 0.0) -> None:
        if self._closed or self.last_error is not None:
            return
        missing = self.size - len(self._ready) - len(self._starting)
        for _ in range(missing):
            task = asyncio.get_running_loop().create_task(self._start_one(delay))
            self._starting.add(task)
            task.add_done_callback(self._starting.discard)

    async def _start_one(self, delay: float) -> None:
        if delay:
            await asyncio.sleep(delay)
        if self._home is None:
            # Where waiting kernels sit until a session moves them to its work dir.
            root = self.sessions_root()
            self._home = Path(tempfile.mkdtemp(prefix="kernelexec-pool-", dir=root))
        try:
            python = await self._python()
        except ConfigurationError as exc:  # the environment could not be made
            self.last_error = str(exc)
            log.warning("kernelexec: the kernel pool stopped filling: %s", exc)
            self._changed.set()
            return
        backend = LocalBackend(
            kernel_name=self.config.kernel_name,
            python=python,
            startup_timeout=self.startup_timeout,
            preload=self.config.preload,
            zygote=self._zygote,
            max_message_bytes=self.config.limits.max_message_bytes,
            sandbox=self.sandbox or False,
        )
        # A contained kernel's folder becomes its session's work dir; others share the home.
        cwd = self._home
        if self.sandbox is not None:
            cwd = Path(tempfile.mkdtemp(prefix="kernel-", dir=self._home))
            cwd.chmod(0o777 & ~_umask())
            backend.movable = self._home.parent  # sessions' work dirs are made there
        try:
            await backend.start(cwd=cwd, env=self._env)
            await backend.warm_up()
        except KernelStartError as exc:
            self.last_error = str(exc)
            log.warning("kernelexec: the kernel pool stopped filling: %s", exc)
        except asyncio.CancelledError:
            await backend.shutdown()
            raise
        else:
            if self._closed:
                await backend.shutdown()
            else:
                self._ready.append(backend)
        finally:
            self._changed.set()

    async def _python(self) -> str | None:
        """The kernels' interpreter: the environment's, made once for every kernel."""
        if self._env_request is None:
            return self.config.python
        async with self._env_lock:
            if self._env_python is None:
                self._env_python = await ensure_env(self._env_request)
        return self._env_python
