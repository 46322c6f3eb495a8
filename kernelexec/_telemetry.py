"""OpenTelemetry spans: what kernelexec traces, under which names, with which attributes.

With ``opentelemetry-api`` installed (``pip install 'kernelexec[otel]'``) and a
tracer provider set by the application (the SDK's, with an exporter), kernelexec
emits the spans below under the instrumentation scope "kernelexec". Without the
package, or without a provider, every hook does nothing and costs next to nothing.

Spans and their attributes:

``kernelexec.session.create``, ``kernelexec.session.close``
    ``kernelexec.session.id`` (the work dir's name: a server's session id),
    ``kernelexec.kernel.backend`` ("local", "docker", "gateway"),
    ``kernelexec.session.pool`` (a pool was given).
``kernelexec.kernel.start`` (a session's kernel starting or restarting)
    ``kernelexec.session.id``, ``kernelexec.kernel.backend``,
    ``kernelexec.kernel.start_method``: "pool" (a ready kernel from a ``KernelPool``),
    "zygote" (forked from a zygote), "cold" (spawned), "docker" or "gateway";
    ``kernelexec.kernel.forked`` (a local kernel came from a zygote, also for "pool");
    ``kernelexec.kernel.restart`` (true: a restart, on request or after a death or
    a timeout the kernel did not survive).
``kernelexec.execute`` (one execution on a kernel; the kernel's start nests under it)
    ``kernelexec.session.id``, ``kernelexec.execution.language``,
    ``kernelexec.execution.code_bytes``, ``kernelexec.execution.status``
    ("ok", "error", "timeout", "cancelled", "kernel_died"),
    ``kernelexec.execution.execution_count``, ``kernelexec.execution.duration_s``,
    ``kernelexec.execution.output_bytes`` (the result's nbformat outputs as UTF-8
    JSON, after kernelexec's caps: what the transcript stores),
    ``kernelexec.execution.file_count``, ``kernelexec.execution.restarted``, and
    the result's usage: ``kernelexec.usage.wall_seconds``, ``.user_seconds``,
    ``.system_seconds``, ``.peak_rss_bytes`` (when known), ``.children_user_seconds``,
    ``.children_system_seconds``, ``.children_max_rss_bytes``. Status ERROR for
    "error", "timeout" and "kernel_died", with ``error.type`` the status, or for
    "error" the exception's name when it is one of Python's built-in exceptions
    (``ZeroDivisionError``) or one kernelexec itself reports (``BashError``,
    ``InvalidInput``, ``UnsupportedLanguage``, ``Aborted``), and otherwise
    ``_OTHER`` (the OpenTelemetry conventions' value for an error type left
    unnamed): a class the code defined (``class Leak_SECRETVALUE9(Exception)``),
    or a library's, has a name the code chose. The kernel reports only a name,
    so it is checked against the built-in names here, not in the kernel.
``kernelexec.transcript.write`` (one batch of cells written to the transcript)
    ``kernelexec.transcript.cells``.
``{METHOD} {route}`` (``kernelexec serve``: one HTTP request, kind SERVER)
    ``http.request.method``, ``http.route`` (``/sessions/{session_id}/execute``),
    ``url.path``, ``http.response.status_code``. A request's W3C ``traceparent``
    (and ``tracestate``) header is continued: its spans join the caller's trace;
    without one the request starts a trace. Status ERROR for a 5xx answer.

A span that ends by an exception of kernelexec's gets status ERROR and
``error.type`` (the exception's class name), never its message.

What code or its outputs could have written never goes into a span unless the
operator turns it on with ``KERNELEXEC_OTEL_CAPTURE_CONTENT=1`` (or
``kernelexec serve --trace-content``): then ``kernelexec.execution.code`` and
``kernelexec.execution.text`` (each cut to 16,000 characters) are added to
``kernelexec.execute``, every exception's name is its ``error.type``, and exceptions'
messages become span status descriptions. Tokens, headers (but the trace context) and
environment variables never do. Numbers (counts, sizes, seconds) are what the
kernel reported, checked to be numbers in range.
"""

