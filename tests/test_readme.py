"""Every python and shell block of README.md and of the documentation site's
pages (docs/**/*.md) runs as written, top to bottom.

A reader follows a page in one terminal and one Python prompt per section;
``test_the_page_runs_as_written`` does the same for each page, in a fresh copy
of this checkout (so ``pip install -e .``, ``notebooks/...`` and ``--work-dir
demo`` mean what they mean to a reader, and the checkout stays clean), with a
fresh ``$HOME`` and no ``KERNELEXEC_*`` or ``JUPYTER_*`` variables: the set-up
is what the page itself says. A page that needs a server starts it, as a
reader would; one page's files and servers are never another's.

How each block runs, by its fence's language:

- ``bash``, ``sh``, ``shell``: in one bash process for the whole page (so
  ``export``, variables and ``cd`` carry on, as in a terminal), each block
  under ``set -euo pipefail``: every command must succeed and every variable
  must be set. A few commands cannot run in a test as a reader runs them
  (installs, the test suite itself, the hour-long benchmark, servers left
  running in a second terminal, image pulls, ``git clone``): see
  tests/_readme_shell.py for what is done instead.
- ``console``: its ``$ `` lines run as a ``bash`` block; the other lines are a
  sample of the output, not compared.
- ``python``, ``py``: in a Jupyter kernel, one per ``##`` section (so a
  section's blocks share their state, and top-level ``await`` works as in
  Jupyter or IPython), started in the terminal's directory with its exported
  variables. A block that raises fails the test.
- ``json``: parsed. ``text``, ``output`` and the like: samples, not run.
- Docker blocks (``kernelexec image build``, ``DockerBackend``) need a Docker
  engine, and ``mkdocs`` blocks the ``docs`` extra; without them they are
  left out and the test is skipped at the end (with CI=true, a failure).
  Ray's blocks and those importing E2B's SDK (whose defaults call E2B's cloud)
  run only where the page has a network namespace of its own, as root.

The pages' servers listen on their default ports (8765, 8766, 8767, 8888),
which other programs on a test machine may hold (the benchmark's Kernel
Gateway holds 8888 while it runs). So, run as root, each page's terminal and
Python prompts get a network namespace of their own, with only loopback (the
kernels' sockets are Unix sockets, which reach across it; ``pip`` still
reaches the package index from the test's network), and pages run in
parallel. Run as another user, the pages share the machine's loopback and run
one at a time, and a port in use fails the block that needs it, saying so.

Any other block (no language, or one this does not know) fails
``test_every_block_is_classified`` with what to do: label it, or, for a block
that cannot run anywhere a test runs, put ``<!-- test: skip REASON -->`` on
the line above it. Such markers are listed by
``test_skip_markers_are_few_and_say_why``, which allows at most three in all.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import importlib.util
import json
import os
import queue
import re
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
from _pids import end_netns
from _readme_shell import copy_checkout, install_wrappers
from conftest import process_gone
from jupyter_client.manager import KernelManager
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from servers import FAVOURED, RAY_CLUSTER_LOCK, file_lock, unavailable

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
# The README, then the site's pages in the order of their paths.
PAGES = [README, *sorted((ROOT / "docs").rglob("*.md"))]
PYTHON = frozenset({"python", "py", "python3", "ipython"})
SHELL = frozenset({"bash", "sh", "shell"})
CONSOLE = frozenset({"console", "shell-session"})
DATA = frozenset({"json"})
SAMPLES = frozenset(
    {"text", "txt", "plain", "output", "log", "diff", "yaml", "toml", "ini", "csv", "markdown"}
)
MAX_SKIP_MARKERS = 3
BLOCK_TIMEOUT = 1500.0  # a first `kernelexec image build --packages ...` downloads and builds
SERVER_STOP_WITHIN = 60.0
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_MARKER = re.compile(r"^\s*<!--\s*test:\s*(.*?)\s*-->\s*$")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_FENCE = re.compile(r"^(?P<indent> {0,12})(?P<fence>`{3,}|~{3,})(?P<info>.*)$")


@dataclass(frozen=True)
class Block:
    """One fenced block of a page."""

    line: int  # of the opening fence, 1-based
    section: str  # the ## heading it is under
    heading: str  # the nearest heading
    language: str  # the info string's first word, lower case ("" when none)
    code: str
    marker: str | None  # the text of a <!-- test: ... --> on the line above
    page: str = "README.md"  # its file, relative to the checkout

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line} ({self.heading})"


def read_blocks(text: str, page: str = "README.md") -> list[Block]:
    """The fenced blocks of a Markdown text, ``` or ~~~, indented ones too."""
    blocks: list[Block] = []
    section = heading = ""
    marker: str | None = None
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        opening = _FENCE.match(line)
        if opening is None or (opening["fence"][0] == "`" and "`" in opening["info"]):
            found = _HEADING.match(line)
            if found:
                heading = found[2]
                section = heading if len(found[1]) <= 2 else section
            seen = _MARKER.match(line)
            if seen:
                marker = seen[1]
            elif line.strip():
                marker = None  # a marker belongs to the block right below it
            i += 1
            continue
        indent, fence = len(opening["indent"]), opening["fence"]
        info = opening["info"].strip()
        language = re.split(r"[\s{]", info.lstrip("{."), maxsplit=1)[0].lower() if info else ""
        body: list[str] = []
        i += 1
        while i < len(lines):
            closing = re.match(r"^ *(`{3,}|~{3,})\s*$", lines[i])
            if closing and closing[1][0] == fence[0] and len(closing[1]) >= len(fence):
                break
            body.append(lines[i][indent:] if lines[i][:indent].strip() == "" else lines[i])
            i += 1
        code = "\n".join(body)
        blocks.append(Block(i - len(body), section, heading, language, code, marker, page))
        marker = None
        i += 1
    return blocks


