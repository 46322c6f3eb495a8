"""E2B's code interpreter in a sandbox: ``run_code`` and its code contexts.

``POST /execute`` answers one JSON object a line as the code runs, as E2B's
Jupyter server does: ``stdout``/``stderr`` text, each ``result`` with its MIME
types under E2B's names (``text``, ``png``, ``html``, ...; others in ``extra``),
the ``error`` (name, value, traceback) and ``number_of_executions``. The SDK's
``timeout`` is its own: when it gives up (or its caller goes away) the connection
closes, and the execution here is interrupted, its state kept.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from ..._exceptions import KernelexecError, SessionClosedError
from ..._execution._languages import normalize_language
from ..._execution._live import LiveOutput
from ..._execution._models import ExecutionResult
from .._auth import caller
from .._errors import ApiError, JSONResponse
from .._registry import Entry
from ._control import read_object, sandboxes_of
from ._errors import not_supported
from ._paths import HOME, e2b_path, parts_for
from ._sandboxes import Context, Sandbox
from ._streaming import Run, streamed

__all__ = ["create_context", "execute", "list_contexts", "remove_context", "restart_context"]

# nbformat's MIME types by the name E2B's Result gives each; any other goes in ``extra``.
_MIMES = {
    "text/plain": "text",
    "text/html": "html",
    "text/markdown": "markdown",
    "image/svg+xml": "svg",
    "image/png": "png",
    "image/jpeg": "jpeg",
    "application/pdf": "pdf",
    "text/latex": "latex",
    "application/json": "json",
    "application/javascript": "javascript",
}
# An execution that ended without the code's own error, as an error the SDK reads.
_ENDED = {
    "timeout": "TimeoutError",
    "kernel_died": "KernelDied",
    "cancelled": "Cancelled",
    "quota_exceeded": "QuotaExceeded",
}


def _here(request: Request) -> tuple[Sandbox, Entry]:
    return sandboxes_of(request).reach(request.headers.get("e2b-sandbox-id"), caller(request))


def _language(value: Any) -> str:
    """ "python" or "bash"; E2B's other kernels (JavaScript, R, Java) are 501."""
    if value is not None and not isinstance(value, str):
        raise ApiError(400, "invalid_request", "language must be a string")
    normalized = normalize_language(value)
    if normalized is None:
        raise not_supported(
            f"language {str(value)[:40]!r}", "a kernelexec sandbox runs python and bash"
        )
    return normalized


def result_line(output: dict[str, Any]) -> dict[str, Any]:
    """An nbformat display or result as E2B's ``result`` line."""
    line: dict[str, Any] = {
        "type": "result",
        "is_main_result": output["output_type"] == "execute_result",
    }
    extra: dict[str, Any] = {}
    for mime, value in (output.get("data") or {}).items():
        name = _MIMES.get(mime)
        if name is None:
            extra[mime] = value
        else:
            line[name] = "".join(value) if isinstance(value, list) else value
    if extra:
        line["extra"] = extra
    return line


def live_line(output: LiveOutput) -> dict[str, Any] | None:
    """One output as it happens, as E2B's line; None for what E2B does not send (the
    error comes once, from the result; clear and update events are a notebook's)."""
    kind = output.type
    if kind == "stream":
        name = "stderr" if output.get("name") == "stderr" else "stdout"
        return {"type": name, "text": output.get("text", ""), "timestamp": time.time_ns()}
    if kind in ("display_data", "execute_result"):
        return result_line(output.output)
    return None


def final_lines(result: ExecutionResult) -> list[dict[str, Any]]:
    lines: list[dict[str, Any]] = []
    if result.error is not None:
        lines.append(
            {
                "type": "error",
                "name": result.error.ename,
                "value": result.error.evalue,
                "traceback": "\n".join(result.error.traceback),
            }
        )
    elif result.status in _ENDED:
        name = _ENDED[result.status]
        lines.append(
            {"type": "error", "name": name, "value": result.message or "", "traceback": ""}
        )
    if result.execution_count is not None:
        lines.append({"type": "number_of_executions", "execution_count": result.execution_count})
    return lines


