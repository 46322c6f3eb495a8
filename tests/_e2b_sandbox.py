"""The script test_e2b.py runs in a loopback-only network namespace (``_netns``).

It starts ``kernelexec serve --e2b`` with two tenants, then runs E2B's own SDK
against it, as a user of E2B would write it, changing only the SDK's settings
(``E2B_API_KEY``, ``E2B_API_URL``, ``E2B_SANDBOX_URL``), and writes what each
scenario saw as JSON. Nothing here mocks the SDK: every call goes over HTTP to
the server, and in this namespace nothing else can be reached.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _netns import enter
from _tenants import write_tenants

URL = "http://127.0.0.1:8765"


def _error(exc: BaseException) -> dict[str, str]:
    return {"type": type(exc).__name__, "message": str(exc)}


def acceptance() -> dict[str, Any]:
    """Issue #31's script: a user's E2B code, unchanged."""
    from e2b_code_interpreter import Sandbox

    seen: dict[str, Any] = {"stdout": [], "results": []}
    sbx = Sandbox.create()
    sbx.run_code("import math\nx = 20")
    sbx.run_code("x = x * 2 + 2")
    third = sbx.run_code(
        "print('x is', x)\nimport sys; print('warn', file=sys.stderr)\nx",
        on_stdout=lambda m: seen["stdout"].append(m.line),
        on_result=lambda r: seen["results"].append(r.text),
    )
    chart = sbx.run_code(
        "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [4, 1, 9])\nplt.show()"
    )
    html = sbx.run_code("import pandas as pd\npd.DataFrame({'a': [1, 2]})")
    written = sbx.files.write("/home/user/data/notes.txt", "kernelexec")
    read_back = sbx.files.read("/home/user/data/notes.txt")
    kernel_reads = sbx.run_code("open('data/notes.txt').read()").text
    listed = sorted(e.name for e in sbx.files.list("/home/user/data"))
    bad = sbx.run_code("raise ValueError('no such thing')")
    context = sbx.create_code_context(cwd="/home/user/data", language="python")
    in_context = sbx.run_code(
        "import os\nx = 'other'\nos.path.exists('notes.txt')", context=context
    )
    contexts = [c.id for c in sbx.list_code_contexts()]
    after = sbx.run_code("x").text  # the sandbox's own x, untouched by the context's
    exists = [sbx.files.exists("data/notes.txt"), sbx.files.exists("nothing.txt")]
    sbx.files.remove("data/notes.txt")
    removed = sbx.files.exists("data/notes.txt")
    command = sbx.commands.run("echo from bash; echo oops >&2")
    placed = sbx.commands.run("echo $GREETING; pwd", envs={"GREETING": "hi"}, cwd="/home/user/data")
    try:
        sbx.commands.run("echo partial; exit 3")
        exit_error = None
    except Exception as exc:
        exit_error = [
            type(exc).__name__,
            getattr(exc, "exit_code", None),
            getattr(exc, "stdout", None),
        ]
    running = sbx.is_running()
    sbx.set_timeout(600)
    same = Sandbox.connect(sbx.sandbox_id)
    via_connect = same.run_code("x").text
    killed = sbx.kill()
    return {
        "third": {
            "stdout": third.logs.stdout,
            "stderr": third.logs.stderr,
            "text": third.text,
            "count": third.execution_count,
        },
        "callbacks": seen,
        "chart": {
            "formats": [list(r.formats()) for r in chart.results],
            "png_head": (chart.results[0].png or "")[:12] if chart.results else "",
        },
        "html": [bool(r.html) for r in html.results],
        "written": [written.name, written.path],
        "read_back": read_back,
        "kernel_reads": kernel_reads,
        "listed": listed,
        "error": [bad.error.name, bad.error.value, "ValueError" in bad.error.traceback]
        if bad.error
        else None,
        "context": {
            "cwd": context.cwd,
            "text": in_context.text,
            "listed": context.id in contexts,
        },
        "after": after,
        "exists": exists,
        "removed": removed,
        "command": [command.exit_code, command.stdout, command.stderr],
        "placed": placed.stdout,
        "exit_error": exit_error,
        "running": running,
        "via_connect": via_connect,
        "killed": killed,
        "running_after_kill": sbx.is_running(),
    }


