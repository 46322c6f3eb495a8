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

from packaging.requirements import InvalidRequirement, Requirement

from .._environment import venv_cache_dir
from .._exceptions import ConfigurationError
from ._installer import Installers

__all__ = ["ARCHIVES", "EnvRequest", "check_packages", "ensure_env", "make_env"]

# The kernel-side code's oldest ipykernel (pyproject.toml's bound).
IPYKERNEL = "ipykernel>=7.0.0"
# What a session's checkpoint() needs in the kernel (kernelexec/_kernel/checkpoint.py).
CLOUDPICKLE = "cloudpickle>=3.0"
_FORMAT = 1  # bump when what goes into an environment changes
_MARKER = ".kernelexec-env.json"
_BUILDING = ".kernelexec-building"
_VERSION = re.compile(r"\d+\.\d+(\.\d+)?")
# What pip and uv take for a file to build rather than a name on the index.
ARCHIVES = (
    ".zip",
    ".whl",
    ".egg",
    ".tar",
    ".tar.gz",
    ".tgz",
    ".tar.bz2",
    ".tbz",
    ".tar.xz",
    ".txz",
    ".tlz",
    ".tar.lz",
    ".tar.lzma",
)


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
    """The requirement strings, each checked to name a package of the index, as pip reads them.

    A package is a PEP 508 requirement for a project on the package index
    (``rich``, ``pandas>=2``, ``requests[socks]; python_version >= "3.10"``).
    pip and uv would take a path, an archive's file name (a bare ``x-1.0.zip``
    too, found in their working directory), a URL (``x @ https://...``) or an
    option (``--index-url=...``) from somewhere else and build it on this
    machine, so each is refused, everywhere (a requirements file or a shell
    word would not keep an option after ``--``). Each comes back as
    ``packaging`` writes it, which is what pip parses it into.

    Raises:
        ConfigurationError: one is not such a requirement; the message says why.
    """
    if isinstance(packages, (str, bytes)):
        raise ConfigurationError(
            f"{what}= takes a list of requirement strings, not one string: [{packages!r}]"
        )
    return tuple(_requirement(package, what) for package in packages)


def _requirement(package: object, what: str) -> str:
    if not isinstance(package, str) or not package.strip():
        raise ConfigurationError(f"{what}= holds {package!r}, which is not a requirement")
    text = package.strip()
    why = None
    if any(ord(c) < 32 or c == "\x7f" for c in package) or text.endswith("\\"):
        why = "has a line break, a control character or a trailing backslash"
    elif text.startswith("-"):
        why = "looks like an installer option"
    elif text.startswith(".") or "/" in text or "\\" in text:
        why = "is a path"
    else:
        try:
            requirement = Requirement(text)
        except InvalidRequirement as exc:
            why = f"is not a requirement ({str(exc).splitlines()[0]})"
        else:
            if requirement.url is not None:
                why = "is a URL requirement"
            elif requirement.name.lower().endswith(ARCHIVES):
                why = "names an archive file"
    if why is not None:
        raise ConfigurationError(
            f"{what}= holds {package[:200]!r}, which {why}; give requirements for packages "
            "of the index only, such as 'rich' or 'pandas>=2' (no paths, archives, URLs or "
            "installer options)"
        )
    return str(requirement)


async def ensure_env(request: EnvRequest) -> str:
    """``make_env`` in a worker thread: building takes seconds to minutes."""
    return await asyncio.to_thread(make_env, request)


def make_env(request: EnvRequest) -> str:
    """Makes the environment, or finds it made; returns its Python.

    Raises:
        ConfigurationError: no such Python version, or ``venv=`` is a path that
            is not a virtual environment.
        EnvironmentBuildError: the environment could not be made or a package
            not installed; the message names it and gives the installer's reason.
    """
    packages = check_packages(request.packages)  # an EnvRequest made without ``of`` too
    base, version = _base_interpreter(request)
    inputs = {
        "format": _FORMAT,
        "python": base,
        "version": version,
        "packages": sorted(set(packages)),
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
                packages,
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
        wanted = (IPYKERNEL, CLOUDPICKLE, *packages)
        uv = shutil.which("uv")
        with Installers(path, fd) as installers:
            if uv is not None:
                if created:
                    # --seed: pip in the environment, so `%pip install` in the kernel works.
                    argv = [uv, "venv", "--seed", "--allow-existing", "--python", base, str(path)]
                    installers.make("uv venv", argv)
                argv = [uv, "pip", "install", "--python", str(python), "--", *wanted]
                installers.install("uv pip install", argv, wanted)
            else:
                if created:
                    installers.make("python -m venv", [base, "-m", "venv", str(path)])
                argv = [str(python), "-m", "pip", "install", "--no-input", "--", *wanted]
                installers.install("pip install", argv, wanted)
        marker = path / f"{_MARKER}.tmp"
        marker.write_text(json.dumps({"key": key, **inputs}, indent=1), encoding="utf-8")
        os.replace(marker, path / _MARKER)
        (path / _BUILDING).unlink(missing_ok=True)
    except BaseException:
        if created:
            shutil.rmtree(path, ignore_errors=True)
        raise


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