from __future__ import annotations

import builtins
import contextlib
import functools
import inspect
import json
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeVar, cast

from ._environment import trace_content
from ._version import __version__

try:
    from opentelemetry import propagate, trace
except ImportError:  # the otel extra is not installed: every hook below does nothing
    propagate = trace = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

    from ._execution._models import ExecutionResult
    from ._session._async import AsyncSession

__all__ = [
    "OTHER_ERROR",
    "TraceRequests",
    "Traced",
    "execution",
    "kernel_restart",
    "kernel_start",
    "note_kernel",
    "session_span",
    "set_trace_content",
    "span",
    "transcript_write",
]

F = TypeVar("F", bound=Callable[..., Any])
AttributeValue = str | bool | int | float
# Exporters keep whole attributes; a cell's code or text can be megabytes.
CONTENT_CHARS = 16_000
# Endings that are no failure of the code nor of kernelexec.
_NOT_FAILED = ("ok", "cancelled")
# Exception names the code did not choose: Python's built-in ones (with those of
# Pythons newer than this one, for a kernel on another interpreter), and the
# ones kernelexec writes into results itself.
_NAMED_ERRORS = frozenset(
    {
        name
        for name, value in vars(builtins).items()
        if isinstance(value, type) and issubclass(value, BaseException)
    }
    | {"BaseExceptionGroup", "ExceptionGroup", "EncodingWarning", "PythonFinalizationError"}
    | {"Aborted", "BashError", "InvalidInput", "UnsupportedLanguage"}
)
OTHER_ERROR = "_OTHER"  # error.type of any other exception (OpenTelemetry's fallback value)

_content: bool | None = None  # set by ``serve --trace-content``; None: the environment says


def set_trace_content(on: bool | None) -> None:
    """Puts code and output text into spans (True), or not (False); None: as the env says."""
    global _content
    _content = on


def _capturing() -> bool:
    return trace_content() if _content is None else _content


class Traced:
    """One span, or nothing when tracing is off: what kernelexec's hooks write to."""

    __slots__ = ("_span",)

    def __init__(self, span: Any = None) -> None:
        self._span = span

    @property
    def recording(self) -> bool:
        """Whether anything set here goes anywhere (work for attributes can be skipped if not)."""
        return self._span is not None and bool(self._span.is_recording())

    def set(self, attributes: Mapping[str, AttributeValue | None]) -> None:
        """Sets these attributes; a None value is left out."""
        if self.recording:
            self._span.set_attributes({k: v for k, v in attributes.items() if v is not None})

    def fail(self, error_type: str, description: str | None = None) -> None:
        """Marks the span failed (status ERROR) with ``error.type``."""
        if self.recording:
            self._span.set_attribute("error.type", error_type)
            self._span.set_status(trace.StatusCode.ERROR, description or error_type)


def _tracer() -> Any:
    """The provider's tracer; None while no provider is set (a span would record nothing).

    Without one, OpenTelemetry's API still makes each span and makes it current:
    tens of microseconds per span, four spans per execution, for nothing.
    """
    provider = trace.get_tracer_provider()  # the one OTEL_PYTHON_TRACER_PROVIDER names, too
    if isinstance(provider, (trace.ProxyTracerProvider, trace.NoOpTracerProvider)):
        return None
    return provider.get_tracer("kernelexec", __version__)


@contextlib.contextmanager
def span(
    name: str,
    attributes: Mapping[str, AttributeValue | None] | None = None,
    *,
    context: Any = None,
    kind: Any = None,
) -> Iterator[Traced]:
    """A span, current while the block runs; an exception ending it marks it failed.

    Args:
        name: the span's name.
        attributes: set at its start (None values left out).
        context: the OpenTelemetry context to start in (a parent from a request).
        kind: a ``SpanKind``; default INTERNAL.
    """
    tracer = _tracer() if trace is not None else None
    if tracer is None:
        yield Traced()
        return
    # Our own status and error.type rather than the SDK's: it would record the
    # exception's message, which may quote the code or its output.
    with tracer.start_as_current_span(
        name,
        context=context,
        kind=kind or trace.SpanKind.INTERNAL,
        record_exception=False,
        set_status_on_exception=False,
    ) as current:
        traced = Traced(current)
        traced.set(attributes or {})
        try:
            yield traced
        except Exception as exc:
            traced.fail(type(exc).__name__, str(exc) if _capturing() else None)
            raise
        except BaseException as exc:  # cancelled: no failure, but say why it ended
            traced.set({"error.type": type(exc).__name__})
            raise