def refusals(other_key: str) -> dict[str, Any]:
    """A wrong key, calls not served, and the hostile ones at the new door."""
    from e2b import ConnectionConfig
    from e2b_code_interpreter import Sandbox

    found: dict[str, Any] = {}
    try:
        Sandbox.create(api_key="kx_" + "0" * 43)
    except Exception as exc:
        found["wrong_key"] = _error(exc)
    key = os.environ.pop("E2B_API_KEY")
    try:
        Sandbox.create()  # no key at all: the SDK's own check, before any request
    except Exception as exc:
        found["no_key"] = _error(exc)
    finally:
        os.environ["E2B_API_KEY"] = key
    # The same without the SDK: the server's 401, with the "code" E2B's client reads.
    try:
        urllib.request.urlopen(urllib.request.Request(f"{URL}/e2b/v2/sandboxes", b"{}"))
    except urllib.error.HTTPError as exc:
        found["no_key_raw"] = [exc.code, json.loads(exc.read()).get("code")]
    sbx = Sandbox.create()
    try:
        sbx.pause()
    except Exception as exc:
        found["pause"] = _error(exc)
    try:
        sbx.run_code("console.log(1)", language="javascript")
    except Exception as exc:
        found["javascript"] = _error(exc)
    try:
        sbx.files.watch_dir("/home/user")
    except Exception as exc:
        found["watch_dir"] = _error(exc)
    for name, path in {
        "etc_passwd": "/etc/passwd",
        "climbing": "/home/user/../../etc/passwd",
        "relative_climb": "../../../etc/passwd",
    }.items():
        try:
            found[name] = {"read": sbx.files.read(path)[:40]}
        except Exception as exc:
            found[name] = _error(exc)
    # A link the sandbox's own code planted, to a file outside: never followed.
    sbx.run_code("import os\nos.symlink('/etc/passwd', 'planted')")
    try:
        found["planted"] = {"read": sbx.files.read("planted")[:40]}
    except Exception as exc:
        found["planted"] = _error(exc)
    try:
        sbx.files.write("/tmp/escape.txt", "x")
    except Exception as exc:
        found["write_outside"] = _error(exc)
    # Another tenant with the first one's sandbox id.
    theirs: dict[str, Any] = {}
    for call, attempt in {
        "connect": lambda: Sandbox.connect(sbx.sandbox_id, api_key=other_key),
        "get_info": lambda: Sandbox.get_info(sbx.sandbox_id, api_key=other_key),
        "kill": lambda: Sandbox.kill(sbx.sandbox_id, api_key=other_key),
    }.items():
        try:
            theirs[call] = {"answer": repr(attempt())}
        except Exception as exc:
            theirs[call] = _error(exc)
    # A sandbox object of theirs pointed at the first tenant's id: its requests carry their key.
    mine = Sandbox.create(api_key=other_key)
    headers = {"X-Access-Token": other_key, "E2b-Sandbox-Id": sbx.sandbox_id}
    forged = Sandbox(
        sandbox_id=sbx.sandbox_id,
        sandbox_domain=None,
        envd_version=mine._envd_version,
        envd_access_token=other_key,
        traffic_access_token=other_key,
        connection_config=ConnectionConfig(api_key=other_key, extra_sandbox_headers=headers),
    )
    for call, attempt in {
        "run_code": lambda: forged.run_code("1 + 1"),
        "files_read": lambda: forged.files.read("planted"),
    }.items():
        try:
            theirs[call] = {"answer": repr(attempt())}
        except Exception as exc:
            theirs[call] = _error(exc)
    theirs["listed"] = [s.sandbox_id for s in Sandbox.list(api_key=other_key).next_items()]
    found["other_tenant"] = theirs
    found["still_running"] = sbx.is_running()
    found["timeout"] = _timeout(sbx)
    mine.kill()
    sbx.kill()
    return found


def _timeout(sbx: Any) -> dict[str, Any]:
    """run_code's timeout: the SDK gives up, the execution here is interrupted, state kept."""
    sbx.run_code("kept = 7")
    started = time.monotonic()
    try:
        sbx.run_code("import time\ntime.sleep(60)", timeout=2)
        raised = None
    except Exception as exc:
        raised = _error(exc)
    after = sbx.run_code("kept")
    return {
        "raised": raised,
        "seconds": time.monotonic() - started,
        "kept": after.text,
        "error": after.error.name if after.error else None,
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--answer", required=True)
    args = parser.parse_args()
    answer: dict[str, Any] = {"error": None}
    server = None
    try:
        enter()
        work = Path(tempfile.mkdtemp(prefix="kxe2b-"))
        keys = write_tenants(work / "tenants.toml", {"alice": {}, "bob": {}})
        command = ["serve", "--e2b", "--work-root", str(work / "root")]
        server = subprocess.Popen(
            [sys.executable, "-m", "kernelexec", *command, "--tenants", str(work / "tenants.toml")],
            stdin=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(f"{URL}/health", timeout=2).read()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("kernelexec serve --e2b did not start") from None
                time.sleep(0.2)
        # The SDK's own settings, and nothing else: the code below is E2B's as written.
        os.environ.update(
            E2B_API_KEY=keys["alice"],
            E2B_API_URL=f"{URL}/e2b",
            E2B_SANDBOX_URL=f"{URL}/e2b/sandbox",
        )
        answer["acceptance"] = acceptance()
        answer["refusals"] = refusals(keys["bob"])
    except BaseException:
        answer["error"] = traceback.format_exc()
    finally:
        if server is not None:
            server.terminate()
            try:
                server.wait(timeout=60)
            except subprocess.TimeoutExpired:
                server.kill()
    Path(args.answer).write_text(json.dumps(answer))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