async def _lines(run: Run, release: Callable[[], None]) -> AsyncIterator[bytes]:
    """The execution's lines as they come; the execution is cancelled (the kernel
    interrupted, its state kept) if the client goes away first."""
    try:
        async with contextlib.aclosing(streamed(run)) as items:
            async for item in items:
                if isinstance(item, ExecutionResult):
                    for last in final_lines(item):
                        yield _encode(last)
                elif (line := live_line(item)) is not None:
                    yield _encode(line)
    except (SessionClosedError, KernelexecError) as exc:
        yield _encode(
            {"type": "error", "name": type(exc).__name__, "value": str(exc), "traceback": ""}
        )
    finally:
        release()


def _encode(line: dict[str, Any]) -> bytes:
    return json.dumps(line, ensure_ascii=True).encode("ascii") + b"\n"


async def execute(request: Request) -> Response:
    sandbox, entry = _here(request)
    data = await read_object(request)
    code = data.get("code")
    if not isinstance(code, str):
        raise ApiError(400, "invalid_request", "code must be a string")
    if data.get("env_vars"):
        raise not_supported(
            "run_code(envs=...)", "give the variables to Sandbox.create(envs=...) instead"
        )
    context_id = data.get("context_id")
    registry = sandboxes_of(request).registry
    tenant = caller(request).tenant
    registry.quotas.check_cpu(tenant)
    if context_id is not None and context_id != sandbox.id:
        context = _context(sandbox, context_id)
        language = context.language

        async def in_context(listen: Callable[[LiveOutput], None]) -> ExecutionResult:
            return await context.session.execute(code, language=language, on_output=listen)

        return _streamed(in_context, lambda: None)
    language = _language(data.get("language"))
    held = await registry.acquire(entry.id)  # resumed first, if it was suspended

    async def in_sandbox(listen: Callable[[LiveOutput], None]) -> ExecutionResult:
        held.executions += 1
        registry.quotas.poke()
        result = await held.session.execute(code, language=language, on_output=listen)
        return await registry.quotas.after_execution(held, result)

    return _streamed(in_sandbox, lambda: registry.release(held))


def _streamed(run: Run, release: Callable[[], None]) -> Response:
    return StreamingResponse(
        _lines(run, release),
        media_type="application/x-ndjson",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


def _context(sandbox: Sandbox, context_id: Any) -> Context:
    found = sandbox.contexts.get(context_id) if isinstance(context_id, str) else None
    if found is None:
        raise ApiError(
            404,
            "context_not_found",
            f"no code context {str(context_id)[:64]!r} in this sandbox (list_code_contexts)",
        )
    return found


def _default(sandbox: Sandbox) -> dict[str, str]:
    return {"id": sandbox.id, "language": "python", "cwd": HOME}


async def create_context(request: Request) -> Response:
    sandbox, entry = _here(request)
    data = await read_object(request)
    language = _language(data.get("language"))
    cwd = e2b_path(parts_for(data.get("cwd") or HOME, what="cwd"))
    made = await sandboxes_of(request).add_context(sandbox, entry, language, cwd)
    return JSONResponse(made.to_dict())


async def list_contexts(request: Request) -> Response:
    sandbox, _ = _here(request)
    return JSONResponse([_default(sandbox), *(c.to_dict() for c in sandbox.contexts.values())])


async def remove_context(request: Request) -> Response:
    sandbox, _ = _here(request)
    context_id = str(request.path_params["context_id"])
    if context_id == sandbox.id:
        raise ApiError(
            400, "default_context", "the default context lives as long as its sandbox (kill it)"
        )
    context = _context(sandbox, context_id)
    del sandbox.contexts[context_id]
    await context.session.close()
    return Response(status_code=204)


async def restart_context(request: Request) -> Response:
    sandbox, entry = _here(request)
    context_id = str(request.path_params["context_id"])
    registry = sandboxes_of(request).registry
    try:
        if context_id == sandbox.id:
            await registry.restart(entry.id)
        else:
            await _context(sandbox, context_id).session.restart()
    except KernelexecError as exc:
        raise ApiError(503, "kernel_unavailable", str(exc)) from None
    return Response(status_code=204)