def _session_attributes(session: AsyncSession) -> dict[str, AttributeValue | None]:
    return {
        "kernelexec.session.id": session.work_dir.name,
        "kernelexec.kernel.backend": _backend_name(session._backend),
    }


def session_span(name: str) -> Callable[[F], F]:
    """Decorates a method of ``AsyncSession`` (sync or async) to run in span ``name``."""

    def decorate(method: F) -> F:
        if inspect.iscoroutinefunction(method):

            @functools.wraps(method)
            async def run_async(session: AsyncSession, *args: Any, **kwargs: Any) -> Any:
                with span(name, _session_attributes(session)):
                    return await method(session, *args, **kwargs)

            return cast(F, run_async)

        @functools.wraps(method)
        def run(session: AsyncSession, *args: Any, **kwargs: Any) -> Any:
            # __init__: the attributes exist only once it has run.
            with span(name) as traced:
                done = method(session, *args, **kwargs)
                if traced.recording:
                    traced.set(_session_attributes(session))
                    traced.set({"kernelexec.session.pool": session._pool is not None})
                return done

        return cast(F, run)

    return decorate


def kernel_start(session: AsyncSession) -> contextlib.AbstractContextManager[Traced]:
    """The span of a session's kernel starting; ``note_kernel`` says how it started."""
    return span(
        "kernelexec.kernel.start",
        {
            "kernelexec.session.id": session.work_dir.name,
            "kernelexec.kernel.name": session._config.kernel_name,
        },
    )


async def kernel_restart(session: AsyncSession, restarting: Awaitable[None]) -> None:
    """Awaits ``restarting`` (the backend's restart) in a ``kernelexec.kernel.start`` span."""
    with kernel_start(session) as traced:
        traced.set({"kernelexec.kernel.restart": True})
        await restarting
        note_kernel(traced, session._backend, pooled=False)


def note_kernel(traced: Traced, backend: object, *, pooled: bool) -> None:
    """Says on ``traced`` how ``backend``'s kernel started: pool, zygote, cold, docker, gateway."""
    if not traced.recording:
        return
    name = _backend_name(backend)
    forked = getattr(backend, "forked", None)
    if pooled:
        method = "pool"
    elif name == "local":
        method = "zygote" if forked else "cold"
    else:
        method = name
    traced.set(
        {
            "kernelexec.kernel.backend": name,
            "kernelexec.kernel.start_method": method,
            "kernelexec.kernel.forked": forked if isinstance(forked, bool) else None,
        }
    )


def _backend_name(backend: object) -> str:
    from ._backends import DockerBackend, GatewayBackend, LocalBackend

    for kind, name in ((LocalBackend, "local"), (DockerBackend, "docker")):
        if isinstance(backend, kind):
            return name
    return "gateway" if isinstance(backend, GatewayBackend) else type(backend).__name__


def execution(method: F) -> F:
    """Decorates a session's ``_execute(session, code, language, ...)`` to run in its span."""

    @functools.wraps(method)
    async def run(
        session: AsyncSession, code: str, language: str, *args: Any, **kwargs: Any
    ) -> Any:
        with span(
            "kernelexec.execute",
            {
                "kernelexec.session.id": session.work_dir.name,
                "kernelexec.execution.language": language,
            },
        ) as traced:
            if traced.recording:
                traced.set({"kernelexec.execution.code_bytes": len(code.encode(errors="replace"))})
                if _capturing():
                    traced.set({"kernelexec.execution.code": code[:CONTENT_CHARS]})
            try:
                result = await method(session, code, language, *args, **kwargs)
            except BaseException as exc:
                # A cancelled execution's exception may carry the result recorded for it.
                kept = getattr(exc, "result", None)
                if kept is not None:
                    _note_result(traced, kept)
                raise
            _note_result(traced, result)
            return result

    return cast(F, run)


