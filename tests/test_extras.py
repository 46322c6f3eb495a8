"""A door used without its extra says which extra, and how to install it.

Each case runs in a process of its own where the extra's packages cannot be
imported (``sys.modules[name] = None``), as in a core install; tests/test_wheel.py
checks the same in a real one. An AG2 module also names the AG2 line installed
instead, and each AG2 extra installs beside the other line (pip's resolution
in a venv holding only that line: no ag2 downgraded, no second owner of a folder).
"""

from __future__ import annotations

import ast
import contextlib
import json
import subprocess
import sys
import zipfile
from collections.abc import Iterable, Iterator
from importlib import metadata
from pathlib import Path

import _testvenvs
import pytest
from _readme_shell import copy_checkout
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version
from servers import unavailable

from kernelexec._extras import install_line

ROOT = Path(__file__).resolve().parent.parent

BLOCKED = """
import sys
for name in filter(None, sys.argv[1].split(",")):
    sys.modules[name] = None  # as if not installed: importing it raises ModuleNotFoundError
"""


def blocked(modules: str, code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", BLOCKED + code, modules, *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("module", "extra", "missing"),
    [
        ("kernelexec.integrations.autogen", "autogen", "autogen_core"),
        ("kernelexec.integrations.ag2_code", "ag2", "ag2"),
        ("kernelexec.integrations.agent_framework", "agent-framework", "agent_framework"),
        ("kernelexec.integrations.ag2", "ag2-classic", "autogen"),
        ("kernelexec.integrations.ag2_tools", "ag2-classic", "autogen"),
        ("kernelexec.integrations.ag2_beta", "ag2-classic", "autogen"),
    ],
)
def test_an_integration_without_its_extra_names_it(module: str, extra: str, missing: str) -> None:
    code = (
        "import importlib\n"
        "try:\n"
        "    importlib.import_module(sys.argv[2])\n"
        "except ImportError as exc:\n"
        "    print(type(exc).__name__, exc, sep=': ')\n"
    )
    proc = blocked(f"{missing},{missing}.coding", code, module)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(
        f"ModuleNotFoundError: {module} needs the {extra} extra: {install_line(extra)}"
    ), proc.stdout
    assert f"'{missing}" in proc.stdout  # and which module was not there


TRY = (
    "import importlib\n"
    "try:\n"
    "    importlib.import_module(sys.argv[2])\n"
    "except ImportError as exc:\n"
    "    print(exc)\n"
)


@pytest.mark.parametrize(
    "module",
    [
        "kernelexec.integrations.ag2",
        "kernelexec.integrations.ag2_tools",
        "kernelexec.integrations.ag2_beta",
    ],
)
def test_a_classic_ag2_module_beside_ag2_1x_names_both_extras(module: str) -> None:
    # The suite has both lines (the test extra): the classic one is hidden, as
    # when ag2 1.x is all that is installed; what is said of it is read from its metadata.
    assert metadata.version("ag2").startswith("1."), "the test extra has ag2 1.x"
    proc = blocked("autogen", TRY, module)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"{module} needs the ag2-classic extra: "), proc.stdout
    assert "The ag2-classic extra installs the autogen package (0.14.x)" in proc.stdout
    assert f"Installed: ag2 {metadata.version('ag2')}, AG2 1.x, which has no autogen" in proc.stdout
    assert "takes kernelexec.integrations.ag2_code" in proc.stdout


def test_the_ag2_1x_module_beside_the_classic_package_names_its_modules() -> None:
    proc = blocked("ag2", TRY, "kernelexec.integrations.ag2_code")
    assert proc.returncode == 0, proc.stderr
    message = proc.stdout
    assert message.startswith(
        f"kernelexec.integrations.ag2_code needs the ag2 extra: {install_line('ag2')} "
        "(no module named 'ag2"  # 'ag2.tools' here, where ag2 is blocked rather than absent
    ), message
    assert (
        "). The ag2 extra installs ag2 1.x, imported as ag2. "
        f"Installed: autogen {metadata.version('autogen')}, AG2's classic framework"
    ) in message
    assert "kernelexec.integrations.ag2_beta" in message and "ConversableAgent" in message


