"""kernelexec as a package: the wheel and sdist built from the repo, installed in a
fresh venv outside the checkout, run the Quick start's main job, the library, every
extra, and ``kernelexec image build`` (its Dockerfile is package data). The metadata a
user trusts (licence, authors, classifiers) is there, and the core install is lean:
no Jupyter server, and each door that needs an extra says which.

One test, not several: under pytest-xdist each test module's fixtures are made
once per worker, and the venv is the slow part.
"""

from __future__ import annotations

import email.message
import email.parser
import json
import os
import shutil
import subprocess
import sys
import tarfile
import textwrap
import uuid
import zipfile
from pathlib import Path

import pytest
from servers import docker_base_image

import kernelexec
from kernelexec._backends._image import image_tag

REPO = Path(__file__).resolve().parents[1]
# Each extra the wheel declares (besides the test tools), and what its users import.
EXTRAS = {
    "examples": ["matplotlib", "pandas", "PIL"],
    "autogen": [
        "autogen_agentchat",
        "autogen_ext.tools.code_execution",
        "kernelexec.integrations.autogen",
    ],
    "ag2": ["ag2.tools.code", "kernelexec.integrations.ag2_code"],
    "agent-framework": ["agent_framework", "kernelexec.integrations.agent_framework"],
    "ag2-classic": [
        "autogen.coding",
        "kernelexec.integrations.ag2",
        "kernelexec.integrations.ag2_tools",
        "kernelexec.integrations.ag2_beta",
    ],
    "mcp": ["kernelexec._mcp._http"],
    "jwt": ["jwt", "cryptography", "kernelexec._tenants._jwt"],
    "otel": ["opentelemetry.sdk.trace", "kernelexec._telemetry"],
    "gateway": ["kernel_gateway", "kernelexec._cli.gateway"],
    "ray": ["ray", "ray.util.placement_group", "kernelexec._ray._host"],
    "e2b": ["multipart", "kernelexec._server._e2b"],
    "lab": ["jupyter_collaboration", "jupyter_server_ydoc", "kernelexec.integrations.jupyterlab"],
}
# Installed only with an extra: a core install that had them would be 40 packages heavier.
NOT_IN_CORE = {"jupyter-server", "jupyter-kernel-gateway", "nbconvert", "terminado"}
# Each integration module without its extra: the error names the extra.
NEEDS_EXTRA = {
    "kernelexec.integrations.autogen": "autogen",
    "kernelexec.integrations.ag2_code": "ag2",
    "kernelexec.integrations.agent_framework": "agent-framework",
    "kernelexec.integrations.ag2": "ag2-classic",
    "kernelexec.integrations.ag2_tools": "ag2-classic",
    "kernelexec.integrations.ag2_beta": "ag2-classic",
}
# The classic modules beside AG2 1.x alone: their error names the module for it.
CLASSIC = [module for module, extra in NEEDS_EXTRA.items() if extra == "ag2-classic"]
CLASSIFIERS = {
    "Framework :: Jupyter",
    "Operating System :: POSIX :: Linux",
    "Programming Language :: Python :: 3 :: Only",
    "Typing :: Typed",
}
TRY_IMPORT = """
import importlib, json, sys
errors = {}
for module in sys.argv[1:]:
    try:
        importlib.import_module(module)
    except ImportError as exc:
        errors[module] = [type(exc).__name__, str(exc)]
print(json.dumps(errors))
"""
# The README's first library snippet, as a user of the installed package runs it.
LIBRARY = """
import json, sys
import kernelexec

with kernelexec.Session("work", timeout=120) as session:
    where = session.execute("import sys; print(sys.executable)")
    session.execute("x = 41")
    answer = session.execute("x + 1")
    plot = session.execute("import matplotlib.pyplot as plt\\nplt.plot([1, 3, 2]); plt.show()")
print(json.dumps({
    "module": kernelexec.__file__,
    "python": sys.executable,
    "kernel_python": where.stdout.strip(),
    "answer": [answer.status, answer.text],
    "plot": [plot.status, plot.files, plot.text],
}))
"""
IN_DOCKER = """
import sys
import kernelexec

backend = kernelexec.DockerBackend(image=sys.argv[1])
with kernelexec.Session("docker-work", backend=backend, timeout=120) as session:
    result = session.execute("import os; print(os.getcwd(), 6 * 7)")
print(result.status, result.text)
"""


