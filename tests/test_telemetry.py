"""OpenTelemetry spans (kernelexec/_telemetry.py), read with the SDK's in-memory exporter.

The library's spans come from real sessions on real kernels; the server's from
the real app, in this process (a ``kernelexec serve`` process could not share
the exporter), spoken to over HTTP by Starlette's TestClient.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _serverproc import ServerProcess
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from starlette.testclient import TestClient

from kernelexec import AsyncSession, KernelPool, Session
from kernelexec._server import ServerConfig
from kernelexec._server._app import create_app

_EXPORTER = InMemorySpanExporter()


def _install() -> None:
    # The global provider can be set once per process; pytest-xdist may run
    # this module in a worker that ran others first, so reuse one already set.
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))


_install()


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    monkeypatch.delenv("KERNELEXEC_OTEL_CAPTURE_CONTENT", raising=False)
    _EXPORTER.clear()
    yield _EXPORTER
    _EXPORTER.clear()


def of_session(exporter: InMemorySpanExporter, session_id: str) -> list[ReadableSpan]:
    """The spans that name this session, and those nested under them."""
    finished = list(exporter.get_finished_spans())
    ids = {
        s.context.span_id
        for s in finished
        if (s.attributes or {}).get("kernelexec.session.id") == session_id
    }
    grew = True
    while grew:
        more = {s.context.span_id for s in finished if s.parent and s.parent.span_id in ids}
        grew = not more <= ids
        ids |= more
    return [s for s in finished if s.context.span_id in ids]


def named(found: list[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [s for s in found if s.name == name]


def attributes_of(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def everything_said(found: list[ReadableSpan]) -> str:
    """Every string a span carries: name, attributes, status, events, links, resource."""
    said: list[str] = []
    for s in found:
        said.append(s.name)
        said.append(str(s.status.description))
        said.extend(f"{k}={v!s}" for k, v in (s.attributes or {}).items())
        for event in s.events:
            said.append(event.name)
            said.extend(f"{k}={v!s}" for k, v in (event.attributes or {}).items())
    return "\n".join(said)


USAGE = [
    "kernelexec.usage.wall_seconds",
    "kernelexec.usage.user_seconds",
    "kernelexec.usage.system_seconds",
    "kernelexec.usage.children_user_seconds",
    "kernelexec.usage.children_system_seconds",
    "kernelexec.usage.children_max_rss_bytes",
]


async def test_a_session_traces_create_start_execute_write_and_close(
    spans: InMemorySpanExporter, tmp_path: Path, kernel_start: str
) -> None:
    session = AsyncSession(tmp_path / "work", timeout=60)
    ok = await session.execute("print('hello' * 10)")
    failed = await session.execute("1 / 0")
    await session.close()
    assert ok.status == "ok" and failed.status == "error"
    found = of_session(spans, "work")

    (create,) = named(found, "kernelexec.session.create")
    assert create.attributes is not None
    assert create.attributes["kernelexec.kernel.backend"] == "local"
    assert create.attributes["kernelexec.session.pool"] is False
    assert len(named(found, "kernelexec.session.close")) == 1

    first, second = sorted(named(found, "kernelexec.execute"), key=lambda s: s.start_time or 0)
    # The kernel starts for the first execution, inside its span.
    (start,) = named(found, "kernelexec.kernel.start")
    assert start.parent is not None and start.parent.span_id == first.context.span_id
    assert start.attributes is not None
    assert start.attributes["kernelexec.kernel.start_method"] == (
        "zygote" if kernel_start == "forked" else "cold"
    )
    assert start.attributes["kernelexec.kernel.forked"] is (kernel_start == "forked")

    a = attributes_of(first)
    assert a["kernelexec.execution.status"] == "ok"
    assert a["kernelexec.execution.language"] == "python"
    assert a["kernelexec.execution.execution_count"] == 1
    assert a["kernelexec.execution.duration_s"] == ok.duration > 0
    assert a["kernelexec.execution.output_bytes"] > len("hello" * 10)
    assert a["kernelexec.execution.code_bytes"] == len("print('hello' * 10)")
    assert ok.usage is not None and all(name in a for name in USAGE)
    assert a["kernelexec.usage.user_seconds"] == ok.usage.user_seconds
    assert first.status.status_code is StatusCode.UNSET

    b = attributes_of(second)
    assert b["kernelexec.execution.status"] == "error"
    assert b["kernelexec.execution.execution_count"] == 2
    assert b["error.type"] == "ZeroDivisionError"
    assert second.status.status_code is StatusCode.ERROR

    # Each result's transcript write, started while its execution ran, nests under it.
    writes = named(found, "kernelexec.transcript.write")
    parents = {w.parent.span_id for w in writes if w.parent is not None}
    assert {first.context.span_id, second.context.span_id} <= parents
    assert all(attributes_of(w)["kernelexec.transcript.cells"] >= 1 for w in writes)


async def test_a_kernel_from_a_pool_is_traced_as_pool_and_a_restart_as_one(
    spans: InMemorySpanExporter, tmp_path: Path
) -> None:
    async with KernelPool(1, work_root=tmp_path) as pool:
        await pool.wait_ready(120)
        async with AsyncSession(tmp_path / "pooled", pool=pool) as session:
            await session.execute("1")
            await session.restart()
    found = of_session(spans, "pooled")
    (create,) = named(found, "kernelexec.session.create")
    assert attributes_of(create)["kernelexec.session.pool"] is True
    taken, restarted = (
        attributes_of(s)
        for s in sorted(named(found, "kernelexec.kernel.start"), key=lambda s: s.start_time or 0)
    )
    assert (
        taken["kernelexec.kernel.start_method"] == "pool"
        and "kernelexec.kernel.restart" not in taken
    )
    # A restart starts the session's own kernel.
    assert restarted["kernelexec.kernel.restart"] is True
    assert restarted["kernelexec.kernel.start_method"] in ("zygote", "cold")


async def test_code_outputs_and_error_values_stay_out_of_spans_by_default(
    spans: InMemorySpanExporter, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = f"kx{uuid.uuid4().hex}"
    cells = [
        f"secret = '{marker}'\nprint(secret)",
        f"raise ValueError('{marker}')",
        f"echo {marker}",
    ]
    async with AsyncSession(tmp_path / "quiet", timeout=60) as session:
        for code in cells:
            language = "bash" if code.startswith("echo") else "python"
            result = await session.execute(code, language=language)
            assert marker in result.text  # it was there to leak
    found = of_session(spans, "quiet")
    assert len(named(found, "kernelexec.execute")) == 3
    assert marker not in everything_said(found)

    # Turned on by the operator, the code and its text are in the execute spans.
    monkeypatch.setenv("KERNELEXEC_OTEL_CAPTURE_CONTENT", "1")
    spans.clear()
    async with AsyncSession(tmp_path / "told", timeout=60) as session:
        await session.execute(cells[0])
    (execute,) = named(of_session(spans, "told"), "kernelexec.execute")
    assert execute.attributes is not None
    assert execute.attributes["kernelexec.execution.code"] == cells[0]
    assert marker in str(execute.attributes["kernelexec.execution.text"])


async def test_error_type_is_a_builtin_name_or_other_unless_content_is_captured(
    spans: InMemorySpanExporter, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A class the code defines reaches the kernel's error message by name only.
    leak = "class Leak_SECRETVALUE9(Exception):\n    pass\n\nraise Leak_SECRETVALUE9()"

    async def error_types(name: str) -> list[object]:
        async with AsyncSession(tmp_path / name, timeout=60) as session:
            for code in (leak, "1 / 0"):
                assert (await session.execute(code)).status == "error"
        executions = named(of_session(spans, name), "kernelexec.execute")
        ordered = sorted(executions, key=lambda s: s.start_time or 0)
        assert all(s.status.status_code is StatusCode.ERROR for s in ordered)
        return [attributes_of(s)["error.type"] for s in ordered]

    assert await error_types("quiet") == ["_OTHER", "ZeroDivisionError"]
    assert "SECRETVALUE9" not in everything_said(of_session(spans, "quiet"))

    monkeypatch.setenv("KERNELEXEC_OTEL_CAPTURE_CONTENT", "1")  # the operator asks for content
    assert await error_types("told") == ["Leak_SECRETVALUE9", "ZeroDivisionError"]


def test_the_sync_session_traces_in_the_callers_span(
    spans: InMemorySpanExporter, tmp_path: Path
) -> None:
    # Session runs its coroutines on a loop in another thread (asyncio hands them
    # the caller's context); they stay in the caller's trace.
    with trace.get_tracer("agent").start_as_current_span("agent step") as step:
        with Session(tmp_path / "sync", timeout=60) as session:
            assert session.execute("1 + 1").text == "2\n"
    found = of_session(spans, "sync")
    assert {"kernelexec.session.create", "kernelexec.execute", "kernelexec.session.close"} <= {
        s.name for s in found
    }
    for s in found:
        assert s.context.trace_id == step.get_span_context().trace_id, s.name
    (execute,) = named(found, "kernelexec.execute")
    assert execute.parent is not None
    assert execute.parent.span_id == step.get_span_context().span_id


TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"


def test_the_server_continues_the_callers_traceparent_and_leaks_no_token(
    spans: InMemorySpanExporter, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = f"tok{uuid.uuid4().hex}"
    secret = f"env{uuid.uuid4().hex}"
    monkeypatch.setenv("KX_TELEMETRY_TEST_API_KEY", secret)
    app = create_app(ServerConfig(token=token, work_root=tmp_path / "root", idle_timeout=None))
    bearer = {"Authorization": f"Bearer {token}"}
    traced = {**bearer, "traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01"}
    with TestClient(app) as client:
        created = client.post("/sessions", json={}, headers=traced)
        assert created.status_code == 201, created.text
        sid = created.json()["id"]
        ran = client.post(f"/sessions/{sid}/execute", json={"code": "x = 6 * 7"}, headers=traced)
        assert ran.status_code == 200 and ran.json()["status"] == "ok", ran.text
        again = client.post(f"/sessions/{sid}/execute", json={"code": "x"}, headers=bearer)
        assert again.status_code == 200, again.text
        assert client.delete(f"/sessions/{sid}", headers=bearer).status_code == 200
    finished = list(spans.get_finished_spans())
    requests = [s for s in finished if s.kind is SpanKind.SERVER]
    caller = int(TRACE_ID, 16)

    route = "POST /sessions/{session_id}/execute"
    continued, fresh = (
        [s for s in requests if s.name == route and (s.context.trace_id == caller) is want]
        for want in (True, False)
    )
    assert len(continued) == 1 and len(fresh) == 1
    (request,) = continued
    assert request.parent is not None and request.parent.span_id == int(PARENT_ID, 16)
    assert request.parent.is_remote
    attributes = dict(request.attributes or {})
    assert attributes["http.route"] == "/sessions/{session_id}/execute"
    assert attributes["http.request.method"] == "POST"
    assert attributes["http.response.status_code"] == 200
    # Without a traceparent, a new trace with no parent.
    assert fresh[0].parent is None

    # The library's spans nest under the request that caused them.
    def under(span: ReadableSpan) -> Any:
        return span.parent.span_id if span.parent is not None else None

    (execute,) = [
        s for s in finished if s.name == "kernelexec.execute" and s.context.trace_id == caller
    ]
    assert under(execute) == request.context.span_id
    assert (execute.attributes or {})["kernelexec.session.id"] == sid
    (create_request,) = [s for s in requests if s.name == "POST /sessions"]
    assert create_request.context.trace_id == caller
    (create,) = [s for s in finished if s.name == "kernelexec.session.create"]
    assert under(create) == create_request.context.span_id

    said = everything_said(finished)
    assert token not in said and secret not in said
    assert "Bearer" not in said and "authorization" not in said.lower()


def test_kernelexec_works_without_opentelemetry(tmp_path: Path) -> None:
    # opentelemetry-api comes with the test extras (mcp needs it), so its
    # absence is made in a child process: a finder that refuses it, which is
    # what Python's import system does when a package is not installed.
    script = textwrap.dedent(
        """
        import sys

        class NoOtel:
            def find_spec(self, name, path=None, target=None):
                if name == "opentelemetry" or name.startswith("opentelemetry."):
                    raise ModuleNotFoundError(f"No module named {name!r}", name=name)
                return None

        sys.meta_path.insert(0, NoOtel())
        from pathlib import Path

        from kernelexec import Session
        from kernelexec._server import ServerConfig
        from kernelexec._server._app import create_app
        from starlette.testclient import TestClient

        with Session(sys.argv[1] + "/lib") as session:
            print(session.execute("print(6 * 7)").stdout, end="")
        app = create_app(ServerConfig(token="t" * 32, work_root=Path(sys.argv[1], "root")))
        with TestClient(app) as client:
            print(client.get("/health").status_code)
        assert not any(m.startswith("opentelemetry") for m in sys.modules), "imported"
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["42", "200"]


