"""The commands a README reader types, as tests/test_readme.py runs them.

tests/test_readme.py runs README.md's shell blocks as written, in bash, with
a folder of small wrappers first on PATH (``python``, ``pip``, ``kernelexec``,
``jupyter``, ``git``); each runs this module, which hands the command to the
real program except in the few cases where a test cannot do what a reader
does. Those cases, and what happens instead:

- ``pip install ...`` (also ``python -m pip install``) is resolved with
  ``--dry-run``: the requirements and extras must exist and be satisfiable
  (an extra that does not exist is only a pip warning: here it fails), and
  the test's environment is left as it is.
- ``python -m pytest ...`` (or ``pytest``) is the test suite this runs
  inside; CI runs that command itself (tests/test_readme.py checks it is
  .ci/run's command).
- ``python -m bench ...`` runs for up to an hour: its arguments are checked
  by the bench's own parser, and nothing is measured.
- A server (``kernelexec serve``, ``kernelexec gateway``, ``kernelexec mcp
  --http``, ``jupyter lab``) is what a reader leaves running in a second
  terminal: it is started in the background, waited for until it prints its
  URL and accepts connections, and stopped by the test at the end. ``jupyter
  lab`` gets ``--allow-root`` when run as root (tests run as root, readers do
  not), and first stops the JupyterLab the README started before, as a reader
  stops one (Ctrl-C) before starting the next on the same port. ``kernelexec
  mcp`` over stdio must answer an MCP ``initialize``.
- ``kernelexec image build`` from ``python:3.12-slim`` (the default) uses
  ``$KX_README_BASE_IMAGE`` instead when set: the test's Docker engine cannot
  pull from a registry and has a stand-in base image.
- ``git clone URL [DIR]`` copies the checkout under test, since the test has
  no network (and should test this checkout, not the published one).

Run as ``python _readme_shell.py NAME ARGS...``; the state folder is
``$KX_README_DIR`` (servers are listed in ``servers/``).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import re
import runpy
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, NoReturn

__all__ = ["WRAPPED", "copy_checkout", "install_wrappers", "loopback_up"]

WRAPPED = ("python", "python3", "pip", "pip3", "pytest", "kernelexec", "jupyter", "git")
# A server has started once it printed a loopback URL and that port accepts.
_URL = re.compile(r"https?://(?:127\.0\.0\.1|localhost|\[::1\]):(\d+)")
_READY_WITHIN = 180.0


def install_wrappers(bin_dir: Path) -> None:
    """Writes the wrappers into ``bin_dir``, each running this module with this Python."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name in WRAPPED:
        wrapper = bin_dir / name
        wrapper.write_text(
            f'#!/bin/sh\nexec "{sys.executable}" "{Path(__file__).resolve()}" {name} "$@"\n'
        )
        wrapper.chmod(0o755)


def copy_checkout(source: Path, target: Path) -> None:
    """Copies the files git knows in ``source`` (tracked, or new and not ignored) to ``target``."""
    listed = subprocess.run(
        ["git", "-C", str(source), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        check=True,
        timeout=60,
    )
    target.mkdir(parents=True, exist_ok=True)
    for name in sorted(set(listed.stdout.decode().split("\0")) - {""}):
        src = source / name
        if not src.is_file():  # listed by git, deleted in the work tree
            continue
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, target / name, follow_symlinks=False)


def loopback_up() -> None:
    """Brings ``lo`` up in this (new) network namespace, where it starts down."""
    siocgifflags, siocsifflags, iff_up = 0x8913, 0x8914, 0x1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sh", b"lo", 0)
        flags = struct.unpack("16sh", fcntl.ioctl(sock, siocgifflags, request))[1]
        fcntl.ioctl(sock, siocsifflags, struct.pack("16sh", b"lo", flags | iff_up))