def kind_of(block: Block) -> str:
    """``python``, ``shell``, ``json``, ``sample`` or ``skip``.

    Raises:
        ValueError: none of those, with what to do about it.
    """
    advice = (
        "label its fence python or bash to have the test run it, json to have it "
        "parsed, or text for sample output; a block that cannot run on any test machine "
        "gets <!-- test: skip REASON --> on the line above it"
    )
    if block.marker is not None:
        verb, _, reason = block.marker.partition(" ")
        if verb != "skip" or not reason.strip():
            raise ValueError(f"{block.where}: <!-- test: {block.marker} --> is not 'skip REASON'")
        if block.language not in PYTHON | SHELL | CONSOLE:
            raise ValueError(f"{block.where}: only a python or shell block needs a skip marker")
        return "skip"
    if block.language in PYTHON:
        return "python"
    if block.language in SHELL:
        return "shell"
    if block.language in CONSOLE:
        if not console_commands(block.code):
            raise ValueError(f"{block.where}: a console block without any '$ ' command; {advice}")
        return "shell"
    if block.language in DATA:
        return "json"
    if block.language in SAMPLES:
        return "sample"
    named = f"```{block.language}" if block.language else "a fence without a language"
    raise ValueError(f"{block.where}: {named} is neither code the test runs nor a sample; {advice}")


def console_commands(code: str) -> str:
    """The commands of a console block: its ``$ `` lines, with their ``\\`` continuations."""
    commands: list[str] = []
    continued = False
    for line in code.splitlines():
        if continued or line.startswith("$ "):
            commands.append(line if continued else line[2:])
            continued = line.endswith("\\")
    return "\n".join(commands)


def shell_script(block: Block) -> str:
    return console_commands(block.code) if block.language in CONSOLE else block.code


def needs_docker(block: Block) -> bool:
    if block.language in PYTHON:
        return "DockerBackend" in block.code
    return bool(re.search(r"\bkernelexec image build\b|^\s*docker\s", block.code, re.M))


def needs_ray(block: Block) -> bool:
    """A block of a Ray cluster's: run only in a network namespace of the page's own."""
    if block.language in PYTHON:
        return "RayBackend(" in block.code
    return bool(re.search(r"\bray start\b|--ray\b", shell_script(block)))


def ray_missing() -> str | None:
    """Why a page's Ray blocks cannot run here (None: they can)."""
    if not own_network():
        return "a page's Ray cluster runs only in a network namespace of its own (as root)"
    try:
        import ray  # noqa: F401
    except ImportError:
        return "ray is not installed (the test extra has it)"
    return None


