"""A door used without its extra says which extra, and how to install it.

Each case runs in a process of its own where the extra's packages cannot be
imported (``sys.modules[name] = None``), as in a core install; tests/test_wheel.py
checks the same in a real one.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from kernelexec._extras import install_line

BLOCKED = """
import sys
for name in sys.argv[1].split(","):
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
        ("kernelexec.integrations.ag2", "ag2", "autogen"),
        ("kernelexec.integrations.ag2_tools", "ag2", "autogen"),
        ("kernelexec.integrations.ag2_beta", "ag2", "autogen"),
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