def test_ag2_before_1_0_beside_the_autogen_package_is_warned_of(tmp_path: Path) -> None:
    # ag2 0.14 and the autogen package both write autogen/, and pip installs one
    # beside the other without a word. This machine's ag2 is 1.x, so ag2 0.14's
    # metadata is made here, first on the path; the autogen package is the real one.
    info = tmp_path / "ag2-0.14.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: ag2\nVersion: 0.14.0\n")
    code = (
        f"sys.path.insert(0, {str(tmp_path)!r})\n"
        "import warnings\n"
        "with warnings.catch_warnings(record=True) as seen:\n"
        "    warnings.simplefilter('always')\n"
        "    import kernelexec.integrations.ag2_tools\n"
        "found = [f'{w.category.__name__}: {w.message}' for w in seen]\n"
        "print([text for text in found if 'ag2 0.14' in text])\n"
    )
    proc = blocked("", code)
    assert proc.returncode == 0, proc.stderr
    [warning] = ast.literal_eval(proc.stdout)
    assert warning.startswith(
        f"RuntimeWarning: ag2 0.14.0 and autogen {metadata.version('autogen')} are both "
        "installed, and both wrote the autogen folder"
    )
    assert "pip uninstall ag2 autogen, then install kernelexec's ag2-classic extra" in warning
    # With ag2 1.x (this machine's), nothing is said.
    quiet = blocked("", code.replace(str(tmp_path), str(tmp_path / "absent")))
    assert (quiet.returncode, quiet.stdout) == (0, "[]\n"), quiet.stderr


@pytest.mark.parametrize(
    ("command", "extra", "missing"),
    [("gateway", "gateway", "kernel_gateway"), ("mcp", "mcp", "mcp")],
)
def test_a_command_without_its_extra_is_one_line_naming_it(
    command: str, extra: str, missing: str
) -> None:
    main = "from kernelexec._cli import main\nsys.exit(main(sys.argv[2:]))"
    proc = blocked(missing, main, command)
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr
    assert proc.stderr.startswith(
        f"kernelexec: kernelexec {command} needs the {extra} extra: {install_line(extra)} "
        f"(no module named '{missing}"
    )
    assert proc.stderr.count("\n") == 1
    assert "PyPI" not in proc.stderr and "pip install 'kernelexec[" not in proc.stderr


# Each distribution in a venv, its version and the top-level names its files are under
# (its own metadata and the byte code of a single-module distribution left out).
OWNERS = """
import json
IGNORED = (".dist-info", ".data")
from importlib import metadata
owners = {}
for dist in metadata.distributions():
    tops = {f.parts[0].removesuffix(".py") for f in dist.files or [] if len(f.parts) > 0}
    tops = {top for top in tops if not top.endswith(IGNORED) and top not in ("..", "__pycache__")}
    owners[dist.metadata["Name"]] = [dist.version, sorted(tops)]
print(json.dumps(owners))
"""


def _wheel_tops(wheel: Path) -> set[str]:
    """The top-level names a wheel installs (its folders, and its modules without .py)."""
    with zipfile.ZipFile(wheel) as archive:
        tops = {name.split("/")[0].removesuffix(".py") for name in archive.namelist()}
    return {top for top in tops if not top.endswith((".dist-info", ".data"))}