@pytest.mark.timeout(900)  # a cold pip cache downloads every dependency
def test_the_wheel_installs_and_runs_outside_the_checkout(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    wheel, sdist = _build(_clean_copy(tmp_path / "src"), dist)
    _check_contents(wheel, sdist)
    _check_metadata(wheel, sdist)
    _run([sys.executable, "-m", "twine", "check", "--strict", str(wheel), str(sdist)])

    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)])
    python, kernelexec_command = venv / "bin" / "python", venv / "bin" / "kernelexec"
    # A user's directory: not the checkout, and nothing on the path leads back to it.
    home = tmp_path / "user"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"

    # The Quick start's main job, on the package alone (no extra).
    pip = [str(python), "-m", "pip", "install", "--quiet", "--no-compile"]  # .pyc: not tested
    _run([*pip, str(wheel)], cwd=home, env=env)
    _check_core_install(python, kernelexec_command, home, env)
    shutil.copy(REPO / "notebooks" / "agent-message.md", home)
    job = _run(
        [str(kernelexec_command), "run", "agent-message.md", "--work-dir", "demo"],
        cwd=home,
        env=env,
    )
    assert "total: 77" in job.stdout, job.stdout
    assert (home / "demo" / "transcript.ipynb").is_file()
    assert [p.suffix for p in (home / "demo" / "outputs").iterdir()] == [".svg"]

    # Every extra resolves from the wheel file, with the extras syntax users type.
    # test and docs hold the suite's and the site's tools, which no user imports.
    declared = _extras(wheel) - {"test", "docs"}
    assert declared == set(EXTRAS), f"add the new extras to EXTRAS: {declared ^ set(EXTRAS)}"
    _check_ag2_alone(pip, python, wheel, home, env)
    _run([*pip, f"{wheel}[{','.join(sorted(EXTRAS))}]"], cwd=home, env=env)
    imports = "; ".join(f"import {module}" for modules in EXTRAS.values() for module in modules)
    _run([str(python), "-c", imports], cwd=home, env=env)
    # Both AG2 lines side by side (ag2/ and autogen/), and every requirement met.
    _run([str(python), "-m", "pip", "check"], cwd=home, env=env)

    library = json.loads(_run([str(python), "-c", LIBRARY], cwd=home, env=env).stdout)
    assert Path(library["module"]).is_relative_to(venv), library
    assert library["kernel_python"] == library["python"], library
    assert library["answer"] == ["ok", "42\n"], library
    status, files, text = library["plot"]
    assert status == "ok" and len(files) == 1 and files[0].endswith(".png"), text

    # `kernelexec image build` from the wheel. First a real build: a requirements file
    # holding only a comment that is new every run changes the tag but installs nothing.
    # Then the plain build, last even on failure because DockerBackend() runs the image
    # built last and other tests expect the plain one: the tag the checkout gives the
    # same inputs (the Dockerfile shipped is the repo's).
    base = docker_base_image()
    build = [str(kernelexec_command), "image", "build", "--base-image", base, "--quiet"]
    requirements = f"# kernelexec wheel smoke test {uuid.uuid4()}\n"
    (home / "requirements.txt").write_text(requirements)
    fresh = image_tag(base_image=base, requirements=requirements)
    assert not _image_exists(fresh)
    try:
        built = _run(
            [*build, "--requirements", "requirements.txt"], cwd=home, env=env, timeout=1800
        )
        assert built.stdout.strip() == fresh
        assert _image_exists(fresh)
    finally:
        tag = _run(build, cwd=home, env=env, timeout=1800).stdout.strip()
        subprocess.run(["docker", "rmi", "-f", fresh], capture_output=True, timeout=120)
    assert tag == image_tag(base_image=base)
    assert _image_exists(tag)
    assert not _image_exists(fresh)

    # A kernel in that image boots from the installed package's kernel-side code.
    in_docker = _run([str(python), "-c", IN_DOCKER, tag], cwd=home, env=env)
    assert in_docker.stdout == "ok /workspace 42\n\n", in_docker.stdout


