"""The HTTP API of ``kernelexec serve``, spoken to as a client would: a real process."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import nbformat
import pytest
from _serverproc import TOKEN, ServerProcess, raw_request


# Every test here holds for a server whose kernels are forked from a zygote
# and for one whose kernels are spawned.
@pytest.fixture(scope="module", params=["forked", "spawned"])
def server(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("server")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("KERNELEXEC_ZYGOTE", "1" if request.param == "forked" else "0")
        proc = ServerProcess(
            root / "work", "--max-sessions", "6", "--max-body-mb", "1", "--max-timeout", "120"
        )
    yield proc
    assert proc.stop() == 0


@pytest.fixture(scope="module")
def sid(server: ServerProcess) -> str:
    return server.create(timeout=60)


def test_health_needs_no_token(server: ServerProcess) -> None:
    response = httpx.get(f"{server.url}/health", trust_env=False)
    assert response.status_code == 200 and response.json()["status"] == "ok"


ROUTES = [
    ("GET", "/openapi.json"),
    ("GET", "/sessions"),
    ("POST", "/sessions"),
    ("GET", "/sessions/{id}"),
    ("DELETE", "/sessions/{id}"),
    ("POST", "/sessions/{id}/execute"),
    ("POST", "/sessions/{id}/execute/stream"),
    ("GET", "/sessions/{id}/executions"),
    ("POST", "/sessions/{id}/executions"),
    ("GET", "/sessions/{id}/executions/{execution_id}"),
    ("GET", "/sessions/{id}/executions/{execution_id}/events"),
    ("POST", "/sessions/{id}/executions/{execution_id}/cancel"),
    ("POST", "/sessions/{id}/interrupt"),
    ("POST", "/sessions/{id}/restart"),
    ("GET", "/sessions/{id}/variables"),
    ("GET", "/sessions/{id}/variables/{name}"),
    ("GET", "/sessions/{id}/files"),
    ("GET", "/sessions/{id}/files/{path}"),
    ("PUT", "/sessions/{id}/files/{path}"),
    ("GET", "/sessions/{id}/notebook"),
    ("POST", "/sessions/{id}/fork"),
    ("POST", "/sessions/{id}/checkpoint"),
    ("GET", "/checkpoints"),
    ("GET", "/checkpoints/{id}"),
    ("DELETE", "/checkpoints/{id}"),
    ("GET", "/api/kernelspecs"),
    ("GET", "/api/kernels"),
    ("POST", "/api/kernels"),
    ("GET", "/api/kernels/{id}"),
    ("DELETE", "/api/kernels/{id}"),
    ("POST", "/api/kernels/{id}/interrupt"),
    ("POST", "/api/kernels/{id}/restart"),
]


def test_routes_listed_here_are_the_schemas(server: ServerProcess) -> None:
    paths = server.http.get("/openapi.json").json()["paths"]
    in_schema = {
        (
            method.upper(),
            path.replace("{session_id}", "{id}")
            .replace("{kernel_id}", "{id}")
            .replace("{checkpoint_id}", "{id}"),
        )
        for path, item in paths.items()
        for method in item
        if method != "parameters"
    }
    assert in_schema == {*ROUTES, ("GET", "/health")}


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer wrong-token-0123456789"},
        {"Authorization": TOKEN},
        {"Authorization": f"Basic {TOKEN}"},
        {"Authorization": f"Bearer {TOKEN}x"},
        {"Authorization": f"Bearer {TOKEN[:-1]}"},
    ],
    ids=["none", "wrong", "no-scheme", "basic", "longer", "shorter"],
)
def test_every_route_but_health_needs_the_token(
    server: ServerProcess, sid: str, headers: dict[str, str]
) -> None:
    (server.work_root / sid / "keep.txt").write_text("kept")
    for method, path in ROUTES:
        url = server.url + path.format(id=sid, path="keep.txt", name="x", execution_id="0" * 32)
        response = httpx.request(method, url, headers=headers, json={"code": "1"}, trust_env=False)
        assert response.status_code == 401, (method, path, response.text)
        assert response.json()["error"] == "unauthorized"
        assert response.headers["www-authenticate"] == "Bearer"
    # Nothing happened: the session is there, its file untouched, no new session.
    assert [s["id"] for s in server.http.get("/sessions").json()["sessions"]].count(sid) == 1
    assert (server.work_root / sid / "keep.txt").read_text() == "kept"
    assert server.http.get(f"/sessions/{sid}").json()["state"] == "idle"


def test_lifecycle_state_and_a_plot_downloaded_byte_identical(server: ServerProcess) -> None:
    created = server.http.post("/sessions", json={"timeout": 30, "env": {"GREETING": "hi"}})
    assert created.status_code == 201
    info = created.json()
    assert info["state"] == "idle" and info["timeout"] == 30 and len(info["id"]) == 32
    sid = info["id"]
    assert sid in [s["id"] for s in server.http.get("/sessions").json()["sessions"]]

    assert server.execute(sid, "import os\nx = 41")["status"] == "ok"
    result = server.execute(sid, "print(x + 1, os.environ['GREETING'])")
    assert result["stdout"] == "42 hi\n" and result["execution_count"] == 2
    plot = server.execute(sid, "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2]); plt.show()")
    assert plot["status"] == "ok", plot["text"]
    [image] = [f for f in plot["files"] if f.endswith(".png")]
    listed = server.http.get(f"/sessions/{sid}/files").json()
    assert image in [f["path"] for f in listed["files"]] and not listed["truncated"]
    downloaded = server.http.get(f"/sessions/{sid}/files/{image}")
    assert downloaded.status_code == 200 and downloaded.headers["content-type"] == "image/png"
    assert downloaded.content == (server.work_root / sid / image).read_bytes()
    assert downloaded.content.startswith(b"\x89PNG")

    info = server.http.get(f"/sessions/{sid}").json()
    assert info["state"] == "idle" and info["executions"] == 3
    assert server.http.delete(f"/sessions/{sid}").json() == {"id": sid, "purged": False}
    assert server.http.get(f"/sessions/{sid}").status_code == 404
    assert (server.work_root / sid / image).exists()  # files kept unless purge

    purged = server.create()
    server.execute(purged, "open('x.txt', 'w').write('x')")
    assert server.http.delete(f"/sessions/{purged}", params={"purge": "true"}).json()["purged"]
    assert not (server.work_root / purged).exists()


def test_execute_reports_user_errors_as_results(server: ServerProcess, sid: str) -> None:
    result = server.execute(sid, "1/0")
    assert result["status"] == "error" and result["error"]["ename"] == "ZeroDivisionError"
    shell = server.execute(sid, "echo from-bash", language="bash")
    assert shell["stdout"] == "from-bash\n"
    asked = server.execute(sid, "print(input('name? '))", stdin=["ada"])
    assert "ada" in asked["stdout"]
    assert server.execute(sid, "x", language="cobol")["status"] == "error"


def sse_events(response: httpx.Response) -> Iterator[tuple[float, str, Any]]:
    """(arrival wall time, event, data) for each event as it is read."""
    event = None
    for line in response.iter_lines():
        if line.startswith("event: "):
            event = line[7:]
        elif line.startswith("data: "):
            yield time.time(), str(event), json.loads(line[6:])


def test_streaming_outputs_arrive_in_order_before_the_result(
    server: ServerProcess, sid: str
) -> None:
    # Each line carries the kernel's clock when printed; same machine, same clock.
    code = (
        "import time\nfor i in range(3):\n    print(i, time.time(), flush=True); time.sleep(0.3)\n"
    )
    with server.http.stream(
        "POST", f"/sessions/{sid}/execute/stream", json={"code": code}
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        events = list(sse_events(response))
    kinds = [kind for _, kind, _ in events]
    assert kinds[-1] == "result" and set(kinds[:-1]) == {"output"}
    outputs = [(t, data["text"]) for t, kind, data in events if kind == "output"]
    lines = "".join(text for _, text in outputs).splitlines()
    assert [line.split()[0] for line in lines] == ["0", "1", "2"]
    printed = {line.split()[0]: float(line.split()[1]) for line in lines}
    # "0" reached us in an event of its own before the kernel printed "2",
    # and every output came before the result.
    first_arrival, first_text = outputs[0]
    assert first_text.startswith("0 ") and "\n2 " not in first_text
    assert first_arrival < printed["2"]
    assert [t for t, _, _ in events] == sorted(t for t, _, _ in events)
    assert events[-1][2]["status"] == "ok" and events[-1][2]["stdout"].count("\n") == 3


async def test_interrupt_from_a_second_request(server: ServerProcess) -> None:
    sid = server.create(timeout=120)
    server.execute(sid, "kept = 'still here'")
    code = "import time\nprint('looping', flush=True)\nwhile True:\n    time.sleep(0.05)\n"
    async with httpx.AsyncClient(
        base_url=server.url,
        headers=server.auth,
        trust_env=False,
        timeout=httpx.Timeout(30, read=120),
    ) as http:
        async with http.stream(
            "POST", f"/sessions/{sid}/execute/stream", json={"code": code}
        ) as response:
            events = []
            async for line in response.aiter_lines():
                if line.startswith("data: "):
                    events.append(json.loads(line[6:]))
                    if events[-1].get("text") == "looping\n":
                        state = (await http.get(f"/sessions/{sid}")).json()["state"]
                        assert state == "busy"
                        interrupted = await http.post(f"/sessions/{sid}/interrupt")
                        assert interrupted.status_code == 200
    result = events[-1]
    assert result["status"] == "error" and result["error"]["ename"] == "KeyboardInterrupt"
    assert server.execute(sid, "print(kept)")["stdout"] == "still here\n"
    assert server.http.get(f"/sessions/{sid}").json()["state"] == "idle"
    server.http.delete(f"/sessions/{sid}")


def tree(root: Path, skip: Path) -> dict[str, bytes]:
    return {
        str(p): p.read_bytes()
        for p in root.rglob("*")
        if p.is_file() and not p.is_symlink() and skip not in p.parents and p.suffix != ".log"
    }


TRAVERSALS = [
    "../outside/secret.txt",
    "../../outside/secret.txt",
    "a/../../outside/secret.txt",
    "%2e%2e/outside/secret.txt",
    "%2E%2E/%2E%2E/outside/secret.txt",
    "..%2foutside%2fsecret.txt",
    "%252e%252e/outside/secret.txt",
    "%25252e%25252e/outside/secret.txt",
    "..%5coutside%5csecret.txt",
    "%2Fetc%2Fpasswd",
    "/etc/passwd",
    "//etc/passwd",
    "ok.txt%00.png",
    "C:%5cWindows",
    "escape/secret.txt",
    "escape_file",
    "..",
    "",
]


def test_traversal_is_refused_and_nothing_outside_is_touched(server: ServerProcess) -> None:
    sid = server.create()
    other = server.create()
    work = server.work_root / sid
    outside = server.work_root.parent / "outside"
    outside.mkdir(exist_ok=True)
    (outside / "secret.txt").write_text("TOP SECRET")
    (server.work_root / other / "theirs.txt").write_text("TOP SECRET")
    server.execute(
        sid,
        f"import os\nos.symlink({str(outside)!r}, 'escape')\n"
        f"os.symlink({str(outside / 'secret.txt')!r}, 'escape_file')",
    )
    before = tree(server.work_root.parent, work)

    refused = 0
    for path in [*TRAVERSALS, f"../{other}/theirs.txt"]:
        for method, body in (("GET", None), ("PUT", b"overwritten")):
            status, answer = raw_request(server, method, f"/sessions/{sid}/files/{path}", body)
            assert status in (400, 403), (method, path, status, answer)
            assert json.loads(answer)["error"] in ("invalid_path", "outside_work_dir")
            assert b"TOP SECRET" not in answer and b"root:" not in answer
            refused += 1
    assert refused >= 20
    assert tree(server.work_root.parent, work) == before
    assert (outside / "secret.txt").read_text() == "TOP SECRET"

    # Files inside, a name with a percent sign and dots included, still work.
    for name in ("inside.txt", "sub/dir/50%.csv", "a..b"):
        target = "/".join(
            httpx.URL(f"http://x/{part}").raw_path.decode()[1:] for part in name.split("/")
        )
        assert raw_request(server, "PUT", f"/sessions/{sid}/files/{target}", b"data")[0] == 201
        assert raw_request(server, "GET", f"/sessions/{sid}/files/{target}") == (200, b"data")
        assert (work / name).read_bytes() == b"data"


def test_notebook_download_validates(server: ServerProcess) -> None:
    sid = server.create()
    empty = server.http.get(f"/sessions/{sid}/notebook")
    assert empty.headers["content-type"] == "application/x-ipynb+json"
    nbformat.validate(nbformat.reads(empty.text, as_version=4))
    server.execute(sid, "print('first')")
    server.execute(sid, "1/0")
    server.execute(sid, "from IPython.display import HTML\nHTML('<b>x</b>')")
    notebook = nbformat.reads(server.http.get(f"/sessions/{sid}/notebook").text, as_version=4)
    nbformat.validate(notebook)
    sources = [c.source for c in notebook.cells if c.cell_type == "code"]
    assert sources == [
        "print('first')",
        "1/0",
        "from IPython.display import HTML\nHTML('<b>x</b>')",
    ]


BAD_BODIES: list[tuple[str, str, bytes | None, int, str]] = [
    ("POST", "/sessions", b"{bad", 400, "invalid_json"),
    ("POST", "/sessions", b"[1, 2]", 400, "invalid_json"),
    ("POST", "/sessions", b"\xff\xfe{}", 400, "invalid_json"),
    ("POST", "/sessions", b'{"timeout": NaN}', 400, "invalid_json"),
    ("POST", "/sessions", b"[" * 100_000, 400, "invalid_json"),
    ("POST", "/sessions", b'{"timeout": "60"}', 400, "invalid_request"),
    ("POST", "/sessions", b'{"timeout": -1}', 400, "invalid_request"),
    ("POST", "/sessions", b'{"timeout": 1e999}', 400, "invalid_request"),
    ("POST", "/sessions", b'{"timeout": 121}', 400, "invalid_request"),
    ("POST", "/sessions", b'{"timeout": true}', 400, "invalid_request"),
    ("POST", "/sessions", b'{"tiemout": 5}', 400, "invalid_request"),
    ("POST", "/sessions", b'{"env": {"A=B": "x"}}', 400, "invalid_request"),
    ("POST", "/sessions", b'{"env": {"A": "x\\u0000y"}}', 400, "invalid_request"),
    ("POST", "/sessions", b'{"env": {"A": "\\ud800"}}', 400, "invalid_request"),
    ("POST", "/sessions", b'{"env": {"A": 1}}', 400, "invalid_request"),
    ("POST", "/sessions", b'{"kernel_name": "../../bin/sh"}', 400, "unknown_kernel"),
    ("POST", "/sessions/{id}/execute", b"{}", 400, "invalid_request"),
    ("POST", "/sessions/{id}/execute", b'{"code": 1}', 400, "invalid_request"),
    ("POST", "/sessions/{id}/execute", b'{"code": "1", "stdin": "x"}', 400, "invalid_request"),
    (
        "POST",
        "/sessions/{id}/execute",
        b'{"code": "1", "stdin": ["\\udc80"]}',
        400,
        "invalid_request",
    ),
    ("POST", "/sessions/{id}/execute", b'{"code": "1", "language": 3}', 400, "invalid_request"),
    ("POST", "/sessions/{id}/execute/stream", b'{"code": null}', 400, "invalid_request"),
    (
        "POST",
        "/sessions/{id}/execute",
        b'{"code": "' + b"x" * 2_000_000 + b'"}',
        413,
        "body_too_large",
    ),
    ("PUT", "/sessions/{id}/files/big.bin", b"x" * 2_000_000, 413, "body_too_large"),
    ("PUT", "/sessions/{id}/files/sub", b"x", 409, "not_a_file"),
    ("PUT", "/sessions/{id}/files/no-body", None, 400, "missing_body"),
    ("PUT", "/sessions/{id}/files/a%5Cb", b"x", 400, "invalid_path"),
    ("GET", "/sessions/{id}/files/nope.txt", b"", 404, "file_not_found"),
    ("GET", "/sessions/{id}/files/sub", b"", 404, "not_a_file"),
    ("DELETE", "/sessions/{id}?purge=maybe", b"", 400, "invalid_request"),
    ("GET", "/sessions/0123456789abcdef0123456789abcdef", b"", 404, "session_not_found"),
    ("GET", "/sessions/..%2f..%2fetc", b"", 404, "not_found"),
    ("POST", "/sessions/%2e%2e/execute", b'{"code": "1"}', 404, "session_not_found"),
    ("GET", "/nowhere", b"", 404, "not_found"),
    ("PATCH", "/sessions", b"", 405, "method_not_allowed"),
]


def test_bad_input_is_a_4xx_never_a_500(server: ServerProcess, sid: str) -> None:
    (server.work_root / sid / "sub").mkdir(exist_ok=True)
    for method, path, body, status, code in BAD_BODIES:
        got, answer = raw_request(server, method, path.format(id=sid), body)
        assert (got, json.loads(answer)["error"]) == (status, code), (method, path, body)
    # A lone surrogate in code is the session's refusal: a result, not an HTTP error.
    status, answer = raw_request(server, "POST", f"/sessions/{sid}/execute", b'{"code": "\\ud800"}')
    refused = json.loads(answer)
    assert status == 200 and refused["status"] == "error"
    assert refused["error"]["ename"] == "InvalidInput"
    assert server.execute(sid, "print('still fine')")["stdout"] == "still fine\n"


def test_session_ids_are_random_and_work_dirs_separate(server: ServerProcess) -> None:
    a, b = server.create(), server.create()
    assert a != b and all(c in "0123456789abcdef" for c in a + b)
    server.execute(a, "open('mine.txt', 'w').write('a')")
    assert (server.work_root / a / "mine.txt").exists()
    assert "mine.txt" not in [
        f["path"] for f in server.http.get(f"/sessions/{b}/files").json()["files"]
    ]
    for sid in (a, b):
        server.http.delete(f"/sessions/{sid}")


def test_concurrent_sessions_run_in_parallel(server: ServerProcess) -> None:
    a, b = server.create(), server.create()

    async def both() -> list[httpx.Response]:
        async with httpx.AsyncClient(
            base_url=server.url, headers=server.auth, trust_env=False, timeout=120
        ) as http:
            code = {"code": "import time; time.sleep(1.5); print('done')"}
            return await asyncio.gather(
                *(http.post(f"/sessions/{s}/execute", json=code) for s in (a, b))
            )

    started = time.monotonic()
    answers = asyncio.run(both())
    assert [r.json()["stdout"] for r in answers] == ["done\n", "done\n"]
    assert time.monotonic() - started < 2 * 1.5 + 60  # sanity only; no timing claim
    for sid in (a, b):
        server.http.delete(f"/sessions/{sid}")