def main(argv: list[str]) -> int:
    name, args = argv[0], argv[1:]
    if name == "--loopback-then":  # under `unshare --net`: lo up, then the terminal
        loopback_up()
        _exec(args)
    if name in ("python", "python3"):
        return _python(args)
    if name == "pytest":
        return _python(["-m", "pytest", *args])
    if name in ("pip", "pip3"):
        return _pip_dry_run(args[1:]) if args[:1] == ["install"] else _run_real(_PIP + args)
    if name == "kernelexec":
        return _kernelexec(args)
    if name == "jupyter":
        if args[:1] == ["lab"]:
            as_root = ["--allow-root"] if os.geteuid() == 0 else []
            _stop_earlier("jupyter-lab")
            return _background([sys.executable, "-m", "jupyter", *args, *as_root], "jupyter-lab")
        return _run_real([sys.executable, "-m", "jupyter", *args])
    if name == "git":
        if args[:1] == ["clone"]:
            return _clone(args[1:])
        return _run_real([_real_program("git"), *args])
    raise SystemExit(f"_readme_shell: nothing wraps {name!r}")


_PIP = [sys.executable, "-m", "pip"]


def _python(args: list[str]) -> int:
    if args[:3] == ["-m", "pip", "install"]:
        return _pip_dry_run(args[3:])
    if args[:2] == ["-m", "pytest"]:
        print(
            f"[README test] `python -m pytest {' '.join(args[2:])}` is the test suite this runs "
            "in; CI runs that command itself (.ci/run), so it is not run again here"
        )
        return 0
    if args[:2] == ["-m", "bench"]:
        return _bench_arguments(args[2:])
    _exec([sys.executable, *args])