def _clean_copy(target: Path) -> Path:
    """The files a fresh clone plus the working tree's changes would have.

    Built from a copy so that the build's egg-info and build dirs never appear
    in the shared checkout while other tests run, and so that local state
    (venvs, caches, artifacts) cannot leak into the sdist unnoticed.
    """
    names = _git_files()
    if names is None:  # not a git checkout (an unpacked sdist): all but local state
        ignore = shutil.ignore_patterns(
            ".git", "__pycache__", "*.egg-info", ".*_cache", ".venv*", ".work", "test-artifacts"
        )
        shutil.copytree(REPO, target, ignore=ignore)
        return target
    for name in names:
        source = REPO / name
        if source.is_file():  # a tracked file deleted in the working tree is gone
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    return target


def _git_files() -> list[str] | None:
    """Tracked and untracked-but-not-ignored files, or None outside a git checkout."""
    git = shutil.which("git")
    if git is None:
        return None
    listing = ["ls-files", "-z", "--cached", "--others", "--exclude-standard"]
    listed = subprocess.run(
        [git, "-C", str(REPO), *listing], capture_output=True, text=True, timeout=60
    )
    if listed.returncode != 0:
        return None
    return [name for name in listed.stdout.split("\0") if name]


def _build(source: Path, dist: Path) -> tuple[Path, Path]:
    """``python -m build``: the sdist, then the wheel built from the sdist."""
    _run([sys.executable, "-m", "build", "--outdir", str(dist), str(source)], timeout=600)
    (wheel,) = dist.glob("*.whl")
    (sdist,) = dist.glob("*.tar.gz")
    assert wheel.name == f"kernelexec-{kernelexec.__version__}-py3-none-any.whl"
    return wheel, sdist


def _check_contents(wheel: Path, sdist: Path) -> None:
    package = {p.relative_to(REPO).as_posix() for p in (REPO / "kernelexec").rglob("*.py")}
    package -= {p for p in package if "__pycache__" in p}
    package |= {"kernelexec/py.typed", "kernelexec/_backends/Dockerfile"}
    assert "kernelexec/_kernel/boot.py" in package
    with zipfile.ZipFile(wheel) as archive:
        in_wheel = set(archive.namelist())
    assert package <= in_wheel, sorted(package - in_wheel)
    assert not [n for n in in_wheel if n.startswith(("tests/", "bench/", "docker/"))]

    with tarfile.open(sdist) as archive:
        root = f"kernelexec-{kernelexec.__version__}/"
        in_sdist = {n.removeprefix(root) for n in archive.getnames()}
    wanted = package | {
        "README.md",
        "LICENSE",
        "pyproject.toml",
        "MANIFEST.in",
        "mkdocs.yml",
        "docs/index.md",
        "docker/README.md",
        "notebooks/agent-message.md",
        "tests/conftest.py",
        "tests/servers.py",
        "tests/data/messages.json",
        "bench/__main__.py",
    }
    wanted |= {p.relative_to(REPO).as_posix() for p in (REPO / "tests").glob("*.py")}
    assert wanted <= in_sdist, sorted(wanted - in_sdist)
    assert not [n for n in in_sdist if "/.venvs/" in n or n.endswith(".pyc")]


def _metadata(wheel: Path) -> email.message.Message:
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        return email.parser.Parser().parsestr(archive.read(name).decode())


def _extras(wheel: Path) -> set[str]:
    return set(_metadata(wheel).get_all("Provides-Extra") or [])


