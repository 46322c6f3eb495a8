"""The start-up contract of ``serve``, ``gateway`` and ``mcp --http``, with real processes.

A bad port, a port in use, an unusable work root or a bad token is one line
on stderr naming the fix and exit status 2, with nothing said about serving
before it; ``--port 0`` prints the URL with the real port; the token rule is
the same for all three; none shares JupyterLab's port; SIGTERM and Ctrl-C
stop each cleanly.
"""

from __future__ import annotations

import contextlib
import os
import pty
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from _nobody import NOBODY, as_nobody
from _serverproc import descendants
from conftest import process_gone

from kernelexec._cli import _parser

COMMANDS = {
    "serve": ("serve",),
    "gateway": ("gateway",),
    "mcp --http": ("mcp", "--http"),
}
# The commands with a work root (the gateway's kernels start in the client's dir).
WITH_WORK_ROOT = ("serve", "mcp --http")
# Every character the token rule allows besides letters and digits.
ODD_TOKEN = "Ab0-._~+/xyz=="


def kernelexec(*argv: str) -> list[str]:
    return [sys.executable, "-m", "kernelexec", *argv]


def refused(argv: list[str], *, env: dict[str, str] | None = None, cwd: Path) -> str:
    """Runs a start-up that must fail; returns its one line after checking the contract."""
    proc = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=180,
        cwd=cwd,
        env={**os.environ, **(env or {})},
    )
    said = proc.stdout + proc.stderr
    assert proc.returncode == 2, said
    assert proc.stdout == "", said
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("kernelexec: "), said
    assert not re.search(r"serving|listening|traceback", said, re.IGNORECASE), said
    return lines[0]


# -- a bad port, a port in use


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("port", ["99999", "-1", "65536", "eighty", "8.5", ""])
def test_a_bad_port_is_one_line(command: str, port: str, tmp_path: Path) -> None:
    line = refused(
        kernelexec(*COMMANDS[command], "--port", port, "--token", ODD_TOKEN), cwd=tmp_path
    )
    assert "the port must be a whole number from 0 to 65535" in line
    assert "pass another --port (0 picks a free one)" in line