def needs_e2b(block: Block) -> bool:
    """A block using E2B's SDK, whose defaults call E2B's cloud: run only in a network
    namespace of the page's own, where a setting missed cannot reach past loopback."""
    return block.language in PYTHON and bool(
        imported_modules(block.code) & {"e2b", "e2b_code_interpreter"}
    )


def e2b_missing() -> str | None:
    """Why a page's E2B blocks cannot run here (None: they can)."""
    if not own_network():
        return "E2B's SDK runs only in a network namespace of the page's own (as root)"
    if importlib.util.find_spec("e2b_code_interpreter") is None:
        return "E2B's SDK is not installed (the test extra has e2b-code-interpreter)"
    return None


def ray_logs(home: Path, lines: int = 15) -> str:
    """The ends of the logs of the Ray cluster a page started (under its $TMPDIR)."""
    tails = []
    for log in sorted((home / "tmp" / "ray").glob("session_*/logs/*")):
        if log.name.startswith(("raylet.", "gcs_server.")) and log.is_file():
            text = log.read_text(errors="replace").splitlines()[-lines:]
            tails.append(f"--- {log.parent.parent.name}/{log.name}:\n" + "\n".join(text))
    return "\n" + "\n".join(tails) if tails else ""


def needs_mkdocs(block: Block) -> bool:
    return block.language not in PYTHON and bool(
        re.search(r"^\s*(python -m )?mkdocs\s", shell_script(block), re.M)
    )


# -- installs and imports


def pip_installs(code: str) -> list[str]:
    """What each ``pip install`` in ``code`` (a command, or a comment) names, as requirements;
    the checkout (``.``, ``-e .[x]``) is ``kernelexec[x]``."""
    named: list[str] = []
    for found in re.finditer(r"\bpip install\s+([^\n#;&|]*)", code):
        for word in shlex.split(found[1]):
            if word.startswith("-"):
                continue
            if word == "." or word.startswith(".["):
                word = "kernelexec" + word[1:]
            named.append(word)
    return named


_IMPORT = re.compile(
    r"(?:(?<![\w.])|(?<=\\n))(?:from\s+([A-Za-z_]\w*)[\w.]*\s+import\b"
    r"|import\s+([A-Za-z_][\w.]*(?:\s*,\s*[A-Za-z_][\w.]*)*))"
)


def imported_modules(code: str) -> set[str]:
    """Top-level modules a python block imports, in its code or in code it sends as a string."""
    modules: set[str] = set()
    for from_module, import_list in _IMPORT.findall(code):
        if from_module:
            modules.add(from_module)
        for name in import_list.split(","):
            if name.strip():
                modules.add(name.strip().split(".")[0])
    return modules


