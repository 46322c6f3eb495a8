"""The benchmark's virtual environments, made on first use under ``bench/.venvs``.

kernelexec (with raw jupyter_client) and each peer get an environment of their
own, fresh from the registry, so every kernel runs on the same current IPython
and no one's dependencies touch another's.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import venv
from pathlib import Path

HERE = Path(__file__).parent
VENVS = HERE / ".venvs"
ROOT = HERE.parent

ENVS: dict[str, list[str]] = {
    # pandas: the data-stack scenarios (issue #19) preload numpy, pandas and matplotlib
    # The gateway extra: the kernelexec-gateway scenario runs `kernelexec gateway`;
    # the ray extra: the ray scenario (bench/cluster.py) starts a Ray cluster.
    "kernelexec": ["-e", f"{ROOT}[gateway,ray]", "matplotlib", "numpy", "pandas", "httpx"],
    "autogen": [
        "autogen-ext[jupyter-executor]>=0.7,<0.8",
        "autogen-core>=0.7,<0.8",
        "matplotlib",
        "pandas",
    ],
    "ag2": ["ag2[jupyter-executor]>=0.14,<0.15", "matplotlib", "pandas"],
}
IMPL_ENV = {
    "raw": "kernelexec",
    "kernelexec": "kernelexec",
    "kernelexec-spawn": "kernelexec",
    "kernelexec-shared": "kernelexec",
    "kernelexec-pooled": "kernelexec",
    "kernelexec-http": "kernelexec",
    "kernelexec-gateway": "kernelexec",
    "kernelexec-docker": "kernelexec",
    "autogen": "autogen",
    "ag2": "ag2",
}
PEERS = ("autogen", "ag2")


def python_for(impl: str) -> Path:
    """The interpreter an implementation runs under, its venv made the first time."""
    name = IMPL_ENV[impl]
    home = VENVS / name
    python = home / "bin" / "python"
    stamp = home / ".installed"
    wanted = "\n".join(ENVS[name])
    if name == "kernelexec":  # reinstall when our own requirements change
        wanted += "\n" + hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    if stamp.exists() and stamp.read_text() == wanted:
        return python
    print(f"[bench] installing {name} into {home} (first run only) ...", file=sys.stderr)
    venv.EnvBuilder(with_pip=True, clear=True).create(home)
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *ENVS[name]],
        check=True,
    )
    stamp.write_text(wanted)
    return python