def _pip_dry_run(args: list[str]) -> int:
    # The index is reached from the test's own network, not the README's namespace.
    host = os.environ.get("KX_README_HOST_NETNS")
    outside = ["nsenter", f"--net={host}", "--"] if host else []
    proc = subprocess.run(
        [*outside, *_PIP, "install", "--dry-run", *args],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    output = proc.stdout + proc.stderr
    would = [line for line in output.splitlines() if line.startswith("Would install")]
    print(f"[README test] pip install --dry-run {' '.join(args)}: exit {proc.returncode}")
    print("\n".join(would) or "(everything already installed)")
    missing = re.findall(r"does not provide the extra '([^']+)'", output)
    if proc.returncode != 0 or missing:
        print(output[-4000:], file=sys.stderr)
        if missing:
            print(f"[README test] no such extra: {', '.join(missing)}", file=sys.stderr)
        return proc.returncode or 1
    return 0


def _bench_arguments(args: list[str]) -> int:
    # The bench's own parser checks the arguments; it stops before anything runs.
    parse_args = argparse.ArgumentParser.parse_args

    def parse_only(parser: argparse.ArgumentParser, *a: Any, **k: Any) -> NoReturn:
        namespace = parse_args(parser, *a, **k)
        print(f"[README test] python -m bench accepts {args}: {namespace}; not measured here")
        raise SystemExit(0)

    argparse.ArgumentParser.parse_args = parse_only  # type: ignore[assignment,method-assign]
    sys.argv = ["bench", *args]
    sys.path.insert(0, os.getcwd())  # as `python -m` does
    try:
        runpy.run_module("bench", run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 1
    print("[README test] python -m bench never parsed its arguments", file=sys.stderr)
    return 1


def _kernelexec(args: list[str]) -> int:
    real = [sys.executable, "-m", "kernelexec"]
    command = next((a for a in args if not a.startswith("-")), "")
    if command in ("serve", "gateway") or (command == "mcp" and "--http" in args):
        return _background([*real, *args], f"kernelexec-{command}")
    if command == "mcp":
        return _mcp_stdio([*real, *args])
    if args[:2] == ["image", "build"]:
        return _run_real([*real, *_base_image_here(args)])
    _exec([*real, *args])


def _base_image_here(args: list[str]) -> list[str]:
    from kernelexec._backends._image import DEFAULT_BASE_IMAGE

    stand_in = os.environ.get("KX_README_BASE_IMAGE")
    if not stand_in:
        return args
    out, named = list(args), False
    for i, arg in enumerate(out):
        if arg == "--base-image" and i + 1 < len(out):
            named = True
            if out[i + 1] == DEFAULT_BASE_IMAGE:
                out[i + 1] = stand_in
        elif arg.startswith("--base-image="):
            named = True
            if arg.split("=", 1)[1] == DEFAULT_BASE_IMAGE:
                out[i] = f"--base-image={stand_in}"
    if not named:
        out += ["--base-image", stand_in]
    if out != args:
        print(
            f"[README test] base image {DEFAULT_BASE_IMAGE} -> {stand_in} "
            "(this engine cannot pull it)",
            file=sys.stderr,
        )
    return out


def _background(command: list[str], label: str) -> int:
    """Starts a server as a second terminal would, returning once it serves."""
    servers = Path(os.environ["KX_README_DIR"]) / "servers"
    servers.mkdir(parents=True, exist_ok=True)
    log = servers / f"{label}-{time.monotonic_ns()}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, **_detached()
        )
    (servers / f"{proc.pid}.json").write_text(
        json.dumps(
            {"pid": proc.pid, "command": command, "log": str(log), "started": time.time_ns()}
        )
    )
    deadline = time.monotonic() + _READY_WITHIN
    while True:
        text = log.read_text(errors="replace")
        found = _URL.search(text)
        if found and _accepts(int(found.group(1))):
            print(text.rstrip())
            print(f"[README test] {label} runs in the background (pid {proc.pid}): {found[0]}")
            return 0
        if proc.poll() is not None:
            print(text.rstrip())
            print(f"[README test] {label} exited with status {proc.returncode}", file=sys.stderr)
            return proc.returncode or 1
        if time.monotonic() > deadline:
            print(text.rstrip())
            print(f"[README test] {label} did not serve within {_READY_WITHIN:.0f} s")
            return 1
        time.sleep(0.2)


def _stop_earlier(label: str) -> None:
    """Stops the servers ``label`` started before (SIGTERM, as Ctrl-C), waiting for each."""
    for record in (Path(os.environ["KX_README_DIR"]) / "servers").glob("*.json"):
        server = json.loads(record.read_text())
        if not Path(server["log"]).name.startswith(f"{label}-"):
            continue
        try:
            os.kill(server["pid"], signal.SIGTERM)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and _running(server["pid"]):
                time.sleep(0.2)
            os.killpg(server["pid"], signal.SIGKILL)  # what it left: its session
        except ProcessLookupError:
            pass
        record.unlink()


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state not in ("Z", "X")


def _detached() -> dict[str, Any]:
    return {"start_new_session": True, "close_fds": True}


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            return True
    except OSError:
        return False


def _mcp_stdio(command: list[str]) -> int:
    """A stdio MCP server waits for its client: be that client for one handshake."""
    proc = subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stdin is not None and proc.stdout is not None
    hello = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "readme-test", "version": "0"},
        },
    }
    proc.stdin.write((json.dumps(hello) + "\n").encode())
    proc.stdin.flush()
    ready, _, _ = select.select([proc.stdout], [], [], _READY_WITHIN)
    line = proc.stdout.readline() if ready else b""
    proc.stdin.close()
    try:
        status = proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        status = proc.wait()
    stderr = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    try:
        server = json.loads(line)["result"]["serverInfo"]
    except (ValueError, KeyError, TypeError):
        print(f"{stderr}[README test] no MCP answer on stdout: {line[:500]!r}", file=sys.stderr)
        return 1
    print(stderr.rstrip())
    print(f"[README test] the stdio server answered initialize: {server}; exit {status}")
    return 0 if status == 0 else status


def _clone(args: list[str]) -> int:
    places = [a for a in args if not a.startswith("-")]
    if not places:
        print("[README test] git clone needs a URL", file=sys.stderr)
        return 2
    target = Path(places[1] if len(places) > 1 else places[0].rstrip("/").rsplit("/", 1)[-1])
    target = target.with_name(target.name.removesuffix(".git"))
    if target.exists() and any(target.iterdir()):
        print(f"fatal: destination path '{target}' already exists", file=sys.stderr)
        return 128
    copy_checkout(Path(os.environ["KX_README_CHECKOUT"]), target)
    print(f"[README test] cloned the checkout under test into {target} (no network here)")
    return 0


def _real_program(name: str) -> str:
    wrappers = os.environ.get("KX_README_BIN", "")
    path = os.pathsep.join(
        p for p in os.environ.get("PATH", "").split(os.pathsep) if p and p != wrappers
    )
    found = shutil.which(name, path=path)
    if found is None:
        raise SystemExit(f"{name}: command not found")
    return found


def _run_real(command: list[str]) -> int:
    return subprocess.run(command, check=False).returncode


def _exec(command: list[str]) -> NoReturn:
    sys.stdout.flush()
    os.execvp(command[0], command)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