def installed_closure(requirements: list[str]) -> set[str]:
    """The distributions ``pip install`` of ``requirements`` brings, from installed metadata;
    kernelexec's own from pyproject.toml (the metadata of an editable install can lag)."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    seen: set[tuple[str, frozenset[str]]] = set()
    todo = [Requirement(r) for r in requirements]
    while todo:
        req = todo.pop()
        name, extras = canonicalize_name(req.name), frozenset(req.extras)
        if (name, extras) in seen:
            continue
        seen.add((name, extras))
        if name == "kernelexec":
            wanted = [*project["dependencies"]]
            for extra in extras:
                wanted += project["optional-dependencies"].get(extra, [])
            todo += [Requirement(r) for r in wanted]
            continue
        try:
            requires = metadata.distribution(name).requires or []
        except metadata.PackageNotFoundError:
            continue  # not installed here: whatever it provides is not importable either
        for line in requires:
            sub = Requirement(line)
            if sub.marker is None or any(
                sub.marker.evaluate({"extra": extra}) for extra in (extras or {""})
            ):
                todo.append(sub)
    return {name for name, _ in seen}


# -- running the blocks


class BlockFailed(Exception):
    """A block did not run as written; the message has its output."""


@functools.cache
def own_network() -> bool:
    """Whether a page can run in a network namespace of its own (root, with unshare)."""
    if os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("nsenter") is None:
        return False
    probe = subprocess.run(["unshare", "--net", "true"], capture_output=True, timeout=60)
    return probe.returncode == 0


class Terminal:
    """One bash for the whole page, fed block after block, as a reader's terminal.

    With ``own_network``, it runs in a network namespace of its own, where only
    the page's programs listen: the page's servers use their default ports
    (8765, 8888, ...), which other programs on a test machine may hold.
    """

    def __init__(
        self, cwd: Path, env: dict[str, str], *, own_network: bool, favoured: bool = False
    ) -> None:
        bash = ["bash", "--noprofile", "--norc"]
        if own_network:
            shell = Path(__file__).with_name("_readme_shell.py")
            bash = ["unshare", "--net", "--", sys.executable, str(shell), "--loopback-then", *bash]
        if favoured:
            bash = [*FAVOURED, *bash]
        self.proc = subprocess.Popen(
            bash,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=env,
            start_new_session=True,
        )
        # unshare and the loopback step exec, so the pid is bash's.
        self.netns = f"/proc/{self.proc.pid}/ns/net" if own_network else None
        self._chunks: queue.Queue[bytes] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.scripts = cwd.parent / "blocks"
        self.scripts.mkdir(exist_ok=True)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        # os.read: what is there now, not a full buffer (output shows as it comes).
        while chunk := os.read(self.proc.stdout.fileno(), 65536):
            self._chunks.put(chunk)
        self._chunks.put(b"")

    def run(self, script: str, *, timeout: float = BLOCK_TIMEOUT) -> str:
        """Runs ``script`` under ``set -euo pipefail``; its output, or BlockFailed."""
        path = self.scripts / f"block-{time.monotonic_ns()}.sh"
        path.write_text(script + "\n")
        done = f"__readme_block_done_{secrets.token_hex(8)}"
        assert self.proc.stdin is not None
        self.proc.stdin.write(
            f"set -euo pipefail; source {shlex.quote(str(path))} </dev/null; "
            f"set +euo pipefail; echo; echo {done}\n".encode()
        )
        self.proc.stdin.flush()
        output = b""
        deadline = time.monotonic() + timeout
        while done.encode() not in output:
            try:
                chunk = self._chunks.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                self.close()
                raise BlockFailed(
                    f"still running after {timeout:.0f} s:\n{output.decode()}"
                ) from None
            if not chunk:
                status = self.proc.wait()
                raise BlockFailed(f"exit status {status}:\n{output.decode(errors='replace')}")
            output += chunk
        return output.decode(errors="replace").split(done)[0].rstrip("\n")

    def exported(self) -> tuple[Path, dict[str, str]]:
        """The terminal's directory and exported variables, for a program started from it."""
        dump = self.scripts / "env"
        where = self.run(f"env -0 > {shlex.quote(str(dump))}; pwd").strip().splitlines()[-1]
        pairs = (item.partition("=") for item in dump.read_text().split("\0") if item)
        return Path(where), {key: value for key, _, value in pairs}

    def close(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


class _KernelIn(KernelManager):
    """A kernel started in a network namespace (nsenter execs, so the pid is the kernel's)."""

    netns: str | None = None

    def format_kernel_cmd(self, extra_arguments: list[str] | None = None) -> list[str]:
        command: list[str] = super().format_kernel_cmd(extra_arguments)
        return ["nsenter", f"--net={self.netns}", "--", *command] if self.netns else command


class PythonPrompt:
    """A Jupyter kernel for one section's python blocks, where the terminal is."""

    def __init__(self, cwd: Path, env: dict[str, str], sockets: Path, netns: str | None) -> None:
        # Unix sockets, which reach across network namespaces (and no TCP port
        # to lose to another process before the kernel binds it).
        self.manager = _KernelIn(kernel_name="python3", transport="ipc", ip=str(sockets))
        self.manager.netns = netns
        self.manager.start_kernel(cwd=str(cwd), env=env)
        self.client = self.manager.client()
        self.client.start_channels()
        self.client.wait_for_ready(timeout=120)

    def run(self, code: str, *, timeout: float = BLOCK_TIMEOUT) -> str:
        outputs: list[str] = []

        def collect(msg: dict[str, Any]) -> None:
            content = msg["content"]
            if msg["msg_type"] == "stream":
                outputs.append(content["text"])
            elif msg["msg_type"] in ("execute_result", "display_data"):
                outputs.append(content["data"].get("text/plain", "") + "\n")
            elif msg["msg_type"] == "error":
                outputs.append(_ANSI.sub("", "\n".join(content["traceback"])) + "\n")

        try:
            reply = self.client.execute_interactive(
                code, timeout=timeout, output_hook=collect, allow_stdin=False
            )
        except TimeoutError:
            self.manager.interrupt_kernel()
            raise BlockFailed(f"still running after {timeout:.0f} s:\n{''.join(outputs)}") from None
        if reply["content"]["status"] != "ok":
            raise BlockFailed("".join(outputs) or str(reply["content"]))
        return "".join(outputs).rstrip("\n")

    def close(self) -> None:
        self.client.stop_channels()
        self.manager.shutdown_kernel(now=True)


class PageRun:
    """A reader's machine: a copy of the checkout, a terminal, a Python prompt per section."""

    def __init__(self, tmp: Path, *, base_image: str | None, ray: bool = False) -> None:
        self.state = tmp / "state"
        bin_dir = self.state / "bin"
        install_wrappers(bin_dir)
        self.checkout = tmp / "kernelexec"
        copy_checkout(ROOT, self.checkout)
        # $HOME, with $TMPDIR in it, so that what the page leaves in temp dirs
        # goes when the run ends. Short: Jupyter's runtime dir, where `kernelexec
        # gateway` puts its kernels' Unix sockets, is under it, and a socket's
        # path has at most 107 bytes.
        self.home = Path(tempfile.mkdtemp(prefix="kxr-"))
        (self.home / "tmp").mkdir()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("KERNELEXEC_", "JUPYTER_"))}
        env.update(
            HOME=str(self.home),
            TMPDIR=str(self.home / "tmp"),
            PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",
            BROWSER="true",  # JupyterLab opens no browser window on the test machine
            KX_README_DIR=str(self.state),
            KX_README_BIN=str(bin_dir),
            KX_README_CHECKOUT=str(ROOT),
            KX_README_BASE_IMAGE=base_image or "",
        )
        isolated = own_network()
        if isolated:  # pip reaches the package index from the test's own network
            env["KX_README_HOST_NETNS"] = f"/proc/{os.getpid()}/ns/net"
        # A Ray page's terminal, and the cluster it starts, before the rest of the run:
        # `ray start` gives up on its raylet after 30 s, fixed in Ray, which a raylet
        # waiting for its Python agent to import can pass on a busy 2-core machine
        # (measured: 28 s beside six busy loops, 8 s favoured).
        favoured = ray and isolated  # isolated: root, who may raise a priority
        self.terminal = Terminal(self.checkout, env, own_network=isolated, favoured=favoured)
        self.prompt: PythonPrompt | None = None
        self.prompt_section: str | None = None

    def run(self, block: Block) -> str:
        if kind_of(block) == "shell":
            return self.terminal.run(shell_script(block))
        if self.prompt_section != block.section:
            self._close_prompt()
            cwd, env = self.terminal.exported()
            sockets = self.state / f"kernel-{block.line}"
            prompt = PythonPrompt(cwd, env, sockets, self.terminal.netns)
            self.prompt, self.prompt_section = prompt, block.section
        assert self.prompt is not None
        return self.prompt.run(block.code)

    def _close_prompt(self) -> None:
        prompt, self.prompt = self.prompt, None
        if prompt is not None:
            prompt.close()

    def close(self) -> list[str]:
        """Stops everything; what did not stop as it should.

        In a network namespace of the page's own, whatever still runs there once
        its servers have stopped (a Ray cluster the page started, say) is ended
        too, as a reader's machine would be shut down.
        """
        held = None
        if self.terminal.netns is not None:
            with contextlib.suppress(OSError):  # held open: its pids cannot be reused meanwhile
                held = os.open(self.terminal.netns, os.O_RDONLY)
        try:
            problems = self._stop()
            if held is not None:
                end_netns(os.fstat(held), exclude=(os.getpid(),), grace=0)
        finally:
            if held is not None:
                os.close(held)
        return problems

    def _stop(self) -> list[str]:
        self._close_prompt()
        self.terminal.close()
        problems = stop_servers(self.state / "servers")
        shutil.rmtree(self.home, ignore_errors=True)
        return problems


