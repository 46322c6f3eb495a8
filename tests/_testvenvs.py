"""The venvs some tests need besides the suite's own environment, made by the suite itself.

pip cannot put these into the environment the tests run in, so the suite makes
them, once, in ``~/.cache/kernelexec-tests/`` (or ``$XDG_CACHE_HOME``):

- ``enterprise-gateway``: Jupyter Enterprise Gateway, which pins
  jupyter_server<2, jupyter_client<7 and pyzmq<25 (the ``enterprise_gateway``
  backend tests).
- ``ipykernel-<oldest>-<key>``: the oldest ipykernel pyproject.toml allows, in
  a venv that sees this Python's packages (kernelexec, pytest) through a
  ``.pth`` but has its own ipykernel (tests/test_oldest_ipykernel.py). ``key``
  names this Python, whose site folders the ``.pth`` lists.
- ``ag2`` and ``ag2-classic``: a bare venv holding only that extra's packages
  as pyproject.toml names them (one AG2 line: ``ag2`` 1.x, or the classic
  ``autogen``), where tests/test_extras.py resolves the other extra.

A test asks for one with ``@pytest.mark.test_venv(NAME)`` (on a fixture's
param too). conftest.py makes the venvs the selected tests name before any
test runs, outside every test's time limit, under a file lock so that
pytest-xdist's workers make each once; a venv is ready when its ``.complete``
file is there. A build that fails is written to ``.failed`` for this run, so
the other workers do not try again: the tests needing it skip with pip's
output (fail with CI=true). ``KERNELEXEC_TEST_EG_VENV`` and
``KERNELEXEC_TEST_OLD_IPYKERNEL_PYTHON`` (and ``KERNELEXEC_TEST_AG2_VENV``,
``KERNELEXEC_TEST_AG2_CLASSIC_VENV``) name ones made elsewhere instead; run
inside the oldest ipykernel's venv (as tests/test_oldest_ipykernel.py runs the
kernel-side tests), this Python is that one.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import shutil
import site
import subprocess
import sys
import sysconfig
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

from servers import file_lock

__all__ = [
    "MARKER",
    "NAMES",
    "build",
    "enterprise_gateway_venv",
    "extra_requirements",
    "extra_venv",
    "missing",
    "oldest_ipykernel",
    "oldest_ipykernel_python",
    "problem",
]

MARKER = "test_venv"
ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kernelexec-tests"
BUILD_TIMEOUT = 900.0  # per pip step; a cold cache downloads every package
_COMPLETE, _FAILED = ".complete", ".failed"


def oldest_ipykernel() -> str:
    """The lower bound of ipykernel in pyproject.toml's dependencies."""
    found = re.search(r'"ipykernel>=([0-9][0-9.]*)"', (ROOT / "pyproject.toml").read_text())
    assert found, "pyproject.toml: no ipykernel>= bound among the dependencies"
    return found[1]


def extra_requirements(extra: str) -> list[str]:
    """The requirements of one of pyproject.toml's extras, as it declares them."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return list(project["optional-dependencies"][extra])


def _site_dirs() -> list[str]:
    # A venv's too, which --system-site-packages would miss.
    return list(dict.fromkeys([*site.getsitepackages(), sysconfig.get_path("purelib")]))


def enterprise_gateway_venv() -> Path:
    return Path(os.environ.get("KERNELEXEC_TEST_EG_VENV") or CACHE / "enterprise-gateway")


def _oldest_ipykernel_venv() -> Path:
    key = hashlib.sha256("\0".join(_site_dirs()).encode()).hexdigest()[:10]
    return CACHE / f"ipykernel-{oldest_ipykernel()}-{key}"


# extra -> the variable that names a ready-made venv of it
_EXTRA_VENVS = {
    "ag2": "KERNELEXEC_TEST_AG2_VENV",
    "ag2-classic": "KERNELEXEC_TEST_AG2_CLASSIC_VENV",
}


def extra_venv(extra: str) -> Path:
    """The bare venv holding only ``extra``'s packages; made again when they change."""
    given = os.environ.get(_EXTRA_VENVS[extra])
    if given:
        return Path(given)
    key = hashlib.sha256("\n".join(extra_requirements(extra)).encode()).hexdigest()[:10]
    return CACHE / f"extra-{extra}-{key}"


def _running_the_oldest() -> bool:
    """This Python has the oldest ipykernel: the tests run inside that venv already."""
    try:
        return metadata.version("ipykernel") == oldest_ipykernel()
    except metadata.PackageNotFoundError:
        return False


def oldest_ipykernel_python() -> Path:
    given = os.environ.get("KERNELEXEC_TEST_OLD_IPYKERNEL_PYTHON")
    if given:
        return Path(given)
    if _running_the_oldest():
        return Path(sys.executable)
    return _oldest_ipykernel_venv() / "bin" / "python"


Step = Callable[[], str]
"""One step of making a venv: "" when it worked, else what went wrong."""