@pytest.mark.parametrize("command", COMMANDS)
def test_a_port_in_use_is_one_line(command: str, tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        line = refused(
            kernelexec(*COMMANDS[command], "--port", str(port), "--token", ODD_TOKEN),
            cwd=tmp_path,
        )
    assert f"cannot listen on 127.0.0.1:{port}: Address already in use" in line
    assert "choose another port (port 0 picks a free one)" in line


# -- the token rule


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize(
    ("token", "says"),
    [
        ("abc", "the token has 3 characters and needs at least 8"),
        ("1234567", "the token has 7 characters and needs at least 8"),
        ("with a space", "only letters, digits and - . _ ~ + /"),
        ("pa=dding-in-the-middle", "only letters, digits and - . _ ~ + /"),
        ("t\u00f6ken-not-ascii", "only letters, digits and - . _ ~ + /"),
        ("quote'd-token", "only letters, digits and - . _ ~ + /"),
    ],
)
def test_one_token_rule_for_every_command(
    command: str, token: str, says: str, tmp_path: Path
) -> None:
    line = refused(kernelexec(*COMMANDS[command], "--port", "0", "--token", token), cwd=tmp_path)
    assert says in line and "or neither to have one generated" in line
    assert token not in line  # a secret, even a bad one, is not repeated


@pytest.mark.parametrize("command", COMMANDS)
def test_the_token_from_the_environment_follows_the_rule(command: str, tmp_path: Path) -> None:
    line = refused(
        kernelexec(*COMMANDS[command], "--port", "0"),
        env={"KERNELEXEC_TOKEN": "short"},
        cwd=tmp_path,
    )
    assert "needs at least 8" in line and "KERNELEXEC_TOKEN" in line


@pytest.mark.parametrize("command", ["serve", "gateway"])
def test_no_generated_token_off_loopback(command: str, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "KERNELEXEC_TOKEN"}
    proc = subprocess.run(
        kernelexec(*COMMANDS[command], "--host", "0.0.0.0", "--port", "0"),
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tmp_path,
        env=env,
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("kernelexec: refusing to listen on 0.0.0.0 without a token")


# -- an unusable work root


@pytest.mark.parametrize("command", WITH_WORK_ROOT)
def test_a_file_as_work_root_is_one_line(command: str, tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("x")
    line = refused(
        kernelexec(*COMMANDS[command], "--port", "0", "--work-root", str(tmp_path / "a-file")),
        cwd=tmp_path,
    )
    assert "exists and is not a folder" in line and "pass a folder this user can write to" in line
    below = refused(
        kernelexec(*COMMANDS[command], "--port", "0", "--work-root", str(tmp_path / "a-file/x")),
        cwd=tmp_path,
    )
    assert "is below a file" in below


@pytest.fixture
def shared_base() -> Iterator[Path]:
    """A folder any user can reach (pytest's tmp_path is its owner's alone)."""
    base = Path(tempfile.mkdtemp(prefix="kx-startup-"))
    base.chmod(0o755)
    try:
        yield base
    finally:
        for path in base.rglob("*"):
            with contextlib.suppress(OSError):
                path.chmod(0o700)
        shutil.rmtree(base, ignore_errors=True)


def unprivileged(argv: list[str], base: Path) -> list[str]:
    """``argv`` run as an unprivileged user: as this one, or as nobody if this is root."""
    if os.geteuid() != 0:
        return argv
    become = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    return as_nobody(argv, base, become)


@pytest.mark.parametrize("command", WITH_WORK_ROOT)
def test_an_unwritable_work_root_is_one_line(command: str, shared_base: Path) -> None:
    # Read-only to its own (unprivileged) user: root would write in it anyway.
    read_only = shared_base / "read-only"
    read_only.mkdir()
    if os.geteuid() == 0:
        os.chown(read_only, NOBODY, NOBODY)
    read_only.chmod(0o555)
    for root in (read_only, read_only / "below"):
        argv = kernelexec(*COMMANDS[command], "--port", "0", "--work-root", str(root))
        line = refused(unprivileged(argv, shared_base), cwd=shared_base)
        assert f"--work-root {root} is not usable (Permission denied)" in line
        assert "pass a folder this user can write to" in line


@pytest.mark.parametrize("command", WITH_WORK_ROOT)
def test_another_users_private_folder_is_one_line(command: str, shared_base: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("making another user's folder needs root; the read-only case runs as you")
    private = shared_base / "roots-own"
    private.mkdir(mode=0o700)  # root's, 0700: nobody may not even look inside
    for root in (private, private / "below"):
        argv = kernelexec(*COMMANDS[command], "--port", "0", "--work-root", str(root))
        line = refused(unprivileged(argv, shared_base), cwd=shared_base)
        assert f"--work-root {root} is not usable (Permission denied)" in line
    assert list(private.iterdir()) == []  # nothing left behind


def test_a_work_root_made_for_a_failed_start_is_removed(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = str(taken.getsockname()[1])
        for command in WITH_WORK_ROOT:
            refused(
                kernelexec(*COMMANDS[command], "--port", port, "--token", ODD_TOKEN),
                env={"TMPDIR": str(tmp_path)},
                cwd=tmp_path,
            )
    assert list(tmp_path.iterdir()) == []


# -- serving: the real URL, the token, a clean stop


def wait_for_line(log: Path, proc: subprocess.Popen[bytes], pattern: str) -> re.Match[str]:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        found = re.search(pattern, log.read_text())
        if found:
            return found
        assert proc.poll() is None, log.read_text()
        time.sleep(0.1)
    raise AssertionError(f"no {pattern!r} in: {log.read_text()}")


@pytest.mark.parametrize(
    ("sig", "terminal"),
    [(signal.SIGTERM, False), (signal.SIGINT, False), (signal.SIGINT, True)],
    ids=["SIGTERM", "SIGINT", "ctrl-c-on-a-terminal"],
)
@pytest.mark.parametrize("command", COMMANDS)
def test_port_0_prints_the_real_url_and_a_signal_stops_cleanly(
    command: str, sig: signal.Signals, terminal: bool, tmp_path: Path
) -> None:
    # On a terminal (stdin a tty) stock Kernel Gateway answers Ctrl-C with a
    # "Shutdown this Jupyter server (y/[n])?" prompt and, unanswered, goes on.
    log = tmp_path / "out.log"
    argv = kernelexec(*COMMANDS[command], "--port", "0", "--token", ODD_TOKEN)
    if command != "gateway":
        argv += ["--work-root", str(tmp_path / "root")]
    tty, stdin = pty.openpty() if terminal else (None, subprocess.DEVNULL)
    with log.open("wb") as out:
        proc = subprocess.Popen(
            argv, stdin=stdin, stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path
        )
    if tty is not None:
        os.close(stdin)  # the child has its copy; ours would keep the pty open
    try:
        found = wait_for_line(log, proc, r"serving (http://127\.0\.0\.1:(\d+)\S*)")
        url, port = found.group(1), int(found.group(2))
        assert port != 0
        assert "token" not in log.read_text().lower()  # given, so not printed
        http = httpx.Client(
            trust_env=False, timeout=120, headers={"Authorization": f"Bearer {ODD_TOKEN}"}
        )
        with http:
            kernels: set[int] = set()
            if command == "serve":
                assert http.post(f"{url}/sessions", json={}).status_code == 201
            elif command == "gateway":
                # Kernel Gateway takes "token <token>"; the token with every odd character works.
                started = http.post(
                    f"{url}/api/kernels", json={}, headers={"Authorization": f"token {ODD_TOKEN}"}
                )
                assert started.status_code == 201, started.text
            else:
                assert url.endswith("/mcp")
                refused_call = httpx.post(url, json={}, trust_env=False, timeout=60)
                assert refused_call.status_code == 401  # the server is up and wants the token
                assert http.post(url, json={}).status_code not in (401, 404)
            if command != "mcp --http":
                kernels = descendants(proc.pid)
                assert kernels, "no kernel started"
        proc.send_signal(sig)
        assert proc.wait(120) == 0, log.read_text()
        assert all(process_gone(pid) for pid in kernels), "a kernel outlived the server"
        assert "Traceback" not in log.read_text(), log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if tty is not None:
            os.close(tty)


@pytest.mark.parametrize("command", COMMANDS)
def test_a_generated_token_is_printed_after_the_url(command: str, tmp_path: Path) -> None:
    log = tmp_path / "out.log"
    env = {k: v for k, v in os.environ.items() if k != "KERNELEXEC_TOKEN"}
    argv = kernelexec(*COMMANDS[command], "--port", "0")
    if command != "gateway":
        argv += ["--work-root", str(tmp_path / "root")]
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path, env=env)
    try:
        found = wait_for_line(log, proc, r"serving (\S+)[^\n]*\n[^\n]*token (\S+)")
        url, token = found.groups()
        assert len(token) >= 32
        wanted = "token" if command == "gateway" else "Bearer"
        path = "/api/kernelspecs" if command == "gateway" else "/sessions"
        if command == "mcp --http":
            path = ""
        answer = httpx.get(
            url + path, headers={"Authorization": f"{wanted} {token}"}, trust_env=False, timeout=60
        )
        assert answer.status_code not in (401, 403, 404)
    finally:
        proc.terminate()
        assert proc.wait(120) == 0, log.read_text()


@pytest.mark.parametrize("command", COMMANDS)
def test_a_token_that_begins_with_a_dash_is_taken_as_written(command: str, tmp_path: Path) -> None:
    # One token in 64 from secrets.token_urlsafe (the docs' way to make one) begins
    # with "-", and argparse read `--token -abc...` as an option missing its value:
    # the server-client notebook's start failed so in CI.
    token = "-" + ODD_TOKEN
    log = tmp_path / "out.log"
    argv = kernelexec(*COMMANDS[command], "--port", "0", "--token", token)
    if command != "gateway":
        argv += ["--work-root", str(tmp_path / "root")]
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path)
    try:
        url = wait_for_line(log, proc, r"serving (\S+)").group(1)
        # Still hidden from what any process of the machine reads of the command.
        shown = Path(f"/proc/{proc.pid}/cmdline").read_bytes().split(b"\0")
        assert token.encode() not in shown and b"*" * len(token) in shown, shown
        wanted = "token" if command == "gateway" else "Bearer"
        path = {"gateway": "/api/kernelspecs", "serve": "/sessions"}.get(command, "")
        for given, taken in ((token, True), (ODD_TOKEN, False)):  # the dash is the token's
            answer = httpx.get(
                url + path,
                headers={"Authorization": f"{wanted} {given}"},
                trust_env=False,
                timeout=60,
            )
            denied = answer.status_code in (401, 403)
            assert denied is not taken and answer.status_code != 404, answer.text
    finally:
        proc.terminate()
        assert proc.wait(120) == 0, log.read_text()


def test_an_opaque_option_takes_the_next_word_unless_it_is_an_option() -> None:
    parser = _parser()
    attach = parser.parse_args(["attach", "s1", "--token", "-t0ken-x", "--lab-token", "-lab"])
    assert (attach.token, attach.lab_token) == ("-t0ken-x", "-lab")
    assert parser.parse_args(["serve", "--token", "--dash-dash-x"]).token == "--dash-dash-x"
    # A token left out is still an error, not the next option taken as the token.
    with pytest.raises(SystemExit):
        parser.parse_args(["serve", "--token", "--port", "0"])


# -- default ports


def test_default_ports_are_distinct_and_not_jupyterlabs() -> None:
    parser = _parser()
    ports = {name: int(parser.parse_args([*argv]).port) for name, argv in COMMANDS.items()}
    # Stable: the README and clients' configs name them.
    assert ports == {"serve": 8765, "gateway": 8767, "mcp --http": 8766}
    assert not set(ports.values()) & set(range(8888, 8900))  # JupyterLab's, and where it moves


def test_a_generated_token_never_starts_like_an_option() -> None:
    # One URL-safe token in 64 starts with "-", which `--token -abc` then reads as
    # an option (seen: the README's `attach --lab-token "$JUPYTER_TOKEN"` failed).
    from kernelexec._server import generate_token

    assert not any(generate_token().startswith("-") for _ in range(2000))