def stop_servers(servers: Path) -> list[str]:
    """SIGTERM to each server the page started, as Ctrl-C in its terminal would do.

    The last started is stopped first, and waited for, as a reader closes the
    terminals: JupyterLab, a client of ``kernelexec serve``, goes before it.
    (A JupyterLab whose gateway is gone hangs in its kernels' shutdown.)
    """
    problems: list[str] = []
    started = [json.loads(p.read_text()) for p in servers.glob("*.json")]
    started.sort(key=lambda server: server["started"], reverse=True)
    for server in started:
        with contextlib.suppress(ProcessLookupError):
            os.kill(server["pid"], signal.SIGTERM)
        deadline = time.monotonic() + SERVER_STOP_WITHIN
        while not process_gone(server["pid"]) and time.monotonic() < deadline:
            time.sleep(0.2)
        if not process_gone(server["pid"]):
            log = Path(server["log"]).read_text(errors="replace")[-3000:]
            problems.append(
                f"{shlex.join(server['command'])} did not stop within "
                f"{SERVER_STOP_WITHIN:.0f} s of SIGTERM; its log ends:\n{log}"
            )
        with contextlib.suppress(ProcessLookupError):  # its session: stragglers too
            os.killpg(server["pid"], signal.SIGKILL)
    return problems