def _note_result(traced: Traced, result: ExecutionResult) -> None:
    if not traced.recording:
        return
    outputs = json.dumps(result.outputs, ensure_ascii=False, default=str)
    traced.set(
        {
            "kernelexec.execution.status": result.status,
            "kernelexec.execution.execution_count": result.execution_count,
            "kernelexec.execution.duration_s": result.duration,
            "kernelexec.execution.output_bytes": len(outputs.encode(errors="replace")),
            "kernelexec.execution.file_count": len(result.files),
            "kernelexec.execution.restarted": result.restarted,
        }
    )
    usage = result.usage
    if usage is not None:
        traced.set(
            {
                "kernelexec.usage.wall_seconds": usage.wall_seconds,
                "kernelexec.usage.user_seconds": usage.user_seconds,
                "kernelexec.usage.system_seconds": usage.system_seconds,
                "kernelexec.usage.peak_rss_bytes": usage.peak_rss_bytes,
                "kernelexec.usage.children_user_seconds": usage.children_user_seconds,
                "kernelexec.usage.children_system_seconds": usage.children_system_seconds,
                "kernelexec.usage.children_max_rss_bytes": usage.children_max_rss_bytes,
            }
        )
    if _capturing():
        traced.set({"kernelexec.execution.text": result.text[:CONTENT_CHARS]})
    if result.status not in _NOT_FAILED:
        error = result.error.ename if result.error is not None else None
        # An exception's name says what failed; its value may quote the data.
        traced.fail(
            _error_type(error) if result.status == "error" and error else result.status,
            result.status,
        )


def _error_type(name: str) -> str:
    """``error.type`` for an exception the kernel reported by ``name``.

    Built-in (and kernelexec's own) names as they are; any other name only
    when the operator captures content, else ``OTHER_ERROR``.
    """
    return name if name in _NAMED_ERRORS or _capturing() else OTHER_ERROR


def transcript_write(cells: int) -> contextlib.AbstractContextManager[Traced]:
    """The span of one batch of ``cells`` cells written to a transcript."""
    return span("kernelexec.transcript.write", {"kernelexec.transcript.cells": cells})


class TraceRequests:
    """ASGI middleware: a SERVER span per HTTP request, continuing the caller's ``traceparent``.

    Only the ``traceparent`` and ``tracestate`` headers are read: no other
    header (the token, cookies) reaches the propagator or a span.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or trace is None:
            await self.app(scope, receive, send)
            return
        carrier = {
            key.decode("latin-1"): value.decode("latin-1")
            for key, value in scope.get("headers", [])
            if key in (b"traceparent", b"tracestate")
        }
        method = str(scope.get("method", "GET"))
        answered: list[int] = []

        async def send_traced(message: Message) -> None:
            if message["type"] == "http.response.start":
                answered.append(int(message["status"]))
            await send(message)

        with span(
            method,
            {"http.request.method": method, "url.path": str(scope.get("path", ""))},
            context=propagate.extract(carrier),
            kind=trace.SpanKind.SERVER,
        ) as traced:
            try:
                await self.app(scope, receive, send_traced)
            finally:
                _note_response(traced, scope, method, answered)


def _note_response(traced: Traced, scope: Scope, method: str, answered: list[int]) -> None:
    if not traced.recording:
        return
    # Starlette's router leaves the matched route in the scope (a template, not the path).
    route = getattr(scope.get("route"), "path", None)
    if isinstance(route, str):
        traced._span.update_name(f"{method} {route}")
        traced.set({"http.route": route})
    if answered:
        traced.set({"http.response.status_code": answered[0]})
        if answered[0] >= 500:
            traced.fail(str(answered[0]))
