"""The start-up contract of ``serve``, ``gateway`` and ``mcp --http``.

Everything that can stop a server from working is checked before it says
it is serving: the port is a TCP port (``check_port``) and is bound by this
process, whose bound socket is what the server then accepts on (so nothing
can take the port between the check and the serving); the token follows the
one rule (``check_token``); the work root is a folder in which this process
can create session folders. A failure raises ConfigurationError, which
``main`` prints as one line naming the fix, with exit status 2.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from .._environment import share_pages
from .._exceptions import ConfigurationError
from .._server._config import is_loopback
from .._server._token import check_token, generate_token

__all__ = [
    "DEFAULT_PORTS",
    "add_zygote_option",
    "apply_zygote_option",
    "resolve_token",
    "url",
    "usable_work_root",
]

# Distinct from one another and from JupyterLab's 8888 (and the 8889... it
# moves to when 8888 is taken), so that any two of them can run side by side.
DEFAULT_PORTS = {"serve": 8765, "mcp": 8766, "gateway": 8767}


def resolve_token(given: str | None, host: str) -> tuple[str, bool]:
    """The token a server requires, and whether it was generated here.

    Args:
        given: ``--token`` (or ``$KERNELEXEC_TOKEN``), if any.
        host: where the server will listen.

    Raises:
        ConfigurationError: ``given`` breaks the token rule, or none is given
            for an address other than loopback.
    """
    if given:
        return check_token(given), False
    if not is_loopback(host):
        # A token printed on a terminal is easy to lose track of; off loopback
        # whoever reaches the port can run code, so the choice is made on purpose.
        raise ConfigurationError(
            f"refusing to listen on {host} without a token: pass --token (or set "
            "KERNELEXEC_TOKEN), since anyone who reaches the port could run code"
        )
    return generate_token(), True


def usable_work_root(given: Path | None, *, prefix: str) -> tuple[Path, bool]:
    """The work root as an absolute path, once a session folder can be made in it.

    Args:
        given: ``--work-root``; made (with its parents) when missing.
        prefix: the name prefix of the temp dir made when ``given`` is None.

    Returns:
        The folder, and whether it is a temp dir made here (the caller
        removes it, still empty, if start-up fails later).

    Raises:
        ConfigurationError: it is not a folder, or this user cannot create one
            in it (no permission, a read-only file system, ...).
    """
    if given is None:
        return Path(tempfile.mkdtemp(prefix=prefix)).resolve(), True
    root = given.expanduser().resolve()
    fix = "pass a folder this user can write to (or no --work-root, for a new temp dir)"
    try:
        root.mkdir(parents=True, exist_ok=True)
        # A real folder made and removed: the only check that is right for
        # root too, and for ACLs, read-only mounts and full inode tables.
        os.rmdir(tempfile.mkdtemp(prefix=".kernelexec-check-", dir=root))
    except FileExistsError:
        raise ConfigurationError(f"--work-root {root} exists and is not a folder: {fix}") from None
    except NotADirectoryError:
        raise ConfigurationError(
            f"--work-root {root} is below a file, not a folder: {fix}"
        ) from None
    except OSError as exc:
        raise ConfigurationError(
            f"--work-root {root} is not usable ({exc.strerror or exc}): {fix}"
        ) from None
    return root, False


def url(host: str, port: int, path: str = "") -> str:
    """``http://host:port/path``, with an IPv6 address in brackets."""
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{port}{path}"


def add_zygote_option(parser: argparse.ArgumentParser) -> None:
    """``--no-zygote`` and ``--share-pages``, for the commands whose sessions run local kernels."""
    parser.add_argument(
        "--no-zygote",
        action="store_true",
        help="start every local kernel cold instead of forking it from a zygote "
        "(as KERNELEXEC_ZYGOTE=0 does)",
    )
    parser.add_argument(
        "--share-pages",
        action="store_true",
        help="offer the zygotes' memory, and so their kernels', to Linux's same-page merging "
        "(KSM, where root has turned it on): idle kernels share the pages they hold alike "
        "(as KERNELEXEC_SHARE_PAGES=1 does). Not with --tenants: a kernel can tell by timing "
        "whether another holds a page like one of its own",
    )


def apply_zygote_option(args: argparse.Namespace) -> None:
    """Sets what the zygote options ask for, where every local kernel start reads it.

    Raises:
        ConfigurationError: ``--share-pages`` (or ``KERNELEXEC_SHARE_PAGES=1``) with
            ``--tenants``.
    """
    # The variables are what every local kernel start reads (kernelexec._environment);
    # a kernel never sees them (KERNELEXEC_* is kept from kernels).
    if args.no_zygote:
        os.environ["KERNELEXEC_ZYGOTE"] = "0"
    if args.share_pages or share_pages():
        if getattr(args, "tenants", None):
            raise ConfigurationError(
                "--share-pages merges identical pages across every kernel of the machine, "
                "and a kernel can tell by timing whether another holds a page like one of its "
                "own: not with --tenants (run a server per tenant to share pages within one)"
            )
        os.environ["KERNELEXEC_SHARE_PAGES"] = "1"