@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    ("installed", "extra"),
    [
        pytest.param("ag2", "ag2-classic", marks=pytest.mark.test_venv("ag2")),
        pytest.param("ag2-classic", "ag2", marks=pytest.mark.test_venv("ag2-classic")),
    ],
)
def test_each_ag2_extra_installs_beside_the_other_line(
    installed: str, extra: str, tmp_path: Path
) -> None:
    # A user who has one AG2 line adds kernelexec with the other's extra. pip
    # resolves it (--dry-run: a ResolutionImpossible fails here) in a venv holding
    # only the first line; what it would install comes from its wheels (pip's cache).
    problem = _testvenvs.problem(installed)
    if problem:
        unavailable(problem)
    python = str(_testvenvs.extra_venv(installed) / "bin" / "python")
    # -I and a cwd of the test's own: neither sees this checkout (its egg-info) as installed.
    listed = subprocess.run(
        [python, "-I", "-c", OWNERS], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert listed.returncode == 0, listed.stderr
    before = {canonicalize_name(name): found for name, found in json.loads(listed.stdout).items()}
    copy_checkout(ROOT, tmp_path / "kernelexec")
    pip = [python, "-I", "-m", "pip", "--disable-pip-version-check"]
    resolve = [*pip, "install", "--dry-run", "--quiet", "--report", str(tmp_path / "report.json")]
    resolved = subprocess.run(
        [*resolve, f"{tmp_path / 'kernelexec'}[{extra}]"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert resolved.returncode == 0, resolved.stderr[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())
    would = {
        canonicalize_name(item["metadata"]["name"]): item["metadata"]["version"]
        for item in report["install"]
    }
    print(f"beside {installed} ({before}), pip install kernelexec[{extra}] would install {would}")

    # The line installed is left as it is; nothing installed is downgraded.
    for requirement in _testvenvs.extra_requirements(installed):
        assert canonicalize_name(Requirement(requirement).name) not in would
    downgraded = {
        name: (version, would[name])
        for name, (version, _) in before.items()
        if name in would and Version(would[name]) < Version(version)
    }
    assert downgraded == {}

    # Afterwards each top-level name has one owner: ag2/ the ag2 1.x package, autogen/ the
    # classic one (ag2 0.14 would have been a second).
    wheels = tmp_path / "wheels"
    pins = [f"{name}=={version}" for name, version in would.items() if name != "kernelexec"]
    download = [*pip, "download", "--quiet", "--no-deps", "--only-binary", ":all:"]
    fetched = subprocess.run(
        [*download, "-d", str(wheels), *pins],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert fetched.returncode == 0, fetched.stderr[-3000:]
    owners: dict[str, set[str]] = {"kernelexec": {"kernelexec"}}
    for name, (_, tops) in before.items():
        if name not in would:
            for top in tops:
                owners.setdefault(top, set()).add(name)
    for wheel in wheels.glob("*.whl"):
        name = canonicalize_name(parse_wheel_filename(wheel.name)[0])
        for top in _wheel_tops(wheel):
            owners.setdefault(top, set()).add(name)
    assert (owners.get("ag2"), owners.get("autogen")) == ({"ag2"}, {"autogen"})
    shared = {top: names for top, names in owners.items() if len(names) > 1}
    assert shared == {}


# Names the tests import that no package provides: modules a test makes itself,
# a backport for older Pythons, and code that runs elsewhere.
NOT_PACKAGES = {
    "kx_backend_base": "a package test_hostile_packages.py builds and installs",
    "no_such_module_here": "test_pool.py's failing preload",
    "tool": "a module test_checkpoint.py writes into the work dir",
    "tomli": "tomllib's backport, imported only before Python 3.11",
    "setuptools": "a setup.py pip runs in its own build environment",
    "torch": "gpu_check.py's kernels, on a GPU machine by hand (CI has no GPU)",
}


def _imports(tree: ast.AST) -> Iterator[str]:
    """Top-level module names imported, in code and in code held in strings (kernel cells)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module.split(".")[0]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if "import" in node.value:
                with contextlib.suppress(SyntaxError, ValueError):
                    yield from _imports(ast.parse(node.value))


def _requirement_closure(name: str, extras: Iterable[str]) -> set[str]:
    """The distributions ``pip install name[extras]`` brings, as installed here."""
    found: set[str] = set()
    todo, done = [(name, frozenset(extras))], set()
    while todo:
        dist, wanted = todo.pop()
        key = (canonicalize_name(dist), wanted)
        if key in done:
            continue
        done.add(key)
        found.add(key[0])
        try:
            requires = metadata.requires(dist) or []
        except metadata.PackageNotFoundError:
            continue  # left out by a marker of this platform
        for text in requires:
            req = Requirement(text)
            if req.marker and not any(req.marker.evaluate({"extra": e}) for e in ("", *wanted)):
                continue
            todo.append((req.name, frozenset(req.extras)))
    return found


def test_every_package_the_tests_import_comes_with_the_test_extra() -> None:
    # A package installed here by hand passes the suite here and fails a newcomer's
    # fresh venv (scikit-learn once did: tests/test_fork_hazards.py's kernels import it).
    tests = Path(__file__).parent
    local = {path.stem for path in tests.glob("*.py")} | {"kernelexec", "bench"}
    wanted: dict[str, set[str]] = {}
    for path in sorted(tests.glob("*.py")):
        for top in _imports(ast.parse(path.read_text(encoding="utf-8"))):
            if top not in sys.stdlib_module_names and top not in local | set(NOT_PACKAGES):
                wanted.setdefault(top, set()).add(path.name)
    installed = _requirement_closure("kernelexec", ["test"])
    providers = metadata.packages_distributions()
    missing = {
        top: sorted(files)
        for top, files in wanted.items()
        if not {canonicalize_name(d) for d in providers.get(top, [])} & installed
    }
    assert "pytest" in wanted and "pandas" in wanted  # the scan sees imports at all
    assert missing == {}, f"imported by the tests, not brought by kernelexec[test]: {missing}"
