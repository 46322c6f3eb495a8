"""envd's HTTP API in a sandbox: ``/health`` and ``/files`` (``files.read``, ``files.write``).

A file is read and written through the session's files, as the server's own
files routes do (``kernelexec/_server/_files.py``): walked from a handle on the
work dir with no link followed, an upload whole or not at all, the tenant's
work-dir quota held as the bytes come. The SDK writes text and bytes as
``multipart/form-data`` (one part per file, the part's file name its path) and
streams as ``application/octet-stream`` (``?path=``).
"""

from __future__ import annotations

import posixpath
from collections.abc import AsyncIterator
from typing import Any

from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import Response

from ..._tenants._models import Tenant
from .._auth import caller
from .._bodies import body_chunks, drain
from .._errors import ApiError, JSONResponse
from .._files import download, write_file
from .._registry import Entry, Registry
from ._control import sandboxes_of
from ._paths import e2b_path, parts_for

__all__ = ["health", "read_file", "write_files"]

_CHUNK = 256 * 1024
_MAX_PARTS = 100  # files one multipart upload may carry


async def health(request: Request) -> Response:
    sandboxes_of(request).reach(request.headers.get("e2b-sandbox-id"), caller(request))
    return Response(status_code=204)


def _here(request: Request) -> Entry:
    _, entry = sandboxes_of(request).reach(request.headers.get("e2b-sandbox-id"), caller(request))
    return entry


def _path(request: Request) -> list[str]:
    return parts_for(request.query_params.get("path", ""))


async def read_file(request: Request) -> Response:
    entry = _here(request)
    parts = _path(request)
    if not parts:
        raise ApiError(400, "not_a_file", "the sandbox's home is a folder, not a file")
    return await download(entry.session.file_access, "/".join(parts))


async def write_files(request: Request) -> Response:
    entry = _here(request)
    registry = sandboxes_of(request).registry
    tenant = caller(request).tenant
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind == "multipart/form-data":
        written = await _multipart(request, registry, entry, tenant)
    else:
        if request.headers.get("content-encoding", "identity") != "identity":
            await drain(request, registry.config.max_body)
            raise ApiError(415, "unsupported_encoding", "send the file uncompressed (gzip=False)")
        parts = _path(request)
        declared = request.headers.get("content-length", "")
        size = int(declared) if declared.isdigit() else 0
        chunks = body_chunks(request, registry.config.max_body)
        written = [await _write(registry, entry, tenant, parts, chunks, size)]
    return JSONResponse(written)


async def _multipart(
    request: Request, registry: Registry, entry: Entry, tenant: Tenant
) -> list[dict[str, Any]]:
    one = request.query_params.get("path")
    try:
        form = await request.form(max_files=_MAX_PARTS, max_fields=_MAX_PARTS)
    except AssertionError:  # Starlette's words for no python-multipart
        raise ApiError(501, "not_supported", "the server lacks the e2b extra") from None
    except Exception as exc:  # python-multipart's parse errors, and Starlette's limits
        raise ApiError(400, "invalid_multipart", f"cannot read the upload: {exc}") from None
    written = []
    try:
        files = [v for _, v in form.multi_items() if isinstance(v, UploadFile)]
        if one is not None and len(files) != 1:
            raise ApiError(400, "invalid_multipart", "?path= names one file: send one part")
        for upload in files:
            parts = parts_for(one if one is not None else upload.filename or "")
            written.append(
                await _write(registry, entry, tenant, parts, _read(upload), upload.size or 0)
            )
    finally:
        await form.close()
    return written


async def _read(upload: UploadFile) -> AsyncIterator[bytes]:
    while chunk := await upload.read(_CHUNK):
        yield chunk


async def _write(
    registry: Registry,
    entry: Entry,
    tenant: Tenant,
    parts: list[str],
    chunks: AsyncIterator[bytes],
    size: int,
) -> dict[str, Any]:
    if not parts:
        raise ApiError(409, "not_a_file", "the sandbox's home is a folder, not a file")
    entry.touch()
    room = await registry.quotas.check_upload(entry, tenant, size)
    if room is not None:
        chunks = _at_most(chunks, room, registry, tenant)
    info = await write_file(
        entry.session.file_access,
        entry.work_dir,
        "/".join(parts),
        chunks,
        notebook=entry.session.notebook_path,
        size=size,
    )
    path = e2b_path(info.path.split("/"))
    return {"name": posixpath.basename(path), "type": "file", "path": path}


async def _at_most(
    chunks: AsyncIterator[bytes], room: int, registry: Registry, tenant: Tenant
) -> AsyncIterator[bytes]:
    """The chunks, refused once past ``room``: a body of no declared length is held to
    the work-dir quota as it comes."""
    sent = 0
    async for chunk in chunks:
        sent += len(chunk)
        if sent > room:
            most = tenant.quotas.work_dir_bytes or 0
            raise registry.quotas.too_much(tenant, sent + most - room, most)
        yield chunk
