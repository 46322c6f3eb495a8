"""`kernelexec serve --pool-size/--preload`: sessions take warm, preloaded kernels."""

from __future__ import annotations

from pathlib import Path

from _serverproc import ServerProcess


def test_sessions_of_a_pooled_server_are_preloaded_and_separate(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "root", "--pool-size", "1", "--preload", "import json")
    try:
        first = server.create()
        probe = "import os\nprint('json' in dir(), os.getcwd().endswith(%r))"
        result = server.execute(first, probe % first)
        assert result["stdout"] == "True True\n" and result["execution_count"] == 1
        server.execute(first, "mine = 1")
        second = server.create()
        assert server.execute(second, "print('mine' in dir())")["stdout"] == "False\n"
        assert server.kernel_pid(first) != server.kernel_pid(second)
    finally:
        assert server.stop() == 0