def _console_spans(log: str) -> list[dict[str, Any]]:
    """The spans the SDK's console exporter printed (indented JSON objects), in order."""
    decoder, found, at = json.JSONDecoder(), [], 0
    while (at := log.find("{\n", at)) != -1:
        try:
            value, end = decoder.raw_decode(log, at)
        except json.JSONDecodeError:
            at += 1
            continue
        if isinstance(value, dict) and "context" in value and "name" in value:
            found.append(value)
        at = end
    return found


@pytest.mark.parametrize("content", [False, True])
def test_serve_under_opentelemetry_instrument(tmp_path: Path, content: bool) -> None:
    """As an operator runs it: the SDK set up from OTEL_* variables, a real server, a real trace."""
    instrument = shutil.which("opentelemetry-instrument")
    assert instrument is not None, "opentelemetry-distro is missing: pip install -e '.[test]'"
    env = {
        **os.environ,
        "OTEL_TRACES_EXPORTER": "console",
        "OTEL_METRICS_EXPORTER": "none",
        "OTEL_LOGS_EXPORTER": "none",
        "KERNELEXEC_SECRET_FOR_TEST": "s3cret-value-9",
    }
    env.pop("KERNELEXEC_OTEL_CAPTURE_CONTENT", None)
    marker = f"MARKER-{uuid.uuid4().hex}"
    options = ("--trace-content",) if content else ()
    server = ServerProcess(tmp_path / "work", *options, prefix=[instrument], env=env)
    try:
        session_id = server.create()
        answer = server.http.post(
            f"/sessions/{session_id}/execute",
            json={"code": f"print({marker!r})"},
            headers={"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01"},
        )
        assert answer.status_code == 200 and answer.json()["stdout"] == f"{marker}\n"
    finally:
        assert server.stop() == 0
    log = server.log.read_text()
    spans = _console_spans(log)
    names = {span["name"] for span in spans}
    assert {"POST /sessions/{session_id}/execute", "kernelexec.execute"} <= names, names
    assert {"kernelexec.session.create", "kernelexec.kernel.start"} <= names, names
    request = next(s for s in spans if s["name"] == "POST /sessions/{session_id}/execute")
    execute = next(s for s in spans if s["name"] == "kernelexec.execute")
    assert request["context"]["trace_id"] == execute["context"]["trace_id"] == f"0x{TRACE_ID}"
    assert request["parent_id"] == f"0x{PARENT_ID}"
    assert execute["attributes"]["kernelexec.execution.status"] == "ok"
    assert execute["attributes"]["kernelexec.session.id"] == session_id
    said = json.dumps(spans)
    assert server.token not in said and "s3cret-value-9" not in said
    assert (marker in said) is content
    if content:
        assert marker in execute["attributes"]["kernelexec.execution.code"]