def docker_base_image() -> tuple[str | None, str | None]:
    """The base image for ``kernelexec image build`` here, or why Docker blocks cannot run."""
    try:
        info = subprocess.run(["docker", "info"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"no Docker engine ({exc})"
    if info.returncode != 0:
        return None, f"the Docker engine is not reachable: {info.stderr.strip()[:300]}"
    base = os.environ.get("KERNELEXEC_TEST_BASE_IMAGE") or "kernelexec-base:bookworm"
    inspect = subprocess.run(["docker", "image", "inspect", base], capture_output=True, timeout=60)
    return (base, None) if inspect.returncode == 0 else (None, None)


# -- the tests


def _blocks(path: Path) -> list[Block]:
    return read_blocks(path.read_text(encoding="utf-8"), path.relative_to(ROOT).as_posix())


BLOCKS = {path: _blocks(path) for path in PAGES}
ALL_BLOCKS = [block for blocks in BLOCKS.values() for block in blocks]
PAGE_IDS = [path.relative_to(ROOT).as_posix() for path in PAGES]


def _runs(block: Block) -> bool:
    try:
        return kind_of(block) in ("python", "shell")
    except ValueError:  # test_every_block_is_classified says what to do
        return True


# The pages with code (the API reference and the changelog have none).
CODE_PAGES = [path for path in PAGES if any(_runs(b) for b in BLOCKS[path])]


def test_the_pages_are_the_readme_and_the_site() -> None:
    names = set(PAGE_IDS)
    assert {"README.md", "docs/index.md", "docs/getting-started.md"} <= names, names
    assert "docs/design.md" in names  # its drawings are text; any code in it runs too
    assert README in CODE_PAGES and len(CODE_PAGES) > len(PAGES) / 2


@pytest.mark.parametrize("path", PAGES, ids=PAGE_IDS)
def test_every_block_is_classified(path: Path) -> None:
    problems = []
    for block in BLOCKS[path]:
        try:
            kind = kind_of(block)
        except ValueError as exc:
            problems.append(str(exc))
            continue
        if kind == "skip" and block.language in PYTHON:
            # Not run, but it must still be Python.
            compile(block.code, block.where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        if kind == "skip" and block.language not in PYTHON:
            syntax = subprocess.run(
                ["bash", "-n"], input=shell_script(block), capture_output=True, text=True
            )
            if syntax.returncode != 0:
                problems.append(f"{block.where}: not bash: {syntax.stderr.strip()}")
        if kind == "json":
            try:
                json.loads(block.code)
            except ValueError as exc:
                problems.append(f"{block.where}: not JSON: {exc}")
    assert problems == []


def test_skip_markers_are_few_and_say_why() -> None:
    skipped = [f"{b.where}: {b.marker}" for b in ALL_BLOCKS if b.marker is not None]
    print("\n".join(["Blocks the test does not run:", *skipped]))
    assert len(skipped) <= MAX_SKIP_MARKERS, skipped


def test_every_pip_install_names_extras_that_exist() -> None:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    extras = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    )
    named = {
        extra
        for block in ALL_BLOCKS
        for requirement in pip_installs(block.code)
        if canonicalize_name(Requirement(requirement).name) == "kernelexec"
        for extra in Requirement(requirement).extras
    }
    assert named and named <= extras, f"the pages install extras pyproject lacks: {named - extras}"


def _quick_start_install() -> list[str]:
    """What the README's Quick start installs first: what every reader has."""
    return next(
        pip_installs(line)
        for b in BLOCKS[README]
        for line in b.code.splitlines()
        if pip_installs(line)
    )


@pytest.mark.parametrize("path", PAGES, ids=PAGE_IDS)
def test_the_quick_start_installs_what_every_example_imports(path: Path) -> None:
    # What a reader who ran only the Quick start's first command has, plus what
    # the example's own section says to install.
    first_install = _quick_start_install()
    assert "kernelexec[examples]" in first_install, first_install
    stdlib = set(sys.stdlib_module_names)
    providers = {
        m: {canonicalize_name(d) for d in ds} for m, ds in metadata.packages_distributions().items()
    }
    problems = []
    blocks = BLOCKS[path]
    for block in blocks:
        if block.language not in PYTHON:
            continue
        scope = [b for b in blocks if b.heading == block.heading]
        brought = installed_closure(
            first_install + [r for b in scope for r in pip_installs(b.code)]
        )
        for module in sorted(imported_modules(block.code) - stdlib - {"kernelexec"}):
            if not providers.get(module, set()) & brought:
                from_ = ", ".join(sorted(providers.get(module, {"nothing installed"})))
                problems.append(
                    f"{block.where} imports {module} (from {from_}), which {first_install} "
                    "and its section's pip install do not bring"
                )
    assert problems == []


def test_the_quick_start_test_command_is_the_one_ci_runs() -> None:
    # The harness does not run the test suite inside itself: CI runs it (.ci/run).
    ci_lines = [
        line.strip()
        for line in (ROOT / ".ci" / "run").read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    [quick_test] = [
        line.split("  #")[0].strip()
        for block in BLOCKS[README]
        if block.section == "Quick start" and kind_of(block) == "shell"
        for line in block.code.splitlines()
        if "-m pytest" in line
    ]
    assert quick_test == ci_lines[-1]
    for block in ALL_BLOCKS:
        for found in re.finditer(r"python -m pytest[^\n#]*", block.code):
            assert found[0].strip() in ci_lines[-1], f"{block.where}: {found[0]}"


def test_the_harness_reads_every_kind_of_fence() -> None:
    text = (
        "## One\n\n```python\nx = 1\n```\n\n<!-- test: skip needs a cluster -->\n"
        "```bash\nkubectl get pods\n```\n\n### Sub\n\n- a list item:\n\n"
        "   ~~~py title='a.py'\n   y = 2\n     z = 3\n   ~~~\n\n"
        "```\nraw\n```\n\n## Two\n\n````console\n$ echo a \\\n  b\na b\n````\n"
    )
    one, two, three, four, five = read_blocks(text, "docs/x.md")
    assert (one.section, one.language, one.code, one.marker) == ("One", "python", "x = 1", None)
    assert one.where == "docs/x.md:3 (One)"
    assert (two.marker, kind_of(two)) == ("skip needs a cluster", "skip")
    assert (three.heading, three.section, three.language) == ("Sub", "One", "py")
    assert three.code == "y = 2\n  z = 3" and three.line == 16
    with pytest.raises(ValueError, match=r"without a language.*<!-- test: skip REASON -->"):
        kind_of(four)
    assert (five.section, kind_of(five)) == ("Two", "shell")
    assert shell_script(five) == "echo a \\\n  b"
    with pytest.raises(ValueError, match="is neither code"):
        kind_of(Block(1, "s", "s", "javascript", "alert(1)", None))
    assert needs_mkdocs(Block(1, "s", "s", "bash", "pip install x\nmkdocs build --strict", None))
    assert not needs_mkdocs(Block(1, "s", "s", "python", "import mkdocs", None))


def test_imports_in_code_and_in_code_strings_are_found() -> None:
    code = (
        "import kernelexec, os.path\nfrom autogen_agentchat.agents import X\n"
        's.execute("import matplotlib.pyplot as plt\\nplt.show()")\n'
        'preload="import numpy, pandas"\nimportant = 1\n'
    )
    assert imported_modules(code) == {
        "kernelexec",
        "os",
        "autogen_agentchat",
        "matplotlib",
        "numpy",
        "pandas",
    }
    assert pip_installs(
        "python -m pip install -e '.[examples]' && x\n# pip install 'kernelexec[mcp]'"
    ) == [
        "kernelexec[examples]",
        "kernelexec[mcp]",
    ]


def _mkdocs_missing() -> str | None:
    try:
        import mkdocs  # noqa: F401
    except ModuleNotFoundError:
        return "mkdocs is not installed (python -m pip install -e '.[docs]')"
    return None


@pytest.mark.timeout(3600)
@pytest.mark.parametrize(
    "path", CODE_PAGES, ids=[p.relative_to(ROOT).as_posix() for p in CODE_PAGES]
)
def test_the_page_runs_as_written(path: Path, tmp_path: Path) -> None:
    blocks = [b for b in BLOCKS[path] if kind_of(b) in ("python", "shell")]
    # The HTTP examples' curl and jq: a session id is used further on, so without
    # them such a page cannot run as written (apt-get install curl jq; .ci/run does).
    lacking = [
        tool
        for tool in ("curl", "jq")
        if shutil.which(tool) is None
        and any(re.search(rf"\b{tool}\b", b.code) for b in blocks if b.language not in PYTHON)
    ]
    if lacking:
        unavailable(f"{path.name}'s HTTP examples need {' and '.join(lacking)}: install them")
    base_image, no_docker = docker_base_image()
    no_mkdocs = _mkdocs_missing()
    left_out: list[str] = []
    # A page's servers listen on their default ports: in a network namespace of its
    # own each page has them to itself; without one, one page runs at a time.
    alone = contextlib.nullcontext() if own_network() else file_lock("readme-run")
    # One Ray cluster at a time in the whole run (tests/test_ray.py's too): two
    # starting together on a small CI machine can leave a raylet unregistered past
    # the 30 s `ray start` waits for it, fixed in Ray.
    has_ray = any(needs_ray(b) for b in blocks)
    one_cluster = file_lock(RAY_CLUSTER_LOCK) if has_ray else contextlib.nullcontext()
    with alone, one_cluster:
        run = PageRun(tmp_path, base_image=base_image, ray=has_ray)
        try:
            for block in blocks:
                missing = (
                    (no_docker if needs_docker(block) else None)
                    or (no_mkdocs if needs_mkdocs(block) else None)
                    or (ray_missing() if needs_ray(block) else None)
                    or (e2b_missing() if needs_e2b(block) else None)
                )
                if missing:
                    left_out.append(f"{block.where} ({missing})")
                    continue
                started = time.monotonic()
                try:
                    output = run.run(block)
                except BlockFailed as exc:
                    failed = f"{exc}" + (ray_logs(run.home) if needs_ray(block) else "")
                else:
                    took = time.monotonic() - started
                    print(f"== {block.where}: {kind_of(block)}, ok in {took:.1f} s")
                    print(output)
                    continue
                pytest.fail(
                    f"{block.where}: this {block.language} block fails as written:\n"
                    f"{block.code}\n--- it said ---\n{failed}",
                    pytrace=False,
                )
        finally:
            problems = run.close()
    assert problems == []
    if left_out:
        unavailable(f"blocks not run: {', '.join(left_out)}")
