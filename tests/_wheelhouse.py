"""A package index in a local folder, for environment builds that must reach no index.

``wheelhouse(folder)`` fills ``folder`` with what an environment build asks
for: stand-ins for ipykernel and cloudpickle (wheels with no code; a build
that fails never runs them), a source package whose build fails on purpose,
and pip for ``uv venv --seed``. ``offline_env(folder)`` points pip and uv at
it, the index switched off: the operator's own settings, as a server reads them.
"""

from __future__ import annotations

import base64
import hashlib
import io
import tarfile
import textwrap
import zipfile
from pathlib import Path

FAILING = "kx-failing-build"  # its build raises RuntimeError(WHY)
WHY = "the build of kx-failing-build fails on purpose"


def wheel(folder: Path, name: str, version: str, files: dict[str, str] | None = None) -> Path:
    """A pure-Python wheel of ``name`` with ``files`` (none: no code at all)."""
    module = name.replace("-", "_")
    info = f"{module}-{version}.dist-info"
    contents = {
        **(files or {}),
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: kx-tests\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n",
    }
    record = []
    for path, text in contents.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record.append(f"{path},sha256={digest.decode()},{len(text.encode())}")
    record.append(f"{info}/RECORD,,")
    contents[f"{info}/RECORD"] = "\n".join(record) + "\n"
    target = folder / f"{module}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(target, "w") as archive:
        for path, text in contents.items():
            archive.writestr(path, text)
    return target


def source_archive(target: Path, files: dict[str, str]) -> Path:
    """A source archive (``.tar.gz`` or ``.zip`` by ``target``'s name) of ``files``."""
    if target.name.endswith(".zip"):
        with zipfile.ZipFile(target, "w") as archive:
            for path, text in files.items():
                archive.writestr(path, text)
        return target
    with tarfile.open(target, "w:gz") as archive:
        for path, text in files.items():
            data = text.encode()
            member = tarfile.TarInfo(path)
            member.size = len(data)
            archive.addfile(member, io.BytesIO(data))
    return target


def building(root: str, name: str, version: str, backend: str) -> dict[str, str]:
    """The files of a source package whose in-tree build backend is ``backend``."""
    return {
        f"{root}/PKG-INFO": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{root}/pyproject.toml": textwrap.dedent(
            """\
            [build-system]
            requires = []
            build-backend = "kx_backend"
            backend-path = ["."]
            """
        ),
        f"{root}/kx_backend.py": backend,
    }


def wheelhouse(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    wheel(folder, "ipykernel", "7.0.0")
    wheel(folder, "cloudpickle", "3.0.0")
    wheel(folder, "pip", "99.0")  # what uv venv --seed puts in (never run here)
    backend = textwrap.dedent(
        f"""\
        def get_requires_for_build_wheel(config_settings=None):
            raise RuntimeError({WHY!r})
        build_wheel = prepare_metadata_for_build_wheel = get_requires_for_build_wheel
        """
    )
    root = f"{FAILING.replace('-', '_')}-1.0"
    source_archive(folder / f"{root}.tar.gz", building(root, FAILING, "1.0", backend))
    return folder


def offline_env(folder: Path) -> dict[str, str]:
    """pip and uv on the local folder only, as an operator would set them."""
    return {
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": str(folder),
        "UV_NO_INDEX": "1",
        "UV_FIND_LINKS": str(folder),
        "UV_OFFLINE": "1",
    }
