"""Packages are requirements for the package index, at every door; a failed build shows no path.

A session's ``packages`` are installed on this machine, outside any kernel:
pip and uv would build a path, an archive's file name (a bare
``x-1.0.zip`` found in their working directory), a URL or an option's
target here. Each door refuses them: the library, the server (422), MCP
(local and ``--server``). An archive whose build would leave a marker file
waits in the working directory of every process that could build it, to
show nothing of it ran. No test reaches an index: pip and uv are pointed at
a local folder (``_wheelhouse``), as an operator would point them at a mirror.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest
import uv as uv_package
from _mcpclient import stdio_mcp, texts
from _serverproc import ServerProcess
from _wheelhouse import FAILING, WHY, building, offline_env, source_archive, wheelhouse
from test_mcp_remote import call, remote_mcp

from kernelexec import AsyncSession, ConfigurationError, EnvironmentBuildError
from kernelexec._venvs._installer import failure_reason
from kernelexec._venvs._venv import EnvRequest, check_packages, make_env

SPECS = [
    "x-1.0.zip",
    "X-1.0.TAR.GZ",
    "x.whl[extra]",
    "./x",
    "/tmp/x.whl",
    "~/x-1.0.zip",
    "x\\y",
    "x @ file:///tmp/x-1.0.zip",
    "x@https://127.0.0.1:9/x-1.0.zip",
    "--index-url=http://127.0.0.1:9/simple",
    "-e .",
    "-r requirements.txt",
]
REFUSED = "packages of the index only"


def archive_in(folder: Path) -> Path:
    """``folder/x-1.0.zip``, whose build (by setup.py or its backend) writes a marker file."""
    folder.mkdir(parents=True, exist_ok=True)
    marker = folder / "the-archive-was-built"
    write = f"open({str(marker)!r}, 'w').write('built on the host')\n"
    files = building("x-1.0", "x", "1.0", write + "from kx_backend_base import *\n")
    files["x-1.0/setup.py"] = write + "from setuptools import setup\nsetup(name='x')\n"
    files["x-1.0/kx_backend_base.py"] = textwrap.dedent(
        """\
        def get_requires_for_build_wheel(config_settings=None):
            return []
        def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
            raise RuntimeError("built enough")
        """
    )
    source_archive(folder / "x-1.0.zip", files)
    return marker


@pytest.fixture
def offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """pip and uv on a local folder only, environments cached under tmp_path; the variables."""
    variables = offline_env(wheelhouse(tmp_path / "house"))
    variables["KERNELEXEC_VENV_DIR"] = str(tmp_path / "cache")
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    return variables


@pytest.mark.parametrize("spec", SPECS)
def test_the_library_refuses_anything_but_a_requirement_of_the_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, offline: dict[str, str], spec: str
) -> None:
    marker = archive_in(tmp_path / "here")
    monkeypatch.chdir(tmp_path / "here")
    with pytest.raises(ConfigurationError, match=REFUSED):
        AsyncSession(tmp_path / "w", packages=[spec])
    with pytest.raises(ConfigurationError, match=REFUSED):
        make_env(EnvRequest(packages=(spec,)))  # made without EnvRequest.of's check
    assert not marker.exists()
    assert not (tmp_path / "cache").exists()


def test_requirements_of_the_index_pass_as_pip_reads_them() -> None:
    given = ["rich", "pandas >= 2 , <3", "Requests[socks]", 'tomli; python_version < "3.11"']
    assert check_packages(given) == (
        "rich",
        "pandas<3,>=2",
        "Requests[socks]",
        'tomli; python_version < "3.11"',
    )


@pytest.mark.timeout(300)
async def test_the_server_and_mcp_refuse_them_and_a_failed_build_shows_no_path(
    tmp_path: Path, offline: dict[str, str]
) -> None:
    here = tmp_path / "here"  # the working directory of the server and the MCP servers
    marker = archive_in(here)
    venvs = tmp_path / "venvs"
    server = ServerProcess(
        tmp_path / "work",
        *("--allow-packages", "--venv-root", str(venvs)),
        env=os.environ,
        cwd=here,
    )
    try:
        for spec in SPECS:
            refused = server.http.post("/sessions", json={"packages": [spec]})
            assert refused.status_code == 422, (spec, refused.text)
            assert refused.json()["error"] == "invalid_option"
            assert "no paths, archives, URLs" in refused.json()["message"], refused.text

        failed = server.http.post("/sessions", json={"packages": [FAILING]})
        assert failed.status_code == 422, failed.text
        message = failed.json()["message"]
        assert FAILING in message and WHY in message, message
        assert_no_path(message, tmp_path, venvs)

        async with remote_mcp(server, tmp_path / "remote.log") as client:
            answer = await call(client, "create_session", session="p", packages=["x-1.0.zip"])
            assert answer.is_error and "422" in texts(answer), texts(answer)
            assert "archives" in texts(answer)
        assert server.http.get("/sessions").json()["sessions"] == []
    finally:
        assert server.stop() == 0

    options = ("--allow-packages", "--venv-root", str(venvs))
    async with stdio_mcp(tmp_path / "mcp", *options, cwd=here) as client:
        for spec in ("x-1.0.zip", "./x", "x @ file:///tmp/x-1.0.zip", "-e ."):
            answer = await call(client, "create_session", session="p", packages=[spec])
            assert answer.is_error and "archives" in texts(answer), (spec, texts(answer))
        answer = await call(client, "create_session", session="p", packages=[FAILING])
        assert answer.is_error and FAILING in texts(answer) and WHY in texts(answer)
        assert_no_path(texts(answer), tmp_path, venvs)
        assert json.loads(texts(await call(client, "list_sessions"))) == []
    assert not marker.exists()


@pytest.mark.parametrize("installer", ["uv", "pip"])
async def test_a_failed_build_names_the_package_and_why_and_no_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, offline: dict[str, str], installer: str
) -> None:
    kept = [d for d in os.environ["PATH"].split(os.pathsep) if not (Path(d) / "uv").exists()]
    if installer == "uv":
        (tmp_path / "bin").mkdir()
        (tmp_path / "bin" / "uv").symlink_to(uv_package.find_uv_bin())
        kept.insert(0, str(tmp_path / "bin"))
    monkeypatch.setenv("PATH", os.pathsep.join(kept))
    session = AsyncSession(tmp_path / "w", packages=[FAILING])
    with pytest.raises(EnvironmentBuildError) as caught:
        await session.start()
    await session.close()
    message = str(caught.value)
    assert message.startswith("`uv pip install`" if installer == "uv" else "`pip install`")
    assert f"could not install {FAILING} " in message and WHY in message, message
    assert_no_path(message, tmp_path, Path(offline["KERNELEXEC_VENV_DIR"]))
    assert not any(Path(offline["KERNELEXEC_VENV_DIR"]).glob("py*"))  # no half environment


def test_a_failure_reason_hides_every_path() -> None:
    output = textwrap.dedent(
        """\
          \u00d7 Getting requirements to build wheel did not run successfully.
          │ exit code: 1
          ╰─> [3 lines of output]
              Traceback (most recent call last):
                File "/home/op/.cache/kernelexec/venvs/py3.11-0a1b/lib/x.py", line 1, in <module>
              FileNotFoundError: [Errno 2] No such file: '/tmp/kernelexec-build-x1/README.md'
              [end of output]
        ERROR: Could not install from file:///srv/mirror/x-1.0.tar.gz (see ~/logs/pip.log)
        """
    )
    reason = failure_reason(output, [Path("/home/op/.cache/kernelexec/venvs/py3.11-0a1b")])
    assert reason == (
        "Getting requirements to build wheel did not run successfully.; Could not install "
        "from file://<path> (see <path>); FileNotFoundError: [Errno 2] No such file: '<path>'"
    )


def assert_no_path(message: str, *roots: Path) -> None:
    """No path of this machine in ``message``: none under ``roots``, the temp dir, the cache."""
    for root in (*roots, Path(tempfile.gettempdir()), Path(sys.prefix), Path.home()):
        assert str(root) not in message, (root, message)
        assert str(root.resolve()) not in message, (root, message)
    assert "Traceback" not in message and 'File "' not in message, message
