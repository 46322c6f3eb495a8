"""The peers' virtual environments, made on first use under ``bench/.venvs``.

Each peer is installed into its own environment, with the versions the issue
names, so their dependencies never touch kernelexec's.
"""

from __future__ import annotations

import subprocess
import sys
import venv
from pathlib import Path

VENVS = Path(__file__).parent / ".venvs"

PEERS: dict[str, list[str]] = {
    "autogen": ["autogen-ext[jupyter-executor]>=0.7,<0.8", "autogen-core>=0.7,<0.8", "matplotlib"],
    "ag2": ["ag2[jupyter-executor]>=0.14,<0.15", "matplotlib"],
}


def python_for(peer: str) -> Path:
    """The peer's interpreter, creating and filling its venv the first time."""
    home = VENVS / peer
    python = home / "bin" / "python"
    done = home / ".installed"
    wanted = "\n".join(PEERS[peer])
    if done.exists() and done.read_text() == wanted:
        return python
    print(f"[bench] installing {peer} into {home} (first run only) ...", file=sys.stderr)
    venv.EnvBuilder(with_pip=True, clear=True).create(home)
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *PEERS[peer]],
        check=True,
    )
    done.write_text(wanted)
    return python