def _command(*argv: str) -> Step:
    def run() -> str:
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=BUILD_TIMEOUT)
        except subprocess.TimeoutExpired:
            return f"{' '.join(argv[:6])}: still running after {BUILD_TIMEOUT:.0f} s"
        if done.returncode:
            return f"{' '.join(argv[:6])}: exit {done.returncode}: {done.stderr[-2000:]}"
        return ""

    return run


def _pip(venv: Path, *requirements: str) -> Step:
    return _command(str(venv / "bin" / "python"), "-m", "pip", "install", "-q", *requirements)


def _make_enterprise_gateway(venv: Path) -> list[Step]:
    return [
        _command(sys.executable, "-m", "venv", str(venv)),
        _pip(venv, "jupyter_enterprise_gateway>=3.2", "ipykernel"),
    ]


def _make_oldest_ipykernel(venv: Path) -> list[Step]:
    def see_our_packages() -> str:
        ask = "import sysconfig; print(sysconfig.get_path('purelib'))"
        purelib = subprocess.check_output([venv / "bin" / "python", "-c", ask], text=True)
        lines = (f"import site; site.addsitedir({path!r})\n" for path in _site_dirs())
        Path(purelib.strip(), "kernelexec-parent.pth").write_text("".join(lines))
        return ""

    return [
        _command(sys.executable, "-m", "venv", str(venv)),
        see_our_packages,
        # The .pth makes this Python's packages count as installed: only ipykernel changes.
        _pip(venv, f"ipykernel=={oldest_ipykernel()}"),
    ]


def _make_extra(extra: str) -> Callable[[Path], list[Step]]:
    def steps(venv: Path) -> list[Step]:
        return [
            _command(sys.executable, "-m", "venv", str(venv)),
            _pip(venv, *extra_requirements(extra)),
        ]

    return steps


# name -> where the venv is, how to make it, the variable that names a ready-made one
_VENVS: dict[str, tuple[Callable[[], Path], Callable[[Path], list[Step]], str]] = {
    "enterprise-gateway": (
        enterprise_gateway_venv,
        _make_enterprise_gateway,
        "KERNELEXEC_TEST_EG_VENV",
    ),
    "oldest-ipykernel": (
        _oldest_ipykernel_venv,
        _make_oldest_ipykernel,
        "KERNELEXEC_TEST_OLD_IPYKERNEL_PYTHON",
    ),
    **{
        extra: (functools.partial(extra_venv, extra), _make_extra(extra), variable)
        for extra, variable in _EXTRA_VENVS.items()
    },
}
NAMES = tuple(_VENVS)


def _ready(venv: Path) -> bool:
    if not (venv / _COMPLETE).exists():
        return False
    # Made from an interpreter that is gone since (a removed pyenv version): make it again.
    python = venv / "bin" / "python"
    return subprocess.run([str(python), "-c", ""], capture_output=True).returncode == 0


def _needed(name: str) -> bool:
    if os.environ.get(_VENVS[name][2]):
        return False  # given ready-made
    return not (name == "oldest-ipykernel" and _running_the_oldest())


def missing(names: set[str]) -> list[str]:
    """Those of ``names`` not made yet (none given by a variable), for a note before a build."""
    unknown = names - set(_VENVS)
    assert not unknown, f"@pytest.mark.{MARKER}: unknown venvs {unknown}; known: {NAMES}"
    return [name for name in sorted(names) if _needed(name) and not _ready(_VENVS[name][0]())]


def build(name: str, run_id: str) -> None:
    """Makes the venv ``name`` unless it is ready (or given); a failure goes to ``.failed``.

    Args:
        run_id: this test run's id: a failure recorded by the same run is not
            tried again, one from an earlier run is.
    """
    where, steps, _ = _VENVS[name]
    if not _needed(name):
        return
    venv = where()
    with file_lock(f"test-venv-{venv.name}"):
        failed = venv.parent / f"{venv.name}{_FAILED}"
        if _ready(venv) or (failed.exists() and failed.read_text().startswith(run_id + "\n")):
            return
        shutil.rmtree(venv, ignore_errors=True)
        failed.unlink(missing_ok=True)
        venv.parent.mkdir(parents=True, exist_ok=True)
        for step in steps(venv):
            error = step()
            if error:
                failed.write_text(f"{run_id}\n{error}")
                return
        (venv / _COMPLETE).touch()


def problem(name: str) -> str | None:
    """Why the venv ``name`` is not there, or None when it is."""
    where, _, variable = _VENVS[name]
    if os.environ.get(variable):
        given = Path(os.environ[variable])
        return None if given.exists() else f"${variable} names {given}, which does not exist"
    if not _needed(name):
        return None
    venv = where()
    if _ready(venv):
        return None
    failed = venv.parent / f"{venv.name}{_FAILED}"
    if failed.exists():
        return f"could not make {venv}: {failed.read_text().partition(chr(10))[2]}"
    return f"{venv} was not made (a test needing it has no @pytest.mark.{MARKER}({name!r}))"
