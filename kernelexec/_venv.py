"""Virtual environments made for a kernel: ipykernel plus the packages asked for.

``AsyncSession(packages=[...], python_version="3.12", venv=path)`` hosts its
kernel in an environment made here, with ``uv`` when it is on PATH (seconds)
and the standard library's ``venv`` and pip otherwise.

Where: ``venv=`` a path, or else a directory of the cache (``venv_cache_dir()``,
``KERNELEXEC_VENV_DIR``) named by a hash of the inputs (the base interpreter
and its version, the packages), so the same inputs find the same environment.

Safe to share and to interrupt:

- An environment is complete when its marker file, written last and
  atomically, holds its inputs' hash. A start that finds the marker does
  nothing else, so a second session with the same inputs is ready at once.
- Building happens under an exclusive ``flock`` on a lock file in the cache's
  ``locks/``; the installer subprocesses inherit it, so a build whose Python
  died still holds the lock while its pip runs. Two sessions, threads or
  processes asking for one environment build it once; the others wait and
  then find it complete.
- A directory made here carries a "building" file until it is complete. One
  found with it is what an interrupted build left, and is deleted before the
  build starts again, so a half environment is never used. An existing venv
  given as ``venv=`` (not made here) is installed into, never deleted.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from ._environment import venv_cache_dir
from ._exceptions import ConfigurationError, EnvironmentBuildError

__all__ = ["EnvRequest", "check_packages", "ensure_env", "make_env", "output_tail"]

# The kernel-side code's oldest ipykernel (pyproject.toml's bound).
IPYKERNEL = "ipykernel>=7.0.0"
# What a session's checkpoint() needs in the kernel (kernelexec/_kernel/checkpoint.py).
CLOUDPICKLE = "cloudpickle>=3.0"
_FORMAT = 1  # bump when what goes into an environment changes
_MARKER = ".kernelexec-env.json"
_BUILDING = ".kernelexec-building"
_VERSION = re.compile(r"\d+\.\d+(\.\d+)?")
_TAIL_LINES = 40
_TAIL_CHARS = 4000
_INSTALL_TIMEOUT = 1800.0


@dataclass(frozen=True)
class EnvRequest:
    """What environment a kernel asks for; see ``AsyncSession``'s arguments.

    Attributes:
        packages: requirement strings, checked by ``check_packages``.
        python: the interpreter to base the environment on; None for this one
            (or the one ``python_version`` names).
        python_version: "3.12" or "3.12.1": find that interpreter.
        venv: where the environment goes; None for the cache.
    """

    packages: tuple[str, ...] = ()
    python: str | None = None
    python_version: str | None = None
    venv: Path | None = None

    @classmethod
    def of(
        cls,
        *,
        packages: Sequence[str] | None,
        python: str | None,
        python_version: str | None,
        venv: str | Path | None,
    ) -> EnvRequest | None:
        """The request these arguments make, or None when they ask for no environment.

        Raises:
            ConfigurationError: an argument is malformed (a package that looks
                like an option, a version that is not "3.x", ...).
        """
        if packages is None and python_version is None and venv is None:
            return None
        if python is not None and python_version is not None:
            raise ConfigurationError(
                "give python= (an interpreter) or python_version= (a version to find), not both"
            )
        if python_version is not None and (
            not isinstance(python_version, str) or not _VERSION.fullmatch(python_version)
        ):
            raise ConfigurationError(
                f'python_version must be a version like "3.12" or "3.12.1", not {python_version!r}'
            )
        if venv is not None and not isinstance(venv, (str, os.PathLike)):
            raise ConfigurationError(f"venv= takes a path, not {type(venv).__name__}")
        return cls(
            packages=check_packages(packages or ()),
            python=python,
            python_version=python_version,
            venv=Path(venv).expanduser().absolute() if venv is not None else None,
        )


def check_packages(packages: Sequence[str], *, what: str = "packages") -> tuple[str, ...]:
    """The requirement strings, checked so that none can act as an installer option.

    A package is passed to pip (and uv) after ``--``, but in a requirements
    file or a shell word it would not be, so a leading "-" (``--index-url=...``
    would install from anywhere) and line breaks are refused everywhere.

    Raises:
        ConfigurationError: one is not a plain requirement string.
    """
    if isinstance(packages, (str, bytes)):
        raise ConfigurationError(
            f"{what}= takes a list of requirement strings, not one string: [{packages!r}]"
        )
    checked: list[str] = []
    for package in packages:
        if not isinstance(package, str) or not package.strip():
            raise ConfigurationError(f"{what}= holds {package!r}, which is not a requirement")
        if package.strip().startswith("-"):
            raise ConfigurationError(
                f"{what}= holds {package!r}, which looks like an installer option; "
                "give requirements only (name, version, URL or path), no options"
            )
        if any(ord(c) < 32 or c == "\x7f" for c in package) or package.rstrip().endswith("\\"):
            raise ConfigurationError(
                f"{what}= holds {package!r}: a requirement has no line breaks, control "
                "characters or trailing backslash"
            )
        checked.append(package.strip())
    return tuple(checked)


async def ensure_env(request: EnvRequest) -> str:
    """``make_env`` in a worker thread: building takes seconds to minutes."""
    return await asyncio.to_thread(make_env, request)


def make_env(request: EnvRequest) -> str:
    """Makes the environment, or finds it made; returns its Python.

    Raises:
        ConfigurationError: no such Python version, or ``venv=`` is a path that
            is not a virtual environment.
        EnvironmentBuildError: the environment could not be made or a package
            not installed; the message ends with the installer's output.
    """
    base, version = _base_interpreter(request)
    inputs = {
        "format": _FORMAT,
        "python": base,
        "version": version,
        "packages": sorted(set(request.packages)),
        "ipykernel": IPYKERNEL,
        "cloudpickle": CLOUDPICKLE,
    }
    key = hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:16]
    major_minor = ".".join(version.split(".")[:2])
    path = request.venv or venv_cache_dir() / f"py{major_minor}-{key}"
    python = path / "bin" / "python"
    if _complete(path, key):
        return str(python)
    with _locked(path) as lock_fd:
        if not _complete(path, key):  # another builder may have finished meanwhile
            _build(
                path,
                base,
                request.packages,
                inputs,
                key,
                cached=request.venv is None,
                fd=lock_fd,
            )
    return str(python)


def _complete(path: Path, key: str) -> bool:
    try:
        marker = json.loads((path / _MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return (
        isinstance(marker, dict)
        and marker.get("key") == key
        and not (path / _BUILDING).exists()
        and (path / "bin" / "python").exists()
    )


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[int]:
    """An exclusive flock for building ``path``, shared with the installers started under it."""
    locks = venv_cache_dir() / "locks"
    try:
        locks.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigurationError(
            f"cannot create {locks} for the environment's lock: {exc}; "
            "set KERNELEXEC_VENV_DIR to a writable directory"
        ) from exc
    name = hashlib.sha256(str(path).encode()).hexdigest()[:16]
    fd = os.open(locks / f"{name}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield fd
    finally:
        os.close(fd)  # releases the lock once the installers holding it are gone too


def _build(
    path: Path,
    base: str,
    packages: tuple[str, ...],
    inputs: dict[str, object],
    key: str,
    *,
    cached: bool,
    fd: int,
) -> None:
    if (path / _BUILDING).exists() or (cached and path.exists()):
        # An interrupted build's remains (or a cache entry without its marker,
        # which is the same): never reused.
        shutil.rmtree(path)
    created = not path.exists() or (path.is_dir() and not any(path.iterdir()))
    if not created and not (path / "pyvenv.cfg").is_file():
        raise ConfigurationError(
            f"venv={path} exists and is not a virtual environment (no pyvenv.cfg); "
            "give a new path, an existing venv, or leave venv= out to use the cache"
        )
    try:
        if created:
            path.mkdir(parents=True, exist_ok=True)
            (path / _BUILDING).touch()
        python = path / "bin" / "python"
        uv = shutil.which("uv")
        if uv is not None:
            if created:
                # --seed: pip in the environment, so `%pip install` in the kernel works.
                _run([uv, "venv", "--seed", "--allow-existing", "--python", base, str(path)], fd)
            _run(
                [
                    uv,
                    "pip",
                    "install",
                    "--python",
                    str(python),
                    "--",
                    IPYKERNEL,
                    CLOUDPICKLE,
                    *packages,
                ],
                fd,
            )
        else:
            if created:
                _run([base, "-m", "venv", str(path)], fd)
            _run(
                [
                    str(python),
                    "-m",
                    "pip",
                    "install",
                    "--no-input",
                    "--",
                    IPYKERNEL,
                    CLOUDPICKLE,
                    *packages,
                ],
                fd,
            )
        marker = path / f"{_MARKER}.tmp"
        marker.write_text(json.dumps({"key": key, **inputs}, indent=1), encoding="utf-8")
        os.replace(marker, path / _MARKER)
        (path / _BUILDING).unlink(missing_ok=True)
    except BaseException:
        if created:
            shutil.rmtree(path, ignore_errors=True)
        raise


def _run(argv: list[str], fd: int) -> None:
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"}
    try:
        proc = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            errors="replace",
            env=env,
            pass_fds=(fd,),
            timeout=_INSTALL_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EnvironmentBuildError(f"`{_shown(argv)}` could not run: {exc}") from exc
    if proc.returncode != 0:
        raise EnvironmentBuildError(
            f"`{_shown(argv)}` failed (exit {proc.returncode}); fix the package list or "
            f"the interpreter. Its output ends:\n{output_tail(proc.stdout + proc.stderr)}"
        )


def _shown(argv: list[str]) -> str:
    return " ".join([Path(argv[0]).name, *argv[1:]])


def output_tail(output: str) -> str:
    """The end of an installer's (or a build's) output, where it says what failed.

    Without the lines of pip's noise that a machine's pip configuration adds.
    """
    lines = [
        line
        for line in output.strip().splitlines()
        if line.strip() and "is ignored: it is neither a file nor a directory" not in line
    ]
    text = "\n".join(lines[-_TAIL_LINES:])
    return text[-_TAIL_CHARS:]


def _base_interpreter(request: EnvRequest) -> tuple[str, str]:
    """The interpreter to make the environment with, and its version ("3.12.1")."""
    if request.python is not None:
        found = _probe(request.python)
        if found is None:
            raise ConfigurationError(f"python={request.python!r} does not run as a Python")
        return found
    wanted = request.python_version
    here = ".".join(map(str, sys.version_info[:3]))
    if wanted is None or _matches(here, wanted):
        return sys.executable, here
    tried: list[str] = []
    major_minor = ".".join(wanted.split(".")[:2])
    candidate = shutil.which(f"python{major_minor}")
    if candidate is not None:
        found = _probe(candidate)
        if found is not None and _matches(found[1], wanted):
            return found
        tried.append(f"{candidate} (" + (f"Python {found[1]})" if found else "does not run)"))
    uv = shutil.which("uv")
    if uv is not None:
        # Found among uv's installed Pythons too; never downloaded.
        proc = subprocess.run(
            [uv, "python", "find", "--no-python-downloads", wanted],
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=60,
            check=False,
        )
        found = _probe(proc.stdout.strip()) if proc.returncode == 0 else None
        if found is not None and _matches(found[1], wanted):
            return found
        tried.append("`uv python find`")
    how = f"`uv python install {wanted}`" if uv else "your OS's package or pyenv"
    raise ConfigurationError(
        f"no Python {wanted} found (tried python{major_minor} on PATH"
        + (f": {', '.join(tried)}" if tried else "")
        + f"); install it ({how}), or pass python= an interpreter's path"
    )


def _matches(version: str, wanted: str) -> bool:
    return version == wanted or version.startswith(wanted + ".")


@lru_cache(maxsize=32)
def _probe_cached(path: str, stamp: tuple[int, int]) -> tuple[str, str] | None:
    try:
        proc = subprocess.run(
            [
                path,
                "-c",
                "import sys; print(sys.executable); print('%d.%d.%d' % sys.version_info[:3])",
            ],
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = proc.stdout.split()
    if proc.returncode != 0 or len(lines) != 2:
        return None
    return lines[0], lines[1]


def _probe(path: str) -> tuple[str, str] | None:
    """The real executable behind ``path`` (a shim, a link) and its version; None if it fails."""
    resolved = shutil.which(path) or path
    try:
        st = os.stat(resolved)
    except OSError:
        return None
    return _probe_cached(resolved, (st.st_mtime_ns, st.st_ino))