def _check_metadata(wheel: Path, sdist: Path) -> None:
    """What a user checks before trusting a package: its licence (the text too), who
    made it, what it is for; and no address that leads nowhere."""
    metadata = _metadata(wheel)
    assert metadata["License-Expression"] == "BSD-3-Clause"
    assert metadata.get_all("License-File") == ["LICENSE"]
    assert metadata["Author"] == "The kernelexec authors"
    assert CLASSIFIERS <= set(metadata.get_all("Classifier") or [])
    assert not [c for c in metadata.get_all("Classifier") or [] if c.startswith("License ::")]
    assert metadata.get_all("Project-URL") is None and metadata["Home-page"] is None
    licence = (REPO / "LICENSE").read_text()
    assert "BSD 3-Clause License" in licence and "the kernelexec authors" in licence
    with zipfile.ZipFile(wheel) as archive:
        (shipped,) = [n for n in archive.namelist() if n.endswith(".dist-info/licenses/LICENSE")]
        assert archive.read(shipped).decode() == licence
    with tarfile.open(sdist) as archive:
        member = archive.extractfile(f"kernelexec-{kernelexec.__version__}/LICENSE")
        assert member is not None and member.read().decode() == licence


def _check_core_install(python: Path, command: Path, home: Path, env: dict[str, str]) -> None:
    """The core install: no Jupyter server; the version it says is the package's; each
    door that needs an extra names it."""
    listed = _run([str(python), "-m", "pip", "list", "--format=json"], cwd=home, env=env)
    names = {p["name"].lower().replace("_", "-") for p in json.loads(listed.stdout)}
    assert not names & NOT_IN_CORE, names & NOT_IN_CORE
    version = _run([str(command), "--version"], cwd=home, env=env)
    assert version.stdout == f"kernelexec {kernelexec.__version__}\n"
    gateway = subprocess.run(
        [str(command), "gateway", "--port", "0"],
        cwd=home, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert gateway.returncode == 2 and gateway.stdout == "", gateway.stderr
    assert gateway.stderr.startswith("kernelexec: kernelexec gateway needs the gateway extra: ")
    assert "pip install -e '.[gateway]'" in gateway.stderr and gateway.stderr.count("\n") == 1
    tried = _run([str(python), "-c", TRY_IMPORT, *NEEDS_EXTRA], cwd=home, env=env)
    errors = json.loads(tried.stdout)
    for module, extra in NEEDS_EXTRA.items():
        kind, message = errors[module]
        assert kind == "ModuleNotFoundError", errors[module]
        assert message.startswith(f"{module} needs the {extra} extra: "), message
        assert f"pip install -e '.[{extra}]' from a clone, or the wheel with [{extra}]" in message


def _check_ag2_alone(
    pip: list[str], python: Path, wheel: Path, home: Path, env: dict[str, str]
) -> None:
    """With the ag2 extra alone (AG2 1.x), the classic modules name their extra and ag2_code."""
    _run([*pip, f"{wheel}[ag2]"], cwd=home, env=env)
    tried = _run([str(python), "-c", TRY_IMPORT, *CLASSIC], cwd=home, env=env)
    errors = json.loads(tried.stdout)
    for module in CLASSIC:
        kind, message = errors[module]
        assert kind == "ModuleNotFoundError", errors[module]
        assert message.startswith(f"{module} needs the ag2-classic extra: "), message
        assert "The ag2-classic extra installs the autogen package" in message, message
        assert "Installed: ag2 1." in message and "kernelexec.integrations.ag2_code" in message


def _image_exists(tag: str) -> bool:
    inspect = ["docker", "image", "inspect", tag]
    return subprocess.run(inspect, capture_output=True, timeout=60).returncode == 0


def _run(
    command: list[str],
    *,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 600,
) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert proc.returncode == 0, (
        textwrap.shorten(f"{command} exit {proc.returncode}", 400)
        + f"\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    )
    return proc
