"""E2B's SDK against ``kernelexec serve --e2b``: code written for E2B runs unchanged.

E2B's Python SDK (``e2b-code-interpreter``, over ``e2b``) talks to two places,
each a setting of its own: E2B's API (``E2B_API_URL``) and each sandbox's envd
and Jupyter server (``E2B_SANDBOX_URL``, every sandbox told apart by its
``E2b-Sandbox-Id`` header). The server answers both under ``/e2b`` (the API)
and ``/e2b/sandbox`` (the sandboxes); ``E2B_API_KEY`` is a token of the server,
checked on every request (``TenantAuth`` reads it from E2B's headers,
``KEY_HEADERS``).

- ``_sandboxes.py``: a sandbox is a session of the registry, with its timeout
  and its code contexts (each a kernel of its own in the sandbox's work dir).
- ``_paths.py``: E2B's absolute paths read as names under the work dir
  (``/home/user`` is the work dir; any other path is refused).
- ``_control.py``: the API's routes: create, list, get, kill, set_timeout, connect.
- ``_code.py``: ``run_code`` (one JSON line per output, as it runs) and contexts.
- ``_envd.py``: envd's ``/health`` and ``/files`` (``files.read``, ``files.write``).
- ``_filesystem.py`` and ``_connect.py``: envd's Connect RPC services: the
  filesystem's (list, exists, get_info, remove, make_dir, rename) and
  ``commands.run``, run as a bash cell in the sandbox's kernel.
- ``_streaming.py``: an execution's live outputs as they come, for both streams.
- ``_errors.py``: every error as the SDK reads it, and 501 for what is not served.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from .._auth import KeyHeaders
from .._routing import ScopedRoute, route
from ._code import create_context, execute, list_contexts, remove_context, restart_context
from ._connect import filesystem_call, process_call
from ._control import (
    connect_sandbox,
    create_sandbox,
    get_sandbox,
    kill_sandbox,
    list_sandboxes,
    set_timeout,
)
from ._envd import health, read_file, write_files
from ._errors import E2BErrorCodes, not_supported
from ._sandboxes import Sandboxes

__all__ = ["E2B_ROUTES", "KEY_HEADERS", "PREFIX", "E2BErrorCodes", "Sandboxes"]

PREFIX = "/e2b"
_SANDBOX = f"{PREFIX}/sandbox"
_ID = "{sandbox_id}"

# The sandbox's first: its paths are under the API's too.
KEY_HEADERS = (
    KeyHeaders(
        f"{_SANDBOX}/",
        (b"x-access-token", b"e2b-traffic-access-token"),
        "as E2B_API_KEY (the SDK sends it to a sandbox as X-Access-Token)",
    ),
    KeyHeaders(f"{PREFIX}/", (b"x-api-key",), "as E2B_API_KEY (the SDK sends it as X-API-KEY)"),
)


async def _unknown(request: Request) -> Response:
    where = request.url.path.removeprefix(PREFIX) or "/"
    raise not_supported(f"call {request.method} {where}")


_ANY = {m: (_unknown, None) for m in ("GET", "POST", "PUT", "PATCH", "DELETE")}

E2B_ROUTES: list[ScopedRoute] = [
    *(
        route(
            f"{PREFIX}{v}/sandboxes",
            GET=(list_sandboxes, "sessions"),
            POST=(create_sandbox, "sessions"),
        )
        for v in ("", "/v2")
    ),
    route(
        f"{PREFIX}/sandboxes/{_ID}",
        GET=(get_sandbox, "sessions"),
        DELETE=(kill_sandbox, "sessions"),
    ),
    route(f"{PREFIX}/sandboxes/{_ID}/timeout", POST=(set_timeout, "sessions")),
    *(
        route(f"{PREFIX}{v}/sandboxes/{_ID}/connect", POST=(connect_sandbox, "sessions"))
        for v in ("", "/v2")
    ),
    route(f"{_SANDBOX}/health", GET=(health, None)),
    route(f"{_SANDBOX}/files", GET=(read_file, "files:read"), POST=(write_files, "files:write")),
    route(f"{_SANDBOX}/execute", POST=(execute, "execute")),
    route(f"{_SANDBOX}/contexts", GET=(list_contexts, "execute"), POST=(create_context, "execute")),
    route(f"{_SANDBOX}/contexts/{{context_id}}", DELETE=(remove_context, "execute")),
    route(f"{_SANDBOX}/contexts/{{context_id}}/restart", POST=(restart_context, "execute")),
    # Each method's scope is checked in the handler: reading and writing differ.
    route(f"{_SANDBOX}/filesystem.Filesystem/{{method}}", POST=(filesystem_call, None)),
    route(f"{_SANDBOX}/process.Process/{{method}}", POST=(process_call, "execute")),
    route(f"{PREFIX}/{{rest:path}}", **_ANY),
]
